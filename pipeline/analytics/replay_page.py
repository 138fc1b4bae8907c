"""The HTML page of one replay's report (``kubetape report REPORT.json --html OUT.html``).

Reads the JSON the replayer writes (``kubetape replay --report-json``, a sweep run's ``report.json``,
the demo's ``replay-*.json``): the verdict first (HELD, DEGRADED, FAILED or UNMEASURED, with its
reasons), the replay's figures, then per recorded owner its pods running, recorded (dashed) against
replayed (solid), each chart the page's width, and the whole cluster's. The report holds no pending
pods, so there is no pending chart; an owner with no pod recorded or replayed is a sentence, not an
empty chart. Shares the comparison page's frame (:mod:`pipeline.analytics.report_html`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pipeline.analytics.report_html import (
    RECORDED,
    REPLAYED,
    html_page,
    html_table,
    is_empty,
    no_chart,
    verdict_section,
)
from pipeline.analytics.svg import Point, line_chart
from pipeline.model.errors import ConfigError

_CAPTION = (
    "Dashed: the recording (its pod lifecycles, or the pods its workloads asked for where the owner "
    "is compared with desired pods); solid: the replay, as the replayer sampled it."
)


def _part(report: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    part = report.get(key)
    if not isinstance(part, Mapping):
        raise ConfigError(
            f"{where}: not a kubetape replay report (no {key!r} object); give the JSON that "
            "`kubetape replay --report-json FILE` writes (the demo writes replay-*.json into its workdir, "
            "a sweep report.json into each run directory)"
        )
    return part


def _steps(entries: Sequence[Mapping[str, Any]], end_s: float) -> list[Point]:
    """A recorded timeline (pods at each change) as points, held to ``end_s``: the last count stands
    until the replay's end, as the recording's did."""
    points = [(float(e["trace_ms"]) / 1000, float(e["pods_running"])) for e in entries]
    if points and points[-1][0] < end_s:
        points.append((end_s, points[-1][1]))
    return points


def _owner_charts(timeline: Mapping[str, Any], owners: Sequence[str], end_s: float) -> list[str]:
    recorded: Mapping[str, Any] = timeline.get("recorded_by_owner") or {}
    samples: Sequence[Mapping[str, Any]] = timeline.get("replay_by_owner") or []
    out = []
    for index, owner in enumerate(owners):
        lines = {
            RECORDED: _steps(recorded.get(owner) or [], end_s),
            # an owner missing from a sample had no pod running then
            REPLAYED: [
                (float(s["trace_ms"]) / 1000, float((s.get("pods_running") or {}).get(owner, 0)))
                for s in samples
            ],
        }
        if is_empty(lines):
            out.append(no_chart(f"owner-{index}", f"{owner}: no pod recorded or replayed."))
            continue
        chart = line_chart(
            f"owner-{index}",
            f"{owner}: pods running",
            lines,
            x_label="trace seconds",
            y_label="pods running",
            dashed=[RECORDED],
        )
        out.append(f"<figure>{chart}<figcaption>{escape(_CAPTION)}</figcaption></figure>")
    return out


def _cluster_charts(timeline: Mapping[str, Any], end_s: float) -> list[str]:
    replay: Sequence[Mapping[str, Any]] = timeline.get("replay") or []
    pods = {
        RECORDED: _steps(timeline.get("recorded") or [], end_s),
        REPLAYED: [(float(s["trace_ms"]) / 1000, float(s["pods_running"])) for s in replay],
    }
    nodes = {REPLAYED: [(float(s["trace_ms"]) / 1000, float(s.get("nodes_used", 0))) for s in replay]}
    out = []
    if is_empty(pods):
        out.append(no_chart("cluster-pods", "No pods ran: none recorded, none replayed."))
    else:
        chart = line_chart(
            "cluster-pods",
            "All owners: pods running",
            pods,
            x_label="trace seconds",
            y_label="pods running",
            dashed=[RECORDED],
        )
        out.append(f"<figure>{chart}<figcaption>{escape(_CAPTION)}</figcaption></figure>")
    if is_empty(nodes):
        out.append(no_chart("cluster-nodes", "No node ran a replayed pod."))
    else:
        chart = line_chart(
            "cluster-nodes",
            "Nodes running the replay's pods",
            nodes,
            x_label="trace seconds",
            y_label="nodes used",
        )
        out.append(
            f"<figure>{chart}<figcaption>The replay, as the replayer sampled it.</figcaption></figure>"
        )
    return out


def _figures(report: Mapping[str, Any], fidelity: Mapping[str, Any]) -> list[list[str]]:
    events: Mapping[str, Any] = report.get("events") or {}
    lateness: Mapping[str, Any] = report.get("lateness_ms") or {}
    speed = report.get("speed")
    return [
        ["speed", f"{speed:g}" if isinstance(speed, int | float) else str(speed)],
        ["wall seconds", str(report.get("wall_seconds", "-"))],
        ["trace seconds replayed", f"{float(report.get('trace_span_ms') or 0) / 1000:g}"],
        [
            "events",
            f"{events.get('applied', 0)} applied, {events.get('deleted', 0)} deleted, "
            f"{events.get('failed', 0)} failed",
        ],
        [
            "lateness ms (p50, p99, max)",
            f"{lateness.get('p50')}, {lateness.get('p99')}, {lateness.get('max')}",
        ],
        [
            "settle",
            f"{float(fidelity.get('settle_ms') or 0) / 1000:g} s ({fidelity.get('settle_from', '-')})",
        ],
        ["cleanup", str(report.get("cleanup", "-"))],
    ]


def render_replay_report(report: Mapping[str, Any], where: str) -> str:
    """One replay's report (its JSON, read from ``where``) as a self-contained HTML page."""
    fidelity = _part(report, "owner_fidelity", where)
    timeline = _part(report, "timeline", where)
    verdict = str(fidelity.get("verdict", "unknown"))
    name, source = report.get("replay_name", "?"), report.get("source", "?")
    owners: Sequence[Mapping[str, Any]] = fidelity.get("owners") or []
    recorded_owners: Mapping[str, Any] = timeline.get("recorded_by_owner") or {}
    names = [str(o["owner"]) for o in owners] + sorted(
        set(recorded_owners) - {str(o["owner"]) for o in owners}
    )
    end_s = float(report.get("trace_span_ms") or 0) / 1000
    bound = fidelity.get("bound_pods", 1)
    settle_s = float(fidelity.get("settle_ms") or 0) / 1000
    sections = [
        verdict_section(
            verdict,
            f"replay {name} of {source}",
            [str(reason) for reason in fidelity.get("reasons") or ()],
            f"every owner's pods stayed within {bound} pod(s) of the recording at the {settle_s:g} s "
            "settle, and the machine kept up",
        )
    ]
    warning = fidelity.get("settle_warning")
    if warning:
        sections.append(f'<p class="settle-warning">{escape(str(warning))}</p>')
    sections.append("<h2>The replay</h2>")
    sections.append(html_table(["figure", "value"], _figures(report, fidelity), name="figures"))
    sections.append(f"<h2>Pods per owner: {RECORDED} and {REPLAYED}</h2>")
    sections.append(
        html_table(
            [
                "recorded owner",
                "compared with",
                f"samples within {bound} pod(s)",
                "largest error (pods)",
                f"peak, {RECORDED}",
                f"peak, {REPLAYED}",
            ],
            [
                [
                    o["owner"],
                    o.get("truth", "lifecycles"),
                    f"{o.get('samples_within_one_pod', 0)}/{o.get('samples', 0)}",
                    o.get("max_error", 0),
                    o.get("recorded_peak", 0),
                    o.get("replay_peak", 0),
                ]
                for o in owners
            ],
            name="owners",
        )
    )
    sections.extend(_owner_charts(timeline, names, end_s))
    sections.append("<h2>The whole cluster</h2>")
    sections.extend(_cluster_charts(timeline, end_s))
    return html_page(f"kubetape report: {verdict.upper()}: replay {name}", sections)
