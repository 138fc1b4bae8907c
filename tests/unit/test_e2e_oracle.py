"""The end-to-end tests' own fidelity oracle (tests/e2e/oracle.py) catches what it is there to catch."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.oracle import SETTLE_TRACE_MS, assert_follows_recording, counts_over, owner_errors

OWNER = "apps/Deployment/shop-1/web"
RECORDED = [(0, 2), (20_000, 5), (40_000, 3), (60_000, 0)]


def report(samples: list[tuple[int, int]], *, lateness_p99: int = 20, gap_s: float = 0.3) -> dict[str, Any]:
    return {
        "timeline": {
            "recorded_by_owner": {OWNER: [{"trace_ms": t, "pods_running": n} for t, n in RECORDED]},
            "replay_by_owner": [{"trace_ms": t, "pods_running": {OWNER: n}} for t, n in samples],
        },
        "lateness_ms": {"p99": lateness_p99},
        "largest_sample_gap_seconds": gap_s,
        "owner_fidelity": {"verdict": "degraded"},
    }


def test_the_recorded_counts_over_a_window_include_the_count_at_its_start() -> None:
    assert counts_over(RECORDED, 22_000, 38_000) == (5, 5)
    assert counts_over(RECORDED, 8_000, 21_000) == (2, 5)
    assert counts_over([(1_000, 4)], -500, 500) == (0, 0)


def test_a_replay_that_follows_within_the_settle_and_one_pod_passes() -> None:
    follows = [(0, 0), (2_000, 2), (22_000, 2), (28_000, 5), (41_000, 4), (52_000, 3), (71_000, 0)]
    assert owner_errors(report(follows), [OWNER]) == []


def test_a_replay_that_stays_on_a_count_past_the_settle_is_caught() -> None:
    lagging = [(2_000, 2), (20_000 + SETTLE_TRACE_MS + 1_000, 2)]
    (error,) = owner_errors(report(lagging), [OWNER])
    assert "2 running, recorded 5..5" in error


def test_a_replay_two_pods_off_is_caught_and_a_missing_owner_counts_as_zero() -> None:
    assert len(owner_errors(report([(35_000, 7)]), [OWNER])) == 1
    assert len(owner_errors(report([(35_000, 3)]), [OWNER])) == 1
    assert len(owner_errors(report([(35_000, 5)]), [OWNER, "core/Pod/shop-1/extra"])) == 0


def test_a_wrong_replay_passes_only_when_the_machine_fell_behind_by_the_reports_own_measures() -> None:
    wrong = [(35_000, 0)]
    with pytest.raises(AssertionError, match="the machine kept up"):
        assert_follows_recording(report(wrong), [OWNER])
    assert_follows_recording(report(wrong, lateness_p99=2_500), [OWNER])
    assert_follows_recording(report(wrong, gap_s=1.5), [OWNER])
    held = {**report(wrong, gap_s=1.5), "owner_fidelity": {"verdict": "held"}}
    with pytest.raises(AssertionError, match="yet the report says held"):
        assert_follows_recording(held, [OWNER])
