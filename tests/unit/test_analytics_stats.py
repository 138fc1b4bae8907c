"""Confidence intervals and the Pareto frontier: the pure decisions behind compare and sweep."""

from __future__ import annotations

import pytest

from pipeline.analytics.pareto import dominates, pareto_frontier
from pipeline.analytics.stats import difference_interval, mean_interval, percentile, t_quantile


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423), (1000, 1.9623)],
)
def test_t_quantiles_match_the_published_table(df: float, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_a_mean_interval_is_the_textbook_t_interval() -> None:
    interval = mean_interval([10.0, 12.0, 14.0])
    # mean 12, s = 2, n = 3: 12 ± 4.3027 · 2 / √3
    assert interval.estimate == 12.0
    assert interval.low == pytest.approx(12 - 4.9683, abs=1e-3)
    assert interval.high == pytest.approx(12 + 4.9683, abs=1e-3)
    assert mean_interval([5.0]).low is None  # one run: no interval, never a claim


def test_a_difference_is_called_only_when_its_interval_excludes_zero() -> None:
    clearly_more = difference_interval([10.0, 11.0, 10.5], [20.0, 21.0, 19.5])
    assert clearly_more.estimate == pytest.approx(9.6667, abs=1e-3)
    assert clearly_more.excludes_zero
    noise = difference_interval([10.0, 14.0, 9.0], [11.0, 13.0, 10.0])
    assert not noise.excludes_zero
    identical = difference_interval([3.0, 3.0], [3.0, 3.0])
    assert identical.estimate == 0.0
    assert not identical.excludes_zero
    single = difference_interval([1.0], [100.0])
    assert not single.excludes_zero  # one repetition each: no claim however large the gap


def test_welch_interval_matches_a_hand_computation() -> None:
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0]
    interval = difference_interval(a, b)
    # var_a = 5/3, var_b = 4; se² = 5/12 + 4/3 = 1.75; Welch df = 1.75² / ((5/12)²/3 + (4/3)²/2) = 3.2347
    half = t_quantile(0.975, 3.2347) * 1.75**0.5
    assert interval.low == pytest.approx(1.5 - half, abs=1e-3)
    assert interval.high == pytest.approx(1.5 + half, abs=1e-3)


def test_percentiles_interpolate() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([], 0.5) is None


def test_the_frontier_keeps_exactly_the_undominated_configurations() -> None:
    points = {
        "1 node": (1.0, 50.0),
        "2 nodes": (2.0, 10.0),
        "3 nodes": (3.0, 10.0),  # dominated by 2 nodes: dearer, no more reliable
        "4 nodes": (4.0, 0.0),
        "big nodes": (4.5, 20.0),  # dominated by 2 nodes on both
    }
    assert pareto_frontier(points) == ["1 node", "2 nodes", "4 nodes"]
    assert dominates((1.0, 1.0), (1.0, 2.0))
    assert not dominates((1.0, 1.0), (1.0, 1.0))
    ties = {"a": (1.0, 1.0), "b": (1.0, 1.0)}
    assert pareto_frontier(ties) == ["a", "b"]
    assert pareto_frontier({}) == []
    assert pareto_frontier({"only": (5.0, 5.0)}) == ["only"]
