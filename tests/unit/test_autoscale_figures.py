"""Figures of an autoscaled replay folded from samples of nodes and pods."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.replay.autoscale.figures import AutoscaleFigures


def _node(name: str, kind: str = "kwok-standard-4", price: str | None = "0.2") -> dict[str, Any]:
    labels = {"node.kubernetes.io/instance-type": kind}
    if price is not None:
        labels["eks-node-viewer/instance-price"] = price
    return {"metadata": {"name": name, "labels": labels}}


def _pod(
    uid: str, phase: str, created: str = "2026-01-01T00:00:00Z", ready: str | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}]
    return {"metadata": {"uid": uid, "creationTimestamp": created}, "status": status}


def test_launches_terminations_node_hours_and_cost() -> None:
    figures = AutoscaleFigures(speed=10.0)
    figures.observe(0, 100.0, [], [_pod("a", "Pending"), _pod("b", "Pending")])
    figures.observe(1000, 101.0, [_node("n1")], [_pod("a", "Pending"), _pod("b", "Pending")])
    figures.observe(2000, 102.0, [_node("n1"), _node("n2", "kwok-standard-8", "0.4")], [])
    figures.observe(3000, 103.0, [_node("n2", "kwok-standard-8", "0.4")], [])
    data = figures.to_json()
    assert (data["launches"], data["terminations"], data["nodes_peak"], data["nodes_at_end"]) == (2, 1, 2, 1)
    # node-seconds in trace time: n1 for 2 gaps, n2 for 1 gap, 10 trace s each
    assert data["node_hours"] == pytest.approx(30 / 3600, rel=1e-3)
    assert data["cost"] == pytest.approx((0.2 * 20 + 0.4 * 10) / 3600, rel=1e-3)
    # two pods pending over two gaps of 10 trace seconds
    assert data["pending_pod_seconds"] == pytest.approx(40.0)
    assert data["nodes_timeline"][2]["by_instance_type"] == {"kwok-standard-4": 1, "kwok-standard-8": 1}


def test_a_price_table_overrides_labels_and_unpriced_nodes_make_cost_unknown() -> None:
    figures = AutoscaleFigures(speed=1.0, prices={"kwok-standard-4": 1.0})
    figures.observe(0, 0.0, [_node("n1")], [])
    figures.observe(1000, 3600.0, [_node("n1")], [])
    assert figures.to_json()["cost"] == pytest.approx(1.0)
    unpriced = AutoscaleFigures(speed=1.0)
    unpriced.observe(0, 0.0, [_node("n1", "other", None)], [])
    unpriced.observe(1000, 1.0, [], [])
    assert unpriced.to_json()["cost"] is None


def test_pending_to_running_from_kubernetes_timestamps_once_per_pod() -> None:
    figures = AutoscaleFigures(speed=10.0)
    running = [
        _pod("a", "Running", "2026-01-01T00:00:00Z", "2026-01-01T00:00:04Z"),
        _pod("b", "Running", "2026-01-01T00:00:00Z", "2026-01-01T00:00:20Z"),
    ]
    figures.observe(0, 0.0, [], running)
    figures.observe(1000, 1.0, [], running)
    p2r = figures.to_json()["pending_to_running"]
    assert p2r["pods"] == 2
    # nearest rank: the median of two is the first
    assert (p2r["p50_wall_s"], p2r["p99_wall_s"]) == (4.0, 20.0)
