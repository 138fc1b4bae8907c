"""The HTML report as a person sees it in headless Chromium: the report of a SimKube trace (no pods
recorded) names its dashed line in the legend, the comparison is tables, and at a laptop's width and
a narrow window's alike nothing sticks out past the right edge."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.analytics.compare import compare_runs
from pipeline.analytics.report_html import DESIRED, render_report
from tests.chromium import assert_fits_the_window, laid_out, screenshot_png
from tests.data import scaled_simkube_trace
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
    assert_fits_the_window(layout)
    screenshot_png(report, tmp_path / "report.png", width=width)
