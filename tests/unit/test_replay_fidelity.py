"""Per-owner fidelity: a replay sample is compared with the recording over the preceding resolution."""

from __future__ import annotations

from pipeline.replay.fidelity import OwnerSample, compare_owners, range_over, value_at

WEB = [(0, 2), (10_000, 5), (20_000, 3), (30_000, 0)]


def test_recorded_count_is_a_step_function() -> None:
    assert value_at(WEB, -1) == 0
    assert value_at(WEB, 0) == 2
    assert value_at(WEB, 19_999) == 5
    assert value_at(WEB, 45_000) == 0
    assert range_over(WEB, 5_000, 25_000) == (2, 5)
    assert range_over(WEB, 12_000, 15_000) == (5, 5)


def test_a_sample_trailing_a_change_by_less_than_the_resolution_is_right() -> None:
    samples = [
        OwnerSample(5_000, {"web": 2}),
        OwnerSample(10_500, {"web": 2}),  # the simulated controller has not scaled up yet
        OwnerSample(15_000, {"web": 5}),
        OwnerSample(25_000, {"web": 3}),
    ]
    [web] = compare_owners({"web": WEB}, samples, resolution_ms=1_000)
    assert (web.max_error, web.within_one, web.samples) == (0, 4, 4)
    assert (web.recorded_peak, web.replay_peak) == (5, 5)


def test_counts_outside_the_recorded_range_are_errors_per_owner() -> None:
    samples = [OwnerSample(15_000, {"web": 1, "stray": 2}), OwnerSample(35_000, {})]
    result = {o.owner: o for o in compare_owners({"web": WEB}, samples, resolution_ms=1_000)}
    assert result["web"].max_error == 4  # 5 recorded, 1 replayed
    assert result["web"].within_one == 1  # the sample after the end: 0 and 0
    assert result["stray"].max_error == 2
