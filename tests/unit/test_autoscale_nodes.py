"""Replaying a recording of an autoscaled cluster under the same autoscaler: the recorded autoscaler's
Nodes leave the plan and become the reference its node count is judged against, at every scaled second
after a settle, within a stated tolerance."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.autoscale.nodes import (
    node_count_fidelity,
    recorded_node_counts,
    without_autoscaler_nodes,
)
from pipeline.replay.plan import plan_replay

SPEED = 10.0


def node(name: str, *, karpenter: bool = True) -> dict[str, Any]:
    labels = {"karpenter.sh/nodepool": "general"} if karpenter else {"type": "kwok"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def deployment() -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}}


def test_the_recorded_autoscalers_nodes_leave_the_plan_and_their_count_is_kept() -> None:
    events = [
        Event.applied(0, key_of(deployment()), deployment(), 0),
        Event.applied(0, key_of(node("base", karpenter=False)), node("base", karpenter=False), 1),
        Event.applied(5_000, key_of(node("k1")), node("k1"), 2),
        Event.applied(6_000, key_of(node("k2")), node("k2"), 3),
        Event.applied(7_000, key_of(node("k1")), node("k1"), 4),  # a status update: still one node
        Event.deleted(60_000, key_of(node("k1")), node("k1")),
    ]
    plan = plan_replay(build_segment(events, start_ms=0, end_ms=90_000, kind=SegmentKind.TRACE), SPEED)
    kept, counts = without_autoscaler_nodes(plan)
    assert counts == [(5_000, 1), (6_000, 2), (7_000, 2), (60_000, 1)]
    # the Deployment and the fixed base node are still replayed
    assert sorted(step.key for step in kept.steps) == sorted(
        [str(key_of(deployment())), str(key_of(node("base")))]
    )
    assert recorded_node_counts([], 0) == []


def samples(counts: list[tuple[float, int]]) -> list[dict[str, Any]]:
    return [{"trace_ms": at, "nodes": n} for at, n in counts]


RECORDED = [(10_000, 1), (20_000, 3), (900_000, 1)]
"""One node at 10 s, three at 20 s, one again at 900 s (trace time)."""


def judge(replay: list[dict[str, Any]], *, end_ms: float = 1_200_000, tolerance: int = 1) -> dict[str, Any]:
    """With a 30 s settle and a ±20 s window (wall): 300 and 200 trace seconds at ×10."""
    return node_count_fidelity(
        RECORDED,
        replay,
        speed=SPEED,
        end_ms=end_ms,
        tolerance=tolerance,
        settle_wall_s=30.0,
        window_wall_s=20.0,
    )


def test_a_replay_that_follows_the_recording_within_the_window_holds() -> None:
    # the simulated Karpenter reaches three nodes 15 wall s (150 trace s) late and consolidates 10 wall s late
    replay = samples([(0, 0), (50_000, 1), (170_000, 3), (1_000_000, 1)])
    fidelity = judge(replay)
    assert fidelity["held"] is True
    assert fidelity["max_error"] == 0
    assert fidelity["tolerance_nodes"] == 1
    # from the 30 s settle (300 trace s) to 1200 trace s, one comparison per scaled second (10 trace s)
    assert fidelity["seconds_compared"] == 91
    assert fidelity["per_scaled_second"][0] == {"trace_s": 300.0, "recorded": 3, "replay": 3, "error": 0}


def test_a_replay_whose_count_strays_beyond_the_tolerance_does_not_hold_and_says_when() -> None:
    # consolidation never happens in the replay: three nodes where the recording went back to one
    replay = samples([(0, 0), (50_000, 3)])
    fidelity = judge(replay)
    assert fidelity["held"] is False
    assert fidelity["max_error"] == 2
    outside = [e["trace_s"] for e in fidelity["per_scaled_second"] if e["error"] > 1]
    # the window forgives 20 wall s (200 trace s) after the recorded scale-down at 900 s
    assert outside[0] == 1100.0
    assert fidelity["seconds_outside"] == len(outside)


def test_one_node_off_is_within_the_stated_tolerance() -> None:
    replay = samples([(0, 2)])  # two nodes throughout: the recording had three, then one
    fidelity = judge(replay)
    assert fidelity["max_error"] == 1
    assert fidelity["held"] is True
    assert judge(replay, tolerance=0)["held"] is False


@pytest.mark.parametrize("replay", [[], samples([(0, 1)])])
def test_nothing_to_compare_before_the_settle_is_not_a_hold(replay: list[dict[str, Any]]) -> None:
    fidelity = judge(replay, end_ms=200_000)
    assert fidelity["seconds_compared"] == 0
    assert fidelity["held"] is False
