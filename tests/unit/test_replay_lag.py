"""An owner's lag behind the recording, and the governor's look-ahead, against a naive walk over every
window (``fidelity.range_over``)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.replay.clock.governor import ConvergenceGovernor
from pipeline.replay.clock.lag import deadline_ms, lag_ms
from pipeline.replay.report.fidelity import Timeline, range_over
from pipeline.replay.report.pod_tally import PodCounts

WEB = [(0, 2), (10_000, 5), (20_000, 3)]


def _fits(timeline: Timeline, at: float, window: float, count: int, tolerance: int) -> bool:
    low, high = range_over(timeline, at - window, at)
    return low - tolerance <= count <= high + tolerance


timelines = st.lists(st.tuples(st.integers(0, 100), st.integers(0, 8)), max_size=6).map(
    lambda changes: sorted(dict(changes).items())
)


@settings(max_examples=300, deadline=None)
@given(timelines, st.integers(0, 120), st.integers(0, 10), st.integers(0, 2))
def test_the_lag_is_the_shortest_window_the_count_fits(
    timeline: Timeline, at: int, count: int, tolerance: int
) -> None:
    lag = lag_ms(timeline, at, count, tolerance)
    if lag == 0:  # the count now, or the one before a change made at this very instant
        assert _fits(timeline, at, 0.5, count, tolerance)
    elif math.isinf(lag):
        assert not _fits(timeline, at, 10**6, count, tolerance)
    else:
        assert _fits(timeline, at, lag + 0.5, count, tolerance)
        assert not _fits(timeline, at, lag, count, tolerance)  # so within a window W iff lag < W


@settings(max_examples=300, deadline=None)
@given(timelines, st.integers(0, 120), st.integers(0, 10), st.integers(1, 30), st.integers(0, 60))
def test_the_deadline_is_the_first_instant_the_unchanged_count_is_max_lag_behind(
    timeline: Timeline, at: int, count: int, max_lag: int, ahead: int
) -> None:
    until = at + ahead
    found = deadline_ms(timeline, at, count, tolerance=1, max_lag_ms=max_lag, until_ms=until)
    naive = next(
        (t / 2 for t in range(2 * at, 2 * until + 1) if not _fits(timeline, t / 2, max_lag, count, 1)),
        math.inf,
    )
    assert found == naive
    if math.isfinite(found):
        assert lag_ms(timeline, found, count, 1) >= max_lag


def test_an_owner_with_the_recorded_count_has_no_lag_and_one_left_behind_trails_by_the_change() -> None:
    assert lag_ms(WEB, 15_000, 5, 1) == 0
    assert lag_ms(WEB, 15_000, 2, 1) == 5_000  # still at the count before the change at 10 s
    assert lag_ms(WEB, 25_000, 4, 0) == 5_000  # between 5 and 3: on its way down since 20 s
    assert lag_ms(WEB, 25_000, 2, 0) == 15_000  # the count before 10 s
    assert lag_ms(WEB, 25_000, 9, 1) == math.inf  # never recorded


def test_the_horizon_is_the_first_owner_deadline_and_no_further_than_the_largest_advance() -> None:
    governor = ConvergenceGovernor({"web": WEB, "api": [(0, 3)]}, max_lag_ms=5_000)
    counts = {"web": PodCounts(running=2), "api": PodCounts(running=3)}
    assert governor.horizon(1_000, counts) == 6_000  # nothing due: 5 s (the lag) ahead at most
    assert governor.horizon(7_000, counts) == 12_000
    assert governor.horizon(9_000, counts) == 14_000  # and not beyond: the cap binds first
    wide = ConvergenceGovernor({"web": WEB}, max_lag_ms=5_000, max_advance_ms=60_000)
    assert wide.horizon(1_000, counts) == 15_000  # web asks for 5 at 10 s: 5 s later it is behind
    assert wide.horizon(1_000, {}) == 5_000  # no pod yet: 5 s after web asked for 2 at 0 it is behind
    assert wide.horizon(1_000, {"web": PodCounts(running=5)}) == 1_000  # 3 too many: behind already
