"""One self-contained HTML report of runs and sweeps: inline SVG plots and tables, nothing fetched.

Plots: pods running over trace time (the recording dashed, every run overlaid), pods pending, nodes,
and, for a sweep, the cost-vs-reliability scatter with its Pareto frontier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pipeline.analytics.compare import Comparison, render_text, series
from pipeline.analytics.runs import Run
from pipeline.analytics.svg import Point, line_chart, scatter_chart
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, TimelineRow

RECORDED = "recorded"


def _points(rows: Sequence[TimelineRow], column: str) -> list[Point]:
    return [(float(t), v) for t, v in sorted(series(rows, CLUSTER_OWNER, column).items())]


def timeline_charts(runs: Sequence[Run]) -> list[str]:
    charts = []
    for column, title in (
        ("running", "Pods running"),
        ("pending", "Pods pending"),
        ("nodes", "Nodes"),
    ):
        lines: dict[str, list[Point]] = {}
        if runs:
            lines[RECORDED] = _points(runs[0].recorded, column)
        for run in runs:
            lines[run.info.name] = _points(run.timeline, column)
        charts.append(
            line_chart(
                f"timeline-{column}",
                f"{title}: recording (dashed) and runs overlaid",
                lines,
                x_label="trace seconds",
                y_label=column,
                dashed=[RECORDED],
            )
        )
    return charts


def short_names(configs: Sequence[str]) -> dict[str, str]:
    """``C1``, ``C2``, … per configuration: plot labels stay short, the table spells them out."""
    return {config: f"C{index + 1}" for index, config in enumerate(configs)}


def pareto_chart(
    points: Mapping[str, tuple[float, float]], frontier: Sequence[str], x_label: str, y_label: str
) -> str:
    return scatter_chart(
        "pareto",
        f"Pareto frontier: {y_label} vs {x_label}",
        points,
        frontier,
        x_label=x_label,
        y_label=y_label,
        short_names=short_names(list(points)),
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_report(
    title: str,
    runs: Sequence[Run],
    comparison: Comparison | None = None,
    *,
    pareto: Mapping[str, tuple[float, float]] | None = None,
    frontier: Sequence[str] = (),
    pareto_axes: tuple[str, str] = ("node_hours", "pending_pod_seconds"),
) -> str:
    """The whole report as one HTML document."""
    sections = [f"<h1>{escape(title)}</h1>"]
    if pareto:
        sections.append("<h2>Sweep: cost vs reliability</h2>")
        sections.append(pareto_chart(pareto, frontier, *pareto_axes))
        names = short_names(list(pareto))
        sections.append(
            _table(
                ["point", "configuration", pareto_axes[0], pareto_axes[1], "on frontier"],
                [
                    [names[k], k, f"{x:.4g}", f"{y:.4g}", "yes" if k in frontier else ""]
                    for k, (x, y) in pareto.items()
                ],
            )
        )
    if runs:
        sections.append("<h2>Timelines</h2>")
        sections.extend(f"<figure>{chart}</figure>" for chart in timeline_charts(runs))
        sections.append(
            _table(
                ["run", "configuration", "repetition", "trace"],
                [[r.info.name, r.info.config, r.info.repetition, r.info.trace] for r in runs],
            )
        )
    if comparison is not None:
        sections.append("<h2>Comparison</h2>")
        sections.append(f"<pre>{escape(render_text(comparison))}</pre>")
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1000px}"
        "table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px}"
        "figure{margin:1em 0}pre{background:#f6f6f6;padding:1em;overflow-x:auto}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{style}</style></head><body>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )
