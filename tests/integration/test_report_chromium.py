"""The HTML reports as a person sees them in headless Chromium: the report of a SimKube trace (no pods
recorded) names its dashed line in the legend, the comparison is tables; one replay's report
(``kubetape report``) shows its verdict at the top; at a laptop's width and a narrow window's alike the
charts take the page's width and nothing sticks out past the right edge."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pipeline.analytics.compare import compare_runs
from pipeline.analytics.report_html import DESIRED, render_report
from services.cli import main
from tests.chromium import assert_fits_the_window, laid_out, screenshot_png
from tests.data import scaled_simkube_trace
from tests.unit.test_replay_page import replay_report
from tests.unit.test_report_html import fold, replay_of

# long, unbroken names, as sweep configurations with trace paths are
LONG = "simkube-trace-with-a-rather-long-name.json speed=10 nodes=m5.xlarge-karpenter-spot:12"


@pytest.mark.parametrize("width", [1100, 640])
def test_the_report_of_a_simkube_trace_reads_right_in_chromium(tmp_path: Path, width: int) -> None:
    recorded = fold(scaled_simkube_trace(tmp_path / "scaled.json"))
    runs = [replay_of(recorded, f"{LONG} repetition-{i}", lag_s=i) for i in range(3)]
    report = tmp_path / "report.html"
    report.write_text(render_report("kubetape compare", runs, compare_runs(runs)))

    dom, layout = laid_out(report, width=width)
    legend = re.findall(r'<text class="legend"[^>]*>([^<]+)<title>', dom)
    assert DESIRED in legend, legend
    assert "the dashed line is the pods its workloads asked for" in dom
    assert re.findall(r'<table data-table="([^"]+)"', dom)[:2] == ["fidelity", "configurations"]
    assert "<pre" not in dom
    assert_charts_take_the_width(layout)
    assert_fits_the_window(layout)
    screenshot_png(report, tmp_path / "report.png", width=width)


def assert_charts_take_the_width(layout: dict[str, Any]) -> None:
    assert layout["charts"], layout
    for chart in layout["charts"]:
        assert chart["width"] >= layout["contentWidth"] - 1, (chart, layout["contentWidth"])
        assert chart["height"] > 0, chart


@pytest.mark.parametrize("width", [1100, 640])
def test_one_replays_report_shows_its_verdict_at_the_top_in_chromium(tmp_path: Path, width: int) -> None:
    # the JSON the replayer's report code writes, of a replay that fell short of its recording
    report_json = tmp_path / "replay.json"
    report_json.write_text(json.dumps(replay_report(replayed=1)))
    page = tmp_path / "replay.html"
    assert main(["report", str(report_json), "--html", str(page)]) == 0

    dom, layout = laid_out(page, width=width)
    heading = layout["firstHeading"]
    assert heading is not None, layout
    assert heading["text"].startswith("FAILED — replay shop-replay"), heading
    assert 0 <= heading["top"] < 100, heading  # at the top of the window, no scrolling
    assert heading["height"] > 0, heading
    assert [c["chart"] for c in layout["charts"]] == ["owner-1", "cluster-pods", "cluster-nodes"]
    assert_charts_take_the_width(layout)
    assert_fits_the_window(layout)
    assert "an owner stayed more than 1 pod(s) off the recording" in dom
