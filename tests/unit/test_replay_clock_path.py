"""At ``--speed max`` each sample's window is the trace time the clock covered in the wall seconds
before it (``fidelity.TraceClockPath``), not the resolution at the run's overall speed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.replay.fidelity import OwnerSample, TraceClockPath, compare_owners, judge

Stretch = tuple[float, float]
"""(wall seconds, clock speed): speed 0 is a hold."""


def _points(stretches: list[Stretch], every_s: float = 0.5) -> list[tuple[float, float]]:
    """(wall s, trace ms) as a sampler taking a sample every ``every_s`` would see the clock."""
    points = [(0.0, 0.0)]
    for wall_s, speed in stretches:
        steps = round(wall_s / every_s)
        for _ in range(steps):
            wall, trace = points[-1]
            points.append((wall + every_s, trace + every_s * speed * 1000))
    return points


def _reference_window_ms(stretches: list[Stretch], upto: int, wall_s: float) -> float:
    """Deliberately naive: walk back from the end of stretch ``upto`` through the stretches in which
    the clock ran, taking wall time until ``wall_s`` is used up; beyond the first, at its speed."""
    running = [s for s in stretches[: upto + 1] if s[1] > 0]
    covered, left = 0.0, wall_s
    for duration, speed in reversed(running):
        take = min(left, duration)
        covered += take * speed * 1000
        left -= take
    return covered + left * running[0][1] * 1000


def test_at_one_speed_the_window_is_the_nominal_one_whatever_the_holds() -> None:
    clock = TraceClockPath(_points([(10, 5), (4, 0), (10, 5)]), speed=5)
    for trace_ms in (0, 2_000, 25_000, 50_000, 100_000):
        assert clock.window_ms(trace_ms, 5_000) == pytest.approx(5_000)
        assert clock.window_ms(trace_ms, 15_000) == pytest.approx(15_000)


def test_the_window_follows_the_speed_of_the_moment() -> None:
    # 10 s at speed 2, then 10 s at speed 20: overall 11
    clock = TraceClockPath(_points([(10, 2), (10, 20)]), speed=11)
    one_second = 11_000.0  # the nominal window of 1 wall second
    assert clock.window_ms(10_000, one_second) == pytest.approx(2_000)  # end of the slow stretch
    assert clock.window_ms(220_000, one_second) == pytest.approx(20_000)  # end of the fast one
    assert clock.window_ms(20_000 + 10_000, one_second) == pytest.approx(10_000 + 1_000)  # half and half


def test_a_hold_does_not_count_as_wall_time() -> None:
    # the clock ran at 10, held 30 s, then ran at 10 again: 1 wall second back from just after the
    # hold reaches into the stretch before it
    clock = TraceClockPath(_points([(10, 10), (30, 0), (10, 10)]), speed=2.5)
    assert clock.window_ms(100_000 + 5_000, 2_500) == pytest.approx(10_000)


@given(
    st.lists(
        st.tuples(st.integers(1, 20).map(float), st.sampled_from([0.0, 1.0, 2.0, 7.5, 16.0, 28.0])),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([0.5, 1.0, 2.0, 10.0]),
    st.floats(1.0, 20.0),
)
def test_windows_match_a_naive_walk_back_through_the_stretches(
    stretches: list[Stretch], wall_s: float, nominal_speed: float
) -> None:
    if all(speed == 0 for _, speed in stretches) or stretches[0][1] == 0:
        stretches = [(1.0, 1.0), *stretches]
    clock = TraceClockPath(_points(stretches), speed=nominal_speed)
    trace_ms = 0.0
    for index, (duration, speed) in enumerate(stretches):
        trace_ms += duration * speed * 1000
        if speed == 0:
            continue  # a held instant is the end of the stretch that reached it
        expected = _reference_window_ms(stretches, index, wall_s)
        assert clock.window_ms(trace_ms, wall_s * 1000 * nominal_speed) == pytest.approx(expected), (
            stretches,
            index,
        )


# ---- the verdict at speed max ---------------------------------------------------------------------
WEB = [(0, 2), (100_000, 8), (200_000, 3)]


def _fast_then_slow() -> tuple[TraceClockPath, list[OwnerSample]]:
    """The clock ran at 20 for 10 s (the scale-up to 8 at trace 100 s is in it), then at 2 for 50 s
    (the scale-down to 3 at trace 200 s): overall 5. The cluster took 0.75 wall s to follow the
    scale-up, and 4 wall s to follow the scale-down."""
    clock = TraceClockPath(_points([(10, 20), (50, 2)]), speed=5)
    samples = []
    for i in range(1, 121):
        wall = i * 0.5
        trace = wall * 20_000 if wall <= 10 else 200_000 + (wall - 10) * 2_000
        count = 2 if trace < 100_000 + 15_000 else 8  # 0.75 wall s behind
        if trace >= 200_000 + 8_000:  # 4 wall s behind
            count = 3
        samples.append(OwnerSample(trace, {"web": count}))
    return clock, samples


def test_a_fast_stretch_is_judged_at_its_speed_not_the_overall_one() -> None:
    clock, samples = _fast_then_slow()
    fast = [s for s in samples if s.trace_ms <= 200_000]
    # at the overall speed, 1 wall second is 5 trace seconds: the 0.75 wall s (15 trace s) a scale-up
    # took at speed 20 looks like 3 wall seconds late
    [overall] = compare_owners({"web": WEB}, fast, resolution_ms=5_000)
    assert overall.max_error == 6
    [local] = compare_owners({"web": WEB}, fast, resolution_ms=5_000, clock=clock)
    assert local.max_error == 0


def test_a_slow_stretch_is_held_to_its_speed_too() -> None:
    clock, samples = _fast_then_slow()
    slow = [s for s in samples if s.trace_ms > 200_000]
    # 4 wall s at speed 2 is 8 trace s: within 1 wall second at the overall speed (5 trace s)? no;
    # within 2 (10 trace s) yes. At the clock's own speed, 2 wall s is 4 trace s: not enough
    [overall] = compare_owners({"web": WEB}, slow, resolution_ms=10_000)
    assert overall.max_error == 0
    [local] = compare_owners({"web": WEB}, slow, resolution_ms=10_000, clock=clock)
    assert local.max_error == 5
    verdict = judge({"web": WEB}, samples, 5_000, speed=5, lateness_p99_ms=1.0, clock=clock)
    assert verdict.verdict == "degraded"
    assert "needed up to 4 s to converge" in verdict.reasons[0]
