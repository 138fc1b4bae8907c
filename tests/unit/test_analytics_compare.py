"""Runs as data and their comparison: fidelity against the recording, configurations with intervals,
the CLI's text/JSON and its fidelity exit code, and the self-contained HTML report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline.analytics.compare import compare_runs, owner_errors, render_text, run_metrics
from pipeline.analytics.report_html import render_report
from pipeline.analytics.runs import NodePool, Run, RunInfo, find_runs, read_run, write_run
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, PodTimes, TimelineRow
from pipeline.model.errors import ConfigError, UnknownVersionError
from services.cli import main

OWNER = "apps/Deployment/web/web"


def rows(running: list[int], *, pending: list[int] | None = None, nodes: int = 1) -> list[TimelineRow]:
    out = []
    for second, count in enumerate(running):
        waiting = pending[second] if pending else 0
        for owner in (OWNER, CLUSTER_OWNER):
            out.append(TimelineRow(second, owner, waiting, count, 0, 0, 100.0 * count, 0.0, nodes, 1))
    return out


def make_run(
    name: str,
    running: list[int],
    *,
    pending: list[int] | None = None,
    nodes: int = 1,
    recorded: list[int] | None = None,
    repetition: int = 0,
    speed: float = 10.0,
) -> Run:
    info = RunInfo(name, "trace.sktrace", speed, (NodePool("node", nodes, 8000, 2**35),), repetition)
    return Run(
        Path(name),
        info,
        rows(running, pending=pending, nodes=nodes),
        [PodTimes(f"core/Pod/web/p{i}", OWNER, 0.0, 1.0 + i) for i in range(3)],
        rows(recorded if recorded is not None else running, nodes=0),
        [PodTimes("core/Pod/web/p0", OWNER, 0.0, 1.0)],
        {"replay_name": name},
    )


def test_owner_error_forgives_a_lag_within_the_window_only() -> None:
    recorded = rows([0, 2, 2, 2, 5, 5, 5, 5])
    lagging = rows([0, 0, 2, 2, 2, 5, 5, 5])  # one second behind
    assert owner_errors(recorded, lagging, window_s=1)[0].max_error == 0
    assert owner_errors(recorded, lagging, window_s=0)[0].max_error == 3
    leading = rows([2, 2, 2, 5, 5, 5, 5, 5])  # one second ahead: pods ran at once, recorded ones waited
    assert owner_errors(recorded, leading, window_s=1)[0].max_error == 0
    assert owner_errors(recorded, leading, window_s=0)[0].max_error == 3
    missing = rows([0, 2, 2, 2, 3, 3, 3, 3])  # two pods never came
    error = owner_errors(recorded, missing, window_s=1)[0]
    assert error.max_error == 2
    assert error.recorded_peak == 5
    assert error.replay_peak == 3


def test_run_metrics_sum_cost_and_unreliability_over_trace_seconds() -> None:
    run = make_run("r", [1, 1, 1, 1], pending=[2, 1, 0, 0], nodes=3)
    metrics = run_metrics(run)
    assert metrics["node_hours"] == pytest.approx(3 * 4 / 3600)
    assert metrics["pending_pod_seconds"] == 3
    assert metrics["peak_running"] == 1
    assert metrics["scheduling_delay_p50_s"] == 2.0
    assert metrics["owner_error_max"] == 0


def test_configurations_differ_only_where_the_interval_excludes_zero() -> None:
    small = [
        make_run(f"small-{i}", [1, 1, 1], pending=[p, p, 0], nodes=1, repetition=i)
        for i, p in enumerate([5, 6, 5])
    ]
    large = [make_run(f"large-{i}", [1, 1, 1], pending=[0, 0, 0], nodes=4, repetition=i) for i in range(3)]
    comparison = compare_runs([*small, *large])
    assert [c.config for c in comparison.configs] == [
        "trace.sktrace speed=10 nodes=node:1",
        "trace.sktrace speed=10 nodes=node:4",
    ]
    verdict = {d.metric: d.significant for d in comparison.differences}
    assert verdict["pending_pod_seconds"]  # 10.7 vs 0 pod-seconds, tight: real
    assert not verdict["peak_running"]  # identical: never called
    assert not verdict["owner_error_max"]
    text = render_text(comparison)
    assert "pending_pod_seconds" in text
    assert "REAL" in text
    assert "not significant" in text


def test_a_run_directory_round_trips_and_refuses_other_versions(tmp_path: Path) -> None:
    run = make_run("sweep-c00-r0", [0, 1, 2])
    write(tmp_path, run)
    loaded = read_run(tmp_path / "sweep-c00-r0")
    assert loaded.info == run.info
    assert loaded.timeline == run.timeline
    assert loaded.pods == run.pods
    assert find_runs([tmp_path]) == [tmp_path / "sweep-c00-r0"]
    doc = json.loads((tmp_path / "sweep-c00-r0" / "run.json").read_text())
    assert doc["config"] == "trace.sktrace speed=10 nodes=node:1"
    doc["version"] = 7
    (tmp_path / "sweep-c00-r0" / "run.json").write_text(json.dumps(doc))
    with pytest.raises(UnknownVersionError, match="version 7"):
        read_run(tmp_path / "sweep-c00-r0")
    with pytest.raises(ConfigError, match="no such run directory"):
        find_runs([tmp_path / "missing"])


def write(tmp_path: Path, run: Run) -> Path:
    path = tmp_path / run.info.name
    write_run(
        path,
        run.info,
        timeline=run.timeline,
        pods=run.pods,
        recorded=run.recorded,
        recorded_pods=run.recorded_pods,
        report=run.report,
    )
    return path


def test_compare_cli_reports_json_html_and_fails_a_fidelity_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, make_run("good", [0, 2, 2, 5, 5]))
    bad = write(tmp_path, make_run("bad", [0, 2, 2, 2, 2], recorded=[0, 2, 2, 5, 5]))
    html = tmp_path / "report.html"
    assert main(["compare", str(good), "--json", "--html", str(html), "--max-owner-error", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fidelity"]["good"]["owner_error_max"] == 0
    assert "<svg" in html.read_text()
    assert main(["compare", str(good), str(bad), "--window", "1", "--max-owner-error", "1"]) == 1
    out = capsys.readouterr().out
    assert "fidelity check failed" in out
    assert "bad (3)" in out
    assert main(["compare", str(tmp_path / "nothing")]) == 2


def test_the_html_report_is_self_contained_with_every_plot() -> None:
    runs = [make_run("run-<1>", [0, 1, 2], pending=[1, 0, 0]), make_run("run-2", [0, 1, 1])]
    html = render_report(
        "report", runs, compare_runs(runs), pareto={"a": (1.0, 5.0), "b": (2.0, 1.0)}, frontier=["a", "b"]
    )
    charts = re.findall(r'data-chart="([^"]+)"', html)
    assert charts == ["pareto", "timeline-running", "timeline-pending", "timeline-nodes"]
    assert html.count('class="point on-frontier"') == 2
    assert html.count('data-series="recorded"') == 2  # running, pending: the recording has no nodes
    # nothing is fetched: no scripts, no external references (the SVG namespace is an identifier)
    assert "<script" not in html
    assert not re.search(r'(src|href)=["\']?https?:', html)
    assert "run-&lt;1&gt;" in html  # names are escaped


def test_a_sweep_summary_puts_configuration_means_on_the_frontier() -> None:
    from services.sweep import summarize_sweep

    cheap = [make_run(f"cheap-{i}", [1, 1], pending=[4, 4], nodes=1, repetition=i) for i in range(2)]
    dear = [make_run(f"dear-{i}", [1, 1], pending=[0, 0], nodes=4, repetition=i) for i in range(2)]
    wasteful = [make_run(f"waste-{i}", [1, 1], pending=[4, 4], nodes=6, repetition=i) for i in range(2)]
    result = summarize_sweep([*cheap, *dear, *wasteful])
    cost, pending = result.points["trace.sktrace speed=10 nodes=node:1"]
    assert cost == pytest.approx(2 / 3600)  # one node for the two trace seconds
    assert pending == 8.0
    assert result.frontier == ["trace.sktrace speed=10 nodes=node:1", "trace.sktrace speed=10 nodes=node:4"]
    assert result.document["frontier"] == result.frontier


def test_sweep_refuses_an_unknown_reliability_metric_before_replaying(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["sweep", "--trace", "t", "--kubeconfig", "k", "--out", "o", "--nodes", "none"]
    assert main([*argv, "--reliability", "happiness"]) == 2
    assert "choose one of node_hours, pending_pod_seconds" in capsys.readouterr().err


def test_a_run_with_a_replay_report_is_judged_by_the_replayers_own_figures() -> None:
    # the observed timeline is coarse (here: stale by three pods); the replayer's samples are the measure
    run = make_run("r", [0, 2, 2, 2, 2, 2, 2, 2], recorded=[0, 2, 2, 2, 5, 5, 5, 5], speed=1.0)
    owner = {"owner": OWNER, "samples": 30, "max_error": 1, "mean_error": 0.1, "samples_within_one_pod": 30}
    verdict = {"verdict": "held", "reasons": [], "settle_ms": 10_000.0, "owners": [owner]}
    judged = Run(
        run.path,
        run.info,
        run.timeline,
        run.pods,
        run.recorded,
        run.recorded_pods,
        {"owner_fidelity": verdict},
    )
    comparison = compare_runs([judged])
    assert comparison.fidelity["r"][0].max_error == 1
    assert comparison.verdicts["r"]["verdict"] == "held"
    # an explicit window asks for the timeline measure
    assert compare_runs([judged], window_s=1).fidelity["r"][0].max_error == 3
    # a run without the replayer's figures (older runs) is judged by its timelines
    assert compare_runs([run]).fidelity["r"][0].max_error == 3
    assert compare_runs([run]).verdicts["r"]["verdict"] == "unknown"


def asked(replicas: list[int]) -> list[TimelineRow]:
    """A recording without pods (a SimKube trace): the owner's rows say only what it asked for."""
    return [
        TimelineRow(second, owner, 0, 0, 0, 0, 0.0, 0.0, 1, 0, desired=count)
        for second, count in enumerate(replicas)
        for owner in (OWNER, CLUSTER_OWNER)
    ]


def test_a_replay_of_a_trace_without_pods_is_judged_against_what_each_owner_asked_for() -> None:
    replay = rows([0, 3, 3, 5, 5, 5])
    [error] = owner_errors(asked([3, 3, 3, 5, 5, 5]), replay, window_s=1)
    assert (error.max_error, error.recorded_peak) == (0, 5)  # a faithful replay, not "recorded 0"
    [error] = owner_errors(asked([3, 3, 3, 5, 5, 5]), rows([0, 3, 3, 2, 2, 2]), window_s=1)
    assert error.max_error == 3  # and one that fell short says by how much


def test_recorded_pods_stay_the_truth_where_they_were_recorded() -> None:
    recorded = [
        TimelineRow(second, owner, 0, running, 0, 0, 0.0, 0.0, 1, 1, desired=5)
        for second, running in enumerate([2, 2, 2])
        for owner in (OWNER, CLUSTER_OWNER)
    ]
    [error] = owner_errors(recorded, rows([2, 2, 2]), window_s=0)
    assert (error.max_error, error.recorded_peak) == (0, 2)  # ran 2 of the 5 asked: the replay matches


def test_a_timeline_round_trips_its_desired_column_and_version_1_files_still_read(tmp_path: Path) -> None:
    from pipeline.analytics.timeline_store import (
        TIMELINE_FORMAT,
        TIMELINE_TYPES,
        read_timeline,
        write_timeline,
    )
    from pipeline.io.parquet import write_columns

    timeline = [*asked([3, 4]), TimelineRow(2, OWNER, 0, 1, 0, 0, 0.0, 0.0, 1, 1)]
    write_timeline(tmp_path / "t.parquet", timeline)
    assert read_timeline(tmp_path / "t.parquet") == timeline
    # version 1: the same columns but desired
    v1_types = {name: kind for name, kind in TIMELINE_TYPES.items() if name != "desired"}
    v1 = {name: [OWNER] if kind == "string" else [0] for name, kind in v1_types.items()}
    write_columns(tmp_path / "v1.parquet", v1, v1_types, format_name=TIMELINE_FORMAT, version=1)
    [row] = read_timeline(tmp_path / "v1.parquet")
    assert (row.owner, row.desired) == (OWNER, None)
