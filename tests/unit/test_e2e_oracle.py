"""The end-to-end tests' own oracle (tests/e2e/oracle.py) catches what it is there to catch: each defect a
replayer could have (a scale-down skipped, every step at time 0, --speed ignored, bare pods dropped, the
trace's end cut, a clock that never moves on) is a miss, whatever the report would say; a replay that
follows the trace within the settle passes."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.cluster_watch import ClusterWatch, recorded_owner
from tests.e2e.expected import Expected, Step
from tests.e2e.judged_replay import JudgedReplay
from tests.e2e.oracle import SETTLE_TRACE_MS, allowed, judge

WEB = "apps/Deployment/shop-1/web"
BATCH = "core/Pod/shop-1/batch-a"
SPEED = 1.0
"""At speed 1 the watch's delay allowance (0.6 wall s) is 0.6 trace s: the tests can be sharp."""
EXPECTED = Expected(
    {
        WEB: [Step(1_000, 2), Step(6_000, 5), Step(11_000, 5, surge=2), Step(16_000, 3), Step(30_000, 0)],
        BATCH: [Step(20_000, 1), Step(24_000, 0, early_ms=1_000)],
    },
    span_ms=33_000,
    namespaces=frozenset({"shop-1"}),
)
FOLLOWS = {
    WEB: [(0, 0), (2_500, 2), (8_000, 5), (12_000, 7), (13_000, 5), (18_500, 3), (32_000, 0)],
    BATCH: [(0, 0), (21_000, 1), (23_500, 0)],
}
"""(trace ms, Running pods) each owner reached, within the settle of each step."""


def replay_of(
    counts: dict[str, list[tuple[int, int]]],
    *,
    speed: float = SPEED,
    rate: float = SPEED,
    end_ms: int = 33_000,
    every_ms: int = 250,
) -> JudgedReplay:
    """A replay whose clock ran at ``rate`` trace s per wall s, read every ``every_ms`` of trace, to
    ``end_ms``; the cluster reaching ``counts`` at those trace instants."""
    clock = [(t / 1000 / rate, float(t)) for t in range(0, end_ms + 1, every_ms)]
    changes = sorted({t for timeline in counts.values() for t, _ in timeline})
    watch = ClusterWatch(Path("unused"), "kubetape", frozenset({"shop-1"}))
    watch.history = [(-1.0, {})]
    for at in changes:
        now = {owner: _count_at(timeline, at) for owner, timeline in counts.items()}
        watch.history.append((at / 1000 / rate, {k: v for k, v in now.items() if v}))
    return JudgedReplay({}, clock, watch, speed, "", Path("unused"))


def _count_at(timeline: list[tuple[int, int]], at: int) -> int:
    return [n for t, n in timeline if t <= at][-1]


def test_a_replay_that_follows_the_trace_within_the_settle_passes() -> None:
    assert judge(replay_of(FOLLOWS), EXPECTED) == []


def test_a_skipped_scale_down_is_a_miss() -> None:
    skipped = {**FOLLOWS, WEB: [(t, 5 if n == 3 else n) for t, n in FOLLOWS[WEB]]}
    misses = judge(replay_of(skipped), EXPECTED)
    assert any(m.startswith(WEB) and "5 Running" in m and "expected 2..4" in m for m in misses), misses
    assert any("step to 3 pod(s) at trace 16.00 s was never reached" in m for m in misses), misses


def test_a_step_applied_before_its_time_is_a_miss() -> None:
    # every step at time 0: the Deployment created, scaled and deleted at once, the bare pod started
    at_zero = {WEB: [(0, 0)], BATCH: [(0, 0), (500, 1), (4_500, 0)]}
    misses = judge(replay_of(at_zero), EXPECTED)
    assert any(
        m.startswith(BATCH) and "step to 1 pod(s) at trace 20.00 s was never reached" in m for m in misses
    )
    assert any(
        m.startswith(WEB) and "step to 2 pod(s) at trace 1.00 s was never reached" in m for m in misses
    )
    early = {**FOLLOWS, WEB: [(0, 0), (2_500, 2), (4_000, 5), (18_500, 3), (32_000, 0)]}
    misses = judge(replay_of(early), EXPECTED)
    assert any(m.startswith(WEB) and "5 Running over trace 4.00" in m for m in misses), misses


def test_a_late_step_past_the_settle_is_a_miss_and_one_within_it_is_not() -> None:
    late = {**FOLLOWS, WEB: [(0, 0), (2_500, 2), (6_000 + SETTLE_TRACE_MS + 1_000, 5), (32_000, 0)]}
    assert any("2 Running" in m for m in judge(replay_of(late), EXPECTED))
    in_time = {
        **FOLLOWS,
        WEB: [(0, 0), (2_500, 2), (6_000 + SETTLE_TRACE_MS - 500, 5), (18_500, 3), (32_000, 0)],
    }
    assert judge(replay_of(in_time), EXPECTED) == []


def test_dropped_bare_pods_are_a_miss() -> None:
    misses = judge(replay_of({WEB: FOLLOWS[WEB], BATCH: [(0, 0)]}), EXPECTED)
    assert any(m.startswith(BATCH) and "never reached" in m for m in misses), misses


def test_a_replay_cut_before_the_trace_s_end_is_a_miss() -> None:
    misses = judge(replay_of(FOLLOWS, end_ms=29_750), EXPECTED)
    assert any("clock ended at 29.75 s, not at the trace's end (33 s)" in m for m in misses), misses
    assert any(m.startswith(WEB) and "step to 0 pod(s)" in m for m in misses), misses


def test_a_clock_that_ignores_the_speed_is_a_miss_either_way() -> None:
    slow = judge(replay_of(FOLLOWS, rate=0.1), EXPECTED)
    assert any("the trace clock moved for" in m for m in slow), slow
    fast = judge(replay_of(FOLLOWS, rate=10.0), EXPECTED)
    assert any("faster than speed 1" in m for m in fast), fast


def test_a_clock_read_too_rarely_to_see_a_step_held_is_not_a_pass() -> None:
    # read every 10 trace s with the counts changing in between: the 2-pod step is never looked at
    problems = judge(replay_of(FOLLOWS, every_ms=11_000), EXPECTED)
    assert any("was not looked at while it held" in p for p in problems), problems


def test_a_rollout_may_surge_for_the_settle_only() -> None:
    steps = EXPECTED.steps[WEB]
    assert allowed(steps, 12_000, SETTLE_TRACE_MS, bound=1) == (4, 8)
    assert allowed(steps, 11_000 + SETTLE_TRACE_MS, SETTLE_TRACE_MS, bound=1) == (4, 6)


def test_pods_count_for_the_owner_the_cluster_says_they_have() -> None:
    recorded = frozenset({"shop-1"})
    replica = {
        "metadata": {
            "name": "web-5d9c-x",
            "namespace": "kubetape-shop-1",
            "labels": {"pod-template-hash": "5d9c"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5d9c"}],
        }
    }
    assert recorded_owner(replica, "kubetape", recorded) == WEB
    bare = {"metadata": {"name": "batch-a", "namespace": "kubetape-shop-1"}}
    assert recorded_owner(bare, "kubetape", recorded) == BATCH
    elsewhere = {"metadata": {"name": "batch-a", "namespace": "other-shop-1"}}
    assert recorded_owner(elsewhere, "kubetape", recorded) is None


def _held_at_9_5s(web_reaches_5_at_wall: float) -> JudgedReplay:
    """At speed 1 the clock holds at trace 9.5 s, where the settle of the 5-pod step ends, for 3 wall s
    while the Deployment, at 2 pods until then, is caught up; everything after comes 3 wall s later."""
    clock = [(t / 1000, float(t)) for t in range(0, 9_501, 250)]
    clock += [(9.5 + 0.25 * k, 9_500.0) for k in range(1, 13)]
    clock += [(t / 1000 + 3, float(t)) for t in range(9_750, 33_001, 250)]
    changes = [(2.5, WEB, 2), (web_reaches_5_at_wall, WEB, 5)]
    changes += [(t / 1000 + 3, owner, n) for owner, tl in FOLLOWS.items() for t, n in tl if t > 9_500]
    watch = ClusterWatch(Path("unused"), "kubetape", frozenset({"shop-1"}))
    counts: dict[str, int] = {}
    watch.history = [(-1.0, {})]
    for wall, owner, n in sorted(changes):
        counts = {**counts, owner: n}
        watch.history.append((wall, {k: v for k, v in counts.items() if v}))
    return JudgedReplay({}, clock, watch, SPEED, "", Path("unused"))


def test_a_held_instant_is_judged_by_the_state_the_clock_went_on_from() -> None:
    assert judge(_held_at_9_5s(web_reaches_5_at_wall=12.0), EXPECTED) == []
    misses = judge(_held_at_9_5s(web_reaches_5_at_wall=14.0), EXPECTED)
    assert any(m.startswith(WEB) and "2 Running over trace 9.50 s" in m for m in misses), misses
