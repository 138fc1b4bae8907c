"""``kubetape compare`` on run directories: an autoscaled run beside a fixed-pool run of the same trace
(node-hours, cost, pending→running p50/p99, fidelity), and runs of different traces refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.analytics.runs import NodePool, RunInfo, write_run
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, PodTimes, TimelineRow
from services.cli import main

OWNER = "apps/Deployment/shop/web"


def timeline(nodes: list[int], running: int = 2) -> list[TimelineRow]:
    return [
        TimelineRow(second, owner, 0, running, 0, 0, 0.0, 0.0, count, 1)
        for second, count in enumerate(nodes)
        for owner in (OWNER, CLUSTER_OWNER)
    ]


def write(
    directory: Path,
    name: str,
    nodes: list[int],
    waits: list[float],
    *,
    autoscaled: bool,
    trace: str = "t.ktrace",
) -> None:
    pools = () if autoscaled else (NodePool("node-skeleton", max(nodes)),)
    labels = {"autoscaler": "karpenter", "consolidation": "WhenEmpty"} if autoscaled else {}
    report = {
        "autoscale": {"cost": 0.25, "node_hours": 0.01} if autoscaled else None,
        "owner_fidelity": {
            "verdict": "held",
            "owners": [{"owner": OWNER, "max_error": 1.0 if autoscaled else 0.0}],
        },
    }
    write_run(
        directory / name,
        RunInfo(name, f"/traces/{trace}", 10.0, pools, 0, labels),
        timeline=timeline(nodes),
        pods=[PodTimes(f"core/Pod/shop/p{i}", OWNER, 0.0, wait) for i, wait in enumerate(waits)],
        recorded=timeline([0] * len(nodes)),
        recorded_pods=[],
        report=report,
    )


def test_an_autoscaled_run_is_set_beside_a_fixed_pool_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "fixed", [2] * 3600, [0.0, 0.0, 1.0], autoscaled=False)
    write(tmp_path, "karpenter", [0] * 1800 + [1] * 1800, [30.0, 40.0, 50.0], autoscaled=True)
    assert main(["compare", str(tmp_path), "--json", "--node-price", "0.5"]) == 0
    rows = {row["run"]: row for row in json.loads(capsys.readouterr().out)["autoscaler_vs_fixed"]}
    # p99 interpolates between the two slowest pods, as every percentile of the project does
    assert rows["fixed"] == pytest.approx(
        {
            "run": "fixed",
            "provisioning": "fixed node-skeleton:2",
            "node_hours": 2.0,  # two nodes for a trace hour
            "cost": 1.0,  # priced by --node-price
            "pending_to_running_p50_s": 0.0,
            "pending_to_running_p99_s": 0.98,
            "owner_error_max": 0.0,
            "verdict": "held",
        }
    )
    assert rows["karpenter"] == pytest.approx(
        {
            "run": "karpenter",
            "provisioning": "karpenter (consolidation=WhenEmpty)",
            "node_hours": 0.5,  # no node for half an hour, then one
            "cost": 0.25,  # the replay's own, from its instance types' prices
            "pending_to_running_p50_s": 40.0,
            "pending_to_running_p99_s": 49.8,
            "owner_error_max": 1.0,
            "verdict": "held",
        }
    )
    assert main(["compare", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "autoscaler vs fixed pools" in text
    assert "karpenter (consolidation=WhenEmpty)" in text


def test_fixed_pool_runs_alone_get_no_side_by_side_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "fixed", [1] * 10, [0.0], autoscaled=False)
    assert main(["compare", str(tmp_path), "--json"]) == 0
    assert "autoscaler_vs_fixed" not in json.loads(capsys.readouterr().out)


def test_runs_of_different_traces_are_refused_with_both_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "fixed", [1] * 10, [0.0], autoscaled=False, trace="a.ktrace")
    write(tmp_path, "karpenter", [1] * 10, [0.0], autoscaled=True, trace="b.ktrace")
    assert main(["compare", str(tmp_path)]) == 2
    assert "got runs of a.ktrace, b.ktrace" in capsys.readouterr().err
