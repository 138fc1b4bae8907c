"""A two-point sweep on the real ``sim`` cluster yields a Pareto frontier, its runs are comparable data,
and the HTML report renders in headless Chromium with its plots."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline.analytics.compare import compare_runs, worst_owner_error
from pipeline.analytics.report_html import render_report
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON
from services.cli import main
from services.sweep import parse_node_option, run_sweep, write_sweep_outputs
from tests.chromium import assert_fits_the_window, laid_out, screenshot_png

NO_NODES = "bare-pods.sktrace speed=10 nodes=no-nodes"
ONE_NODE = f"bare-pods.sktrace speed=10 nodes={DEFAULT_NODE_SKELETON.stem}:1"


@pytest.mark.timeout(900)
async def test_a_two_point_sweep_yields_a_frontier_and_a_report_that_renders(
    sim_kubeconfig: Path, simkube_traces: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    options = [parse_node_option("none"), parse_node_option(f"{DEFAULT_NODE_SKELETON}:1")]
    result = await run_sweep(
        sim_kubeconfig,
        simkube_traces / "bare-pods.sktrace",
        out,
        speeds=[10.0],
        nodes=options,
        repetitions=1,
        say=print,
        sample_interval_s=0.5,
    )
    # without nodes nothing runs: free but unreliable; one node runs every pod: it costs node-hours
    cost_none, pending_none = result.points[NO_NODES]
    cost_one, pending_one = result.points[ONE_NODE]
    assert cost_none == 0
    assert cost_one == pytest.approx(163 / 3600, rel=0.05)  # one node over the 163 s trace
    assert pending_none > 300  # 4 pods waiting for 163, 121, 61 and 1 s
    assert pending_one < pending_none / 10
    assert result.frontier == [NO_NODES, ONE_NODE]  # neither dominates: a trade-off

    # the runs are data: reloadable, labelled, and the one-node replay follows its recording
    runs = {run.info.config: run for run in result.runs}
    assert runs[ONE_NODE].info.node_pools[0].count == 1
    assert runs[ONE_NODE].report["events"]["failed"] == 0
    comparison = compare_runs(result.runs)
    assert worst_owner_error(comparison)[runs[ONE_NODE].info.name] <= 1
    assert main(["compare", str(out), "--json", "--max-owner-error", "1"]) == 0

    write_sweep_outputs(result, out, render_report)
    assert json.loads((out / "sweep.json").read_text())["frontier"] == [NO_NODES, ONE_NODE]
    report = out / "report.html"
    dom, layout = laid_out(report, width=1100)
    assert re.findall(r'data-chart="([^"]+)"', dom) == [
        "pareto",
        "timeline-running",
        "timeline-pending",
        "timeline-nodes",
    ]
    assert dom.count('class="point on-frontier"') == 2
    # the frontier; recording + 2 runs of running and pending pods; the 2 runs' nodes (the trace records none)
    assert dom.count("<polyline") >= 1 + 3 + 3 + 2
    assert dom.count('data-series="recorded"') == 2
    assert "The trace records no nodes: only the runs are plotted." in dom
    assert re.findall(r'<table data-table="([^"]+)"', dom)[:2] == ["fidelity", "configurations"]
    assert "<pre" not in dom
    assert_fits_the_window(layout)
    # a blank page is a few kB; plots make it much larger
    assert len(screenshot_png(report, tmp_path / "report.png", width=1100)) > 20_000
