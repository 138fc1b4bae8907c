"""The HTML report reads right: a recording without pods (every SimKube trace) plots the pods its
workloads asked for and says so; pods and nodes it never recorded are no line rather than a flat 0;
the comparison is tables."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.analytics.compare import compare_runs
from pipeline.analytics.report_html import DESIRED, RECORDED, recorded_line, render_report
from pipeline.analytics.runs import NodePool, Run, RunInfo
from pipeline.analytics.svg import LEGEND_CHARS, legend_label
from pipeline.analytics.timeline import fold_events
from pipeline.analytics.timeline_rows import TimelineRow
from pipeline.formats.trace import initial_events, read_trace
from tests.data import SIMKUBE_TRACES, scaled_simkube_trace
from tests.unit.test_replay_page import headings, table_headings


def fold(trace: Path) -> list[TimelineRow]:
    return fold_events(initial_events(read_trace(trace), time_ordered=True)).rows


def replay_of(recorded: list[TimelineRow], name: str, lag_s: int) -> Run:
    """A run whose pods follow the recording's desired pods ``lag_s`` seconds late."""
    asked = {(r.owner, r.second): r.desired or 0 for r in recorded}
    timeline = [
        TimelineRow(s, owner, 0, asked.get((owner, s - lag_s), 0), 0, 0, 0.0, 0.0, 1, 1)
        for owner, s in sorted(asked)
    ]
    info = RunInfo(name, "scaled.json", 10.0, (NodePool("node", 1, 8000, 2**35),), 0)
    return Run(Path(name), info, timeline, [], recorded, [], {"replay_name": name})


def test_a_simkube_trace_records_what_its_deployment_asked_for_over_time(tmp_path: Path) -> None:
    rows = fold(scaled_simkube_trace(tmp_path / "scaled.json"))
    line = recorded_line(rows, "running")
    assert line is not None
    legend, points = line
    assert legend == DESIRED
    steps = [(t, v) for i, (t, v) in enumerate(points) if i == 0 or v != points[i - 1][1]]
    assert steps == [(0.0, 2.0), (30.0, 5.0), (60.0, 3.0), (90.0, 0.0)]  # replicas, then deleted
    # no pods and no nodes in the trace: unknown, not a flat 0
    assert recorded_line(rows, "pending") is None
    assert recorded_line(rows, "nodes") is None


def test_the_unscaled_fixture_asks_for_its_two_replicas() -> None:
    line = recorded_line(fold(SIMKUBE_TRACES / "simkube-trace.json"), "running")
    assert line is not None
    assert line[0] == DESIRED
    assert {v for _, v in line[1]} == {2.0}


def test_a_trace_with_pods_plots_its_recorded_pods() -> None:
    rows = fold(SIMKUBE_TRACES / "bare-pods.sktrace")
    line = recorded_line(rows, "running")
    assert line is not None
    assert line[0] == RECORDED
    assert max(v for _, v in line[1]) == 1.0
    assert recorded_line(rows, "pending") is not None  # pods recorded: their pending seconds are known


def test_the_report_of_a_simkube_trace_says_what_its_dashed_line_is(tmp_path: Path) -> None:
    recorded = fold(scaled_simkube_trace(tmp_path / "scaled.json"))
    runs = [replay_of(recorded, "prompt", 0), replay_of(recorded, "late", 2)]
    html = render_report("report", runs, compare_runs(runs))
    running = html[html.index('data-chart="timeline-running"') : html.index('data-chart="timeline-nodes"')]
    assert f'data-series="{DESIRED}"' in running
    assert re.search(f'<text class="legend"[^>]*>{DESIRED}<title>', running)  # the legend
    assert "the dashed line is the pods its workloads asked for" in html
    assert html.count('data-series="recorded') == 1  # pending and nodes: not recorded, not drawn
    # no pod pending in the recording or the runs: a sentence, not an empty chart
    assert 'data-chart="timeline-pending"' not in html
    assert '<p class="no-chart" data-no-chart="timeline-pending">No pending pods:' in html
    assert "The trace records no nodes: only the runs are plotted." in html
    tables = re.findall(r'<table data-table="([^"]+)"', html)
    assert tables[:2] == ["fidelity", "configurations"]
    assert "<pre" not in html
    fidelity = html[html.index('data-table="fidelity"') :]
    assert "<td>late</td>" in fidelity
    assert "<td>prompt</td>" in fidelity


def test_legend_labels_keep_the_end_that_tells_runs_apart() -> None:
    names = [f"{'a-rather-long-sweep-configuration-name ' * 2}repetition-{i}" for i in range(3)]
    labels = [legend_label(name) for name in names]
    assert len(set(labels)) == 3
    assert all(
        len(label) <= LEGEND_CHARS and label.endswith(f"repetition-{i}") for i, label in enumerate(labels)
    )
    assert legend_label("short") == "short"


def _with_verdict(run: Run, verdict: str, *reasons: str) -> Run:
    report = {**run.report, "owner_fidelity": {"verdict": verdict, "reasons": list(reasons)}}
    return Run(run.path, run.info, run.timeline, run.pods, run.recorded, run.recorded_pods, report)


def test_the_comparison_page_opens_with_the_worst_verdict_and_its_reasons(tmp_path: Path) -> None:
    recorded = fold(scaled_simkube_trace(tmp_path / "scaled.json"))
    runs = [
        _with_verdict(replay_of(recorded, "prompt", 0), "held"),
        _with_verdict(replay_of(recorded, "late", 2), "degraded", "the replayer's writes ran late"),
    ]
    html = render_report("kubetape compare", runs, compare_runs(runs))
    assert headings(html)[0] == "DEGRADED — 2 runs: 1 degraded, 1 held"
    head = html[: html.index("</header>")]
    assert "<li>late: the replayer&#x27;s writes ran late</li>" in head
    held = render_report("kubetape compare", runs[:1], compare_runs(runs[:1]))
    assert headings(held)[0] == "HELD — 1 run: 1 held"


def test_no_two_columns_of_the_comparison_share_a_heading(tmp_path: Path) -> None:
    recorded = fold(scaled_simkube_trace(tmp_path / "scaled.json"))
    runs = [replay_of(recorded, "prompt", 0), replay_of(recorded, "late", 2)]
    tables = table_headings(render_report("report", runs, compare_runs(runs)))
    assert tables
    for header in tables:
        assert len(set(header)) == len(header), header
    assert {"scheduling delay p50, recorded", "scheduling delay p50, replayed"} <= set(tables[1])
