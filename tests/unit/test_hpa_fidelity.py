"""Fidelity for the owners the simulated HPA decides: their replicas are judged against the recorded
HPA's from its reaction time on, over that reaction time either side (either HPA may act first); the
reaction time follows the timers each HPA ran with, in trace time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.replay.hpa.reaction import reaction_time_ms
from pipeline.replay.hpa.timing import HpaProcessTimers, scale_hpa_process_timers
from pipeline.replay.report.fidelity import OwnerSample, Timeline, compare_owners, judge, value_at
from pipeline.replay.report.report import ReplayReport

WEB = "apps/Deployment/shop/web"
REACTION_MS = 45_000.0
SETTLE_MS = 3_000.0
# production's HPA: 2 replicas, up to 6 as the load rose, back to 2 as it fell
RECORDED: Timeline = [(0, 2), (100_000, 4), (115_000, 6), (300_000, 4), (315_000, 2)]


def replay(timeline: Timeline, *, until_ms: int = 500_000, every_ms: int = 5_000) -> list[OwnerSample]:
    """Samples every ``every_ms`` of an owner running ``timeline``."""
    return [OwnerSample(t, {WEB: value_at(timeline, t)}) for t in range(0, until_ms, every_ms)]


def shifted(timeline: Timeline, by_ms: int) -> Timeline:
    return [(0, timeline[0][1]), *((max(t + by_ms, 0), n) for t, n in timeline[1:])]


def verdict(samples: list[OwnerSample], reactions: dict[str, float] | None) -> str:
    recorded = {WEB: RECORDED}
    return judge(
        recorded, samples, SETTLE_MS, resolution_wall_s=1.0, lateness_p99_ms=0.0, hpa_reactions=reactions
    ).verdict


def test_a_simulated_hpa_deciding_later_within_its_reaction_time_holds() -> None:
    later = replay(shifted(RECORDED, 40_000))
    assert verdict(later, {WEB: REACTION_MS}) == "held"
    assert verdict(later, None) == "failed", "judged as a replayed owner, the HPA's lag is a failure"


def test_a_simulated_hpa_deciding_earlier_within_its_reaction_time_holds() -> None:
    earlier = replay(shifted(RECORDED, -40_000))
    assert verdict(earlier, {WEB: REACTION_MS}) == "held"
    [owner] = compare_owners({WEB: RECORDED}, earlier, SETTLE_MS, {WEB: REACTION_MS})
    assert owner.max_error == 0
    assert owner.hpa_reaction_ms == REACTION_MS
    assert owner.to_json()["hpa_reaction_ms"] == 45_000


def test_an_hpa_that_decides_otherwise_fails() -> None:
    never_scaled = replay([(0, 2)])
    assert verdict(never_scaled, {WEB: REACTION_MS}) == "failed"
    [owner] = compare_owners({WEB: RECORDED}, never_scaled, SETTLE_MS, {WEB: REACTION_MS})
    assert owner.max_error == 4
    too_late = replay(shifted(RECORDED, 60_000))  # beyond the reaction time: two pods off for 15 s
    assert compare_owners({WEB: RECORDED}, too_late, SETTLE_MS, {WEB: REACTION_MS})[0].max_error == 2


def test_samples_before_the_reaction_time_are_not_judged() -> None:
    # the simulated HPA's owner had not started its pods yet: no HPA could have acted on it
    samples = [OwnerSample(t, {WEB: 0}) for t in range(0, 45_000, 5_000)]
    samples += replay(RECORDED)[9:]
    [owner] = compare_owners({WEB: RECORDED}, samples, SETTLE_MS, {WEB: REACTION_MS})
    assert owner.samples == len(samples) - 9
    assert owner.max_error == 0
    assert compare_owners({WEB: RECORDED}, samples, SETTLE_MS)[0].max_error == 2, "a plain owner is judged"


def test_other_owners_keep_the_settle() -> None:
    other = "apps/Deployment/shop/db"
    recorded = {WEB: RECORDED, other: [(0, 1), (100_000, 3)]}
    samples = [
        OwnerSample(t, {WEB: n, other: 3 if t >= 130_000 else 1})
        for t, n in ((s.trace_ms, s.running[WEB]) for s in replay(shifted(RECORDED, 30_000)))
    ]
    owners = {o.owner: o for o in compare_owners(recorded, samples, SETTLE_MS, {WEB: REACTION_MS})}
    assert owners[WEB].max_error == 0
    assert owners[other].max_error == 2, "the HPA's window is its owners' only"
    assert owners[other].hpa_reaction_ms is None


@given(st.integers(min_value=-45_000, max_value=45_000), st.sampled_from([1_000, 5_000, 15_000]))
def test_any_decision_within_the_reaction_time_either_side_is_exact(by_ms: int, every_ms: int) -> None:
    samples = replay(shifted(RECORDED, by_ms), every_ms=every_ms)
    [owner] = compare_owners({WEB: RECORDED}, samples, SETTLE_MS, {WEB: REACTION_MS})
    assert owner.max_error == 0


def test_the_report_judges_autoscaled_owners_over_the_reaction_and_says_so() -> None:
    report = ReplayReport("r", "trace", 1.0, recorded_by_owner={WEB: RECORDED})
    report.hpa_reactions = {WEB: REACTION_MS}
    for sample in replay(shifted(RECORDED, 30_000)):
        report.add_sample(sample.trace_ms, sample.running[WEB], 1, dict(sample.running))
    fidelity = report.to_json()["owner_fidelity"]
    assert fidelity["verdict"] == "held"
    [owner] = fidelity["owners"]
    assert owner["hpa_reaction_ms"] == 45_000
    assert "recorded HPA" in owner["truth"]
    assert "1 owner(s) the simulated HPA decides: judged from 45 s of trace time on" in report.summary()


def test_the_reaction_time_is_the_longer_hpas_in_trace_time() -> None:
    defaults = HpaProcessTimers()
    assert reaction_time_ms(1.0, defaults) == 45_000, "2 scrapes of 15 s and a 15 s sync"
    assert reaction_time_ms(10.0, defaults) == 450_000, "timers as deployed take 10 times as long"
    # scaled on the local stack (metrics-server's floor 1 s): every timer scales exactly up to x15, so
    # the simulated HPA reacts as fast as the recorded one
    for speed in (1.5, 4.0, 10.0, 15.0):
        assert reaction_time_ms(speed, scale_hpa_process_timers(speed)[0]) == pytest.approx(45_000), speed
    # above it the resolution stays at 1 s: 2 x 1 s + 0.5 s sync, times 30
    assert reaction_time_ms(30.0, scale_hpa_process_timers(30.0)[0]) == pytest.approx(75_000)


def test_a_recorded_peak_the_simulated_hpa_never_reached_fails_however_short() -> None:
    # production's HPA went to 4 for 30 s; the window of 45 s either side always holds a 2 as well
    short_peak: Timeline = [(0, 2), (100_000, 4), (130_000, 2)]
    never = [OwnerSample(t, {WEB: 2}) for t in range(0, 300_000, 5_000)]
    [owner] = compare_owners({WEB: short_peak}, never, SETTLE_MS, {WEB: REACTION_MS})
    assert owner.max_error == 2, "what the recording had, the replay never had within R"
    reached = replay(shifted(short_peak, 30_000))
    [owner] = compare_owners({WEB: short_peak}, reached, SETTLE_MS, {WEB: REACTION_MS})
    assert owner.max_error == 0


def test_a_recorded_peak_wholly_before_the_reaction_time_is_never_called_held() -> None:
    # the recorded HPA scaled 2 -> 6 -> 2 within the first 100 s; R is 215 s (a metrics pipeline that
    # cannot keep the speed): no judged sample can see the peak, and a simulated HPA that never left 2
    # was called held on every judged sample
    early_peak: Timeline = [(0, 2), (40_000, 6), (100_000, 2)]
    never_scaled = replay([(0, 2)])
    result = judge(
        {WEB: early_peak},
        never_scaled,
        SETTLE_MS,
        resolution_wall_s=1.0,
        lateness_p99_ms=0.0,
        hpa_reactions={WEB: 215_000.0},
    )
    assert compare_owners({WEB: early_peak}, never_scaled, SETTLE_MS, {WEB: 215_000.0})[0].max_error == 0
    assert result.verdict == "degraded"
    assert any("from 2 to 6 pods before the simulated HPA's reaction time" in r for r in result.reasons)
    # a one-pod wobble before R is within the bound and says nothing
    wobble: Timeline = [(0, 2), (20_000, 3), (30_000, 2)]
    assert (
        judge(
            {WEB: wobble},
            never_scaled,
            SETTLE_MS,
            resolution_wall_s=1.0,
            lateness_p99_ms=0.0,
            hpa_reactions={WEB: 215_000.0},
        ).verdict
        == "held"
    )


def test_a_rise_just_before_the_reaction_time_that_lasts_past_it_is_judged_and_may_hold() -> None:
    # the end-to-end recording at x10: the recorded HPA scaled 2 -> 4 at 44.9 s, R 45 s, back at 105 s;
    # the samples after R ask the replay for the 4, so nothing went unjudged
    rise: Timeline = [(0, 2), (44_900, 4), (105_700, 2)]
    samples = replay(shifted(rise, 10_000))
    result = judge(
        {WEB: rise},
        samples,
        SETTLE_MS,
        resolution_wall_s=1.0,
        lateness_p99_ms=0.0,
        hpa_reactions={WEB: 45_000.0},
    )
    assert result.verdict == "held", result.reasons
