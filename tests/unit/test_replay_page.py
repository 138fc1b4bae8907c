"""``kubetape report``'s page of one replay: the verdict is the first heading, every chart has something
on it, and no two columns share a heading. The reports are made by the replayer's own report code."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pipeline.analytics.replay_page import render_replay_report
from pipeline.model.errors import ConfigError
from pipeline.replay.report.report import ReplayReport
from services.cli import main

WEB = "apps/Deployment/shop/web"
IDLE = "apps/Deployment/shop/idle"


def replay_report(*, replayed: int = 5) -> dict[str, Any]:
    """The JSON report of a replay of shop/web (2 pods from +1 s, 5 from +5 s), its pods sampled every
    half second of trace time with ``replayed`` pods from +6 s; shop/idle never ran a pod."""
    report = ReplayReport("shop-replay", "shop.ktrace", speed=10.0)
    report.recorded_by_owner = {WEB: [(0, 0), (1_000, 2), (5_000, 5)], IDLE: [(0, 0)]}
    report.recorded_timeline = [(0, 0), (1_000, 2), (5_000, 5)]
    report.trace_span_ms = 10_000
    report.steps = report.applied = 3
    report.lateness_ms = [2.0, 3.0, 5.0]
    report.wall_seconds = 1.5
    for at_ms in range(0, 10_001, 500):
        running = 0 if at_ms < 1_500 else 2 if at_ms < 6_000 else replayed
        report.add_sample(float(at_ms), running, 1 if running else 0, {WEB: running} if running else {})
    doc: dict[str, Any] = json.loads(json.dumps(report.to_json()))  # as read back from the file
    return doc


def headings(html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", text) for _, text in re.findall(r"<h([1-6])[^>]*>(.*?)</h\1>", html)]


def table_headings(html: str) -> list[list[str]]:
    return [re.findall(r"<th>([^<]*)</th>", head) for head in re.findall(r"<thead>(.*?)</thead>", html)]


def test_the_verdict_is_the_first_heading_with_its_reasons() -> None:
    held = render_replay_report(replay_report(), "held.json")
    assert headings(held)[0] == "HELD — replay shop-replay of shop.ktrace"
    assert "every owner&#x27;s pods stayed within 1 pod(s) of the recording" in held

    failed = render_replay_report(replay_report(replayed=1), "failed.json")
    assert headings(failed)[0] == "FAILED — replay shop-replay of shop.ktrace"
    reasons = re.findall(r"<li>([^<]*)</li>", failed[: failed.index("</header>")])
    assert reasons, failed
    assert reasons[0].startswith("an owner stayed more than 1 pod(s) off the recording")


def test_every_column_is_headed_by_what_it_holds() -> None:
    html = render_replay_report(replay_report(), "r.json")
    tables = table_headings(html)
    assert tables, html
    for header in tables:
        assert len(set(header)) == len(header), header
    owners = tables[1]
    assert "peak, recorded" in owners
    assert "peak, replayed" in owners


def test_each_owner_with_pods_has_a_chart_of_recorded_against_replayed_and_no_chart_is_empty() -> None:
    html = render_replay_report(replay_report(), "r.json")
    charts = re.findall(r'<svg[^>]*data-chart="([^"]+)"[^>]*aria-label="([^"]+)"', html)
    assert charts == [
        ("owner-1", f"{WEB}: pods running"),  # owners in the report's order: idle, web
        ("cluster-pods", "All owners: pods running"),
        ("cluster-nodes", "Nodes running the replay&#x27;s pods"),
    ]
    start = html.index('data-chart="owner-1"')
    web = html[start : html.index("</svg>", start)]
    assert re.findall(r'data-series="([^"]+)"', web) == ["recorded", "replayed"]
    assert 'stroke-dasharray="5 3"' in web  # the recording dashed
    # the owner that never ran a pod is a sentence, and the report has no pending pods to chart
    assert f'<p class="no-chart" data-no-chart="owner-0">{IDLE}: no pod recorded or replayed.</p>' in html
    assert "pending" not in " ".join(label for _, label in charts)


def test_a_file_that_is_not_a_replay_report_says_so_and_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sweep\.json: not a kubetape replay report .*--report-json"):
        render_replay_report({"frontier": []}, "sweep.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["report", str(bad)]) == 2
    assert main(["report", str(tmp_path / "missing.json")]) == 2


def test_kubetape_report_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text(json.dumps(replay_report(replayed=1)))
    page = tmp_path / "report.html"
    assert main(["report", str(run), "--html", str(page)]) == 0  # a run directory: its report.json
    out = capsys.readouterr().out
    assert out.startswith("FAILED: replay shop-replay\n  an owner stayed more than 1 pod(s)")
    assert headings(page.read_text())[0].startswith("FAILED — ")
