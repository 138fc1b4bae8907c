"""One self-contained HTML report of runs and sweeps: inline SVG plots and tables, nothing fetched.

The verdict comes first: the page's first heading is the worst of the replayer's verdicts on the runs
(HELD, DEGRADED, FAILED, UNMEASURED), with each run's reasons under it. Plots, each the page's width:
pods running over trace time (the recording dashed, every run overlaid), pods pending, nodes, and, for
a sweep, the cost-vs-reliability scatter with its Pareto frontier. A recording without pods (every
SimKube trace) plots the pods its workloads asked for instead, and says so in the legend: a flat 0
would read as "nothing happened". A timeline on which nothing is ever above 0 (no pod pending in the
recording or any run) is a sentence, not an empty chart. The comparison is tables that wrap or scroll
within the page, every column headed by what it holds (``recorded`` and ``replayed`` spelled out).

The page of one replay's own report (``kubetape report``) is :mod:`pipeline.analytics.replay_page`; it
shares this page's frame (:func:`html_page`) and verdict (:func:`verdict_section`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pipeline.analytics.compare import Comparison, recorded_truth, replay_verdict, series
from pipeline.analytics.runs import Run
from pipeline.analytics.stats import Interval
from pipeline.analytics.svg import Point, line_chart, scatter_chart
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, TimelineRow

RECORDED = "recorded"
REPLAYED = "replayed"
DESIRED = "recorded: desired pods"
"""The legend of the recording's line when it holds no pods: what its workloads asked for."""

VERDICT_ORDER = ("failed", "degraded", "unmeasured", "unknown", "held")
"""The replayer's verdicts, worst first: a page of several runs is headed by its worst."""

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em auto;padding:0 2em;max-width:1200px}"
    ".verdict{border-left:8px solid #888;padding:.2em 1em;margin:0 0 1.5em;background:#f6f6f6}"
    ".verdict h1{margin:.3em 0}.verdict ul{margin:.3em 0 .6em}"
    ".verdict-held{border-color:#2ca02c}.verdict-degraded{border-color:#ff7f0e}"
    ".verdict-failed{border-color:#d62728}"
    ".table-wrap{max-width:100%;overflow-x:auto;margin:1em 0}"
    "table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px;text-align:left;vertical-align:top}"
    # a chart takes the page's width, whatever its drawn size (the viewBox keeps its proportions)
    "figure{margin:1em 0}figure svg{display:block;width:100%;height:auto}"
    "figcaption,.no-chart{font-size:13px;color:#444}"
)


def html_page(title: str, sections: Sequence[str]) -> str:
    """A whole self-contained HTML document of ``sections``, with the reports' style."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )


def worst_verdict(verdicts: Sequence[str]) -> str:
    """The worst of ``verdicts`` by :data:`VERDICT_ORDER` (a word not in it ranks as ``unknown``)."""
    return min(verdicts, key=_order, default="unknown")


def _order(verdict: str) -> int:
    return VERDICT_ORDER.index(verdict if verdict in VERDICT_ORDER else "unknown")


def verdict_section(verdict: str, what: str, reasons: Sequence[str], fine: str = "") -> str:
    """The page's head: its first heading is ``VERDICT — what``, the reasons (or ``fine``, when there
    are none) under it."""
    word = verdict if verdict in VERDICT_ORDER else "unknown"
    items = "".join(f"<li>{escape(reason)}</li>" for reason in reasons)
    body = f'<ul class="reasons">{items}</ul>' if reasons else f"<p>{escape(fine)}</p>" if fine else ""
    return (
        f'<header class="verdict verdict-{word}" data-verdict="{escape(verdict)}">'
        f"<h1>{escape(verdict.upper())} — {escape(what)}</h1>{body}</header>"
    )


def _runs_verdict(runs: Sequence[Run]) -> str:
    verdicts = {run.info.name: replay_verdict(run.report) for run in runs}
    words = [str(v["verdict"]) for v in verdicts.values()]
    counts = ", ".join(f"{words.count(word)} {word}" for word in sorted(set(words), key=_order))
    reasons = [f"{name}: {reason}" for name, v in verdicts.items() for reason in v["reasons"]]
    worst = worst_verdict(words)
    fine = (
        "every run's pods stayed within the bound of the recording, and the machine kept up"
        if worst == "held"
        else "the runs' reports give no reasons (a run directory without the replayer's verdict)"
    )
    return verdict_section(worst, f"{len(runs)} run{'s' if len(runs) != 1 else ''}: {counts}", reasons, fine)


def no_chart(chart_id: str, sentence: str) -> str:
    """What stands where a chart would hold nothing: a sentence saying so."""
    return f'<p class="no-chart" data-no-chart="{escape(chart_id)}">{escape(sentence)}</p>'


def is_empty(lines: Mapping[str, Sequence[Point]]) -> bool:
    """Whether a chart of ``lines`` would show nothing: no point, or every value 0."""
    return not any(y for points in lines.values() for _, y in points)


def _points(rows: Sequence[TimelineRow], column: str) -> list[Point]:
    return [(float(t), v) for t, v in sorted(series(rows, CLUSTER_OWNER, column).items())]


def _pods_recorded(rows: Sequence[TimelineRow]) -> bool:
    return any(r.pending or r.running or r.succeeded or r.failed for r in rows if r.owner == CLUSTER_OWNER)


def recorded_line(rows: Sequence[TimelineRow], column: str) -> tuple[str, list[Point]] | None:
    """The recording's line for ``column`` and its legend, or None where the recording says nothing.

    Running pods: the recorded ones, or, when the trace holds no pods, the pods its workloads asked
    for (the same rule fidelity judges by). Pending pods and nodes of a trace that recorded none
    are unknown, not zero: no line rather than a flat 0.
    """
    if column == "running":
        points = [(float(t), v) for t, v in sorted(recorded_truth(rows, CLUSTER_OWNER).items())]
        asked = not _pods_recorded(rows) and any(r.desired is not None for r in rows)
        return (DESIRED if asked else RECORDED), points
    if column == "pending" and not _pods_recorded(rows):
        return None
    if column == "nodes" and not any(r.nodes for r in rows):
        return None
    return RECORDED, _points(rows, column)


def _caption(legend: str | None, column: str) -> str:
    if legend == DESIRED:
        return (
            "The trace records no pods (SimKube traces never do): the dashed line is the pods its "
            "workloads asked for (their replicas over time)."
        )
    if legend is None:
        what = "pods" if column == "pending" else "nodes"
        return f"The trace records no {what}: only the runs are plotted."
    return "Dashed: the recording; solid: the runs."


_NOTHING = {
    "running": "No pods ran: neither the recording nor any run had a pod running.",
    "pending": "No pending pods: neither the recording nor any run had a pod pending.",
    "nodes": "No nodes: neither the recording nor any run had a node.",
}


def timeline_charts(runs: Sequence[Run]) -> list[str]:
    """One ``<figure>`` per timeline: the chart and a caption saying what the recording's line is; a
    timeline that is 0 throughout is a sentence saying so instead (an empty chart says nothing)."""
    charts = []
    for column, title in (
        ("running", "Pods running"),
        ("pending", "Pods pending"),
        ("nodes", "Nodes"),
    ):
        lines: dict[str, list[Point]] = {}
        recorded = recorded_line(runs[0].recorded, column) if runs else None
        if recorded is not None:
            lines[recorded[0]] = recorded[1]
        for run in runs:
            lines[run.info.name] = _points(run.timeline, column)
        if is_empty(lines):
            charts.append(no_chart(f"timeline-{column}", _NOTHING[column]))
            continue
        chart = line_chart(
            f"timeline-{column}",
            f"{title}: recording (dashed) and runs overlaid",
            lines,
            x_label="trace seconds",
            y_label=column,
            dashed=[recorded[0]] if recorded else [],
        )
        legend = recorded[0] if recorded else None
        charts.append(f"<figure>{chart}<figcaption>{escape(_caption(legend, column))}</figcaption></figure>")
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


def html_table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, name: str = "") -> str:
    # the wrapper scrolls a table wider than the page within itself, so nothing is cut off
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    data = f' data-table="{escape(name)}"' if name else ""
    return (
        f'<div class="table-wrap"><table{data}><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _interval(interval: Interval) -> tuple[str, str, int]:
    low, high = interval.low, interval.high
    spread = "no interval" if low is None or high is None else f"[{low:.3g}, {high:.3g}]"
    return f"{interval.estimate:.3g}", spread, interval.samples


def comparison_tables(comparison: Comparison) -> list[str]:
    """The comparison as tables: fidelity per run, each configuration's metrics, the differences."""
    fidelity = []
    for name, errors in comparison.fidelity.items():
        worst = max(errors, key=lambda e: e.max_error, default=None)
        verdict = comparison.verdicts[name]
        delay, node = comparison.delays[name], comparison.nodes[name]
        fidelity.append(
            [
                name,
                f"{worst.max_error:g} ({worst.owner})" if worst else "no pods recorded or replayed",
                verdict["verdict"] + "".join(f"; {reason}" for reason in verdict["reasons"]),
                _seconds(delay["replay_p50"]),
                _seconds(delay["recorded_p50"]),
                f"{node['replay_mean']:.2f}",
                f"{node['recorded_mean']:.2f}",
            ]
        )
    confidence = f"{comparison.confidence:.0%}"
    tables = [
        "<h3>Fidelity (each replay against its recording)</h3>",
        html_table(
            [
                "run",
                "owner pod-count error, max (owner)",
                "replayer's verdict",
                f"scheduling delay p50, {REPLAYED}",
                f"scheduling delay p50, {RECORDED}",
                f"nodes mean, {REPLAYED}",
                f"nodes mean, {RECORDED}",
            ],
            fidelity,
            name="fidelity",
        ),
        f"<h3>Configurations (mean and {confidence} t-interval)</h3>",
        html_table(
            ["configuration", "runs", "metric", "mean", "interval", "n"],
            [
                [summary.config, len(summary.runs), metric, *_interval(interval)]
                for summary in comparison.configs
                for metric, interval in summary.metrics.items()
            ],
            name="configurations",
        ),
    ]
    if comparison.differences:
        tables.append(
            f"<h3>Differences against {escape(comparison.configs[0].config)} "
            "(real when the interval excludes 0)</h3>"
        )
        tables.append(
            html_table(
                ["configuration", "metric", "difference", "interval", "n", "verdict"],
                [
                    [
                        d.config,
                        d.metric,
                        *_interval(d.interval),
                        "REAL" if d.significant else "not significant",
                    ]
                    for d in comparison.differences
                ],
                name="differences",
            )
        )
    return tables


def render_report(
    title: str,
    runs: Sequence[Run],
    comparison: Comparison | None = None,
    *,
    pareto: Mapping[str, tuple[float, float]] | None = None,
    frontier: Sequence[str] = (),
    pareto_axes: tuple[str, str] = ("node_hours", "pending_pod_seconds"),
) -> str:
    """The whole report as one HTML document: the runs' verdict first (when there are runs)."""
    sections = [_runs_verdict(runs)] if runs else []
    sections.append(f"<h2>{escape(title)}</h2>")
    if pareto:
        sections.append("<h2>Sweep: cost vs reliability</h2>")
        sections.append(pareto_chart(pareto, frontier, *pareto_axes))
        names = short_names(list(pareto))
        sections.append(
            html_table(
                ["point", "configuration", pareto_axes[0], pareto_axes[1], "on frontier"],
                [
                    [names[k], k, f"{x:.4g}", f"{y:.4g}", "yes" if k in frontier else ""]
                    for k, (x, y) in pareto.items()
                ],
            )
        )
    if runs:
        sections.append("<h2>Timelines</h2>")
        sections.extend(timeline_charts(runs))
        sections.append(
            html_table(
                ["run", "configuration", "repetition", "trace"],
                [[r.info.name, r.info.config, r.info.repetition, r.info.trace] for r in runs],
            )
        )
    if comparison is not None:
        sections.append("<h2>Comparison</h2>")
        sections.extend(comparison_tables(comparison))
    return html_page(title, sections)
