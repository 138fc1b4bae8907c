"""Time scaling of Karpenter's settings: what a replay at speed S gives the simulated autoscaler."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.model.errors import ConfigError
from pipeline.replay.autoscale.settings import (
    KarpenterTimers,
    scale_duration,
    scale_karpenter_timers,
    scale_nodepool,
)


def _pool(**disruption: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"name": "default"}, "expireAfter": "24h"}},
            "disruption": disruption,
        },
    }


def test_consolidate_after_of_30s_at_x10_acts_after_3s() -> None:
    pool, settings = scale_nodepool(_pool(consolidateAfter="30s"), 10.0, source="pool.yaml")
    assert pool["spec"]["disruption"]["consolidateAfter"] == "3s"
    assert pool["spec"]["template"]["spec"]["expireAfter"] == "8640s"
    by_name = {s.name: s for s in settings}
    consolidate = by_name["NodePool general: spec.disruption.consolidateAfter"]
    assert (consolidate.given, consolidate.applied, consolidate.note) == ("30s", "3s", "")


def test_the_input_pool_is_left_alone() -> None:
    given = _pool(consolidateAfter="30s")
    scale_nodepool(given, 10.0, source="pool.yaml")
    assert given["spec"]["disruption"]["consolidateAfter"] == "30s"


def test_rounding_is_reported_with_the_ideal_value() -> None:
    setting = scale_duration("15s", 10.0, "c")
    assert setting.applied == "2s"
    assert "ideal 1.5s" in setting.note


def test_a_nonzero_duration_never_becomes_zero() -> None:
    assert scale_duration("1s", 100.0, "c").applied == "1s"
    assert scale_duration("0s", 100.0, "c").applied == "0s"


def test_never_stays_never() -> None:
    assert scale_duration("Never", 10.0, "c").applied == "Never"


def test_defaults_are_scaled_and_marked() -> None:
    raw = _pool()
    del raw["spec"]["template"]["spec"]["expireAfter"]
    pool, settings = scale_nodepool(raw, 10.0, source="pool.yaml")
    assert pool["spec"]["template"]["spec"]["expireAfter"] == "259200s"
    expire = next(s for s in settings if s.name.endswith("expireAfter"))
    assert expire.given == "720h (default)"


def test_budget_durations_are_whole_minutes_and_schedules_are_named_unscalable() -> None:
    budgets = [{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}, {"nodes": "10%"}]
    pool, settings = scale_nodepool(_pool(budgets=budgets), 10.0, source="pool.yaml")
    assert pool["spec"]["disruption"]["budgets"][0]["duration"] == "48m"
    schedule = next(s for s in settings if s.name.endswith("budgets[0].schedule"))
    assert schedule.applied == "0 9 * * mon-fri"
    assert "not scaled" in schedule.note
    short, _ = scale_nodepool(_pool(budgets=[{"nodes": "1", "duration": "5m"}]), 10.0, source="p")
    assert short["spec"]["disruption"]["budgets"][0]["duration"] == "1m"


def test_a_non_nodepool_is_refused_with_what_to_do() -> None:
    with pytest.raises(ConfigError, match=r"pool.yaml: expected a Karpenter NodePool"):
        scale_nodepool({"apiVersion": "v1", "kind": "Node"}, 10.0, source="pool.yaml")


def test_karpenter_timers_keep_sub_second_precision() -> None:
    timers, settings = scale_karpenter_timers(10.0)
    assert timers.batch_idle_s == pytest.approx(0.1)
    assert timers.batch_max_s == pytest.approx(1.0)
    assert timers.polling_period_s == pytest.approx(1.0)
    assert timers.validation_delay_s == pytest.approx(1.5)
    assert [(s.given, s.applied) for s in settings] == [
        ("1s", "0.1s"),
        ("10s", "1s"),
        ("10s", "1s"),
        ("15s", "1.5s"),
        ("5s, 5s", "5s, 5s"),
    ]
    assert settings[-1].note.startswith("not scaled")
    again, _ = scale_karpenter_timers(2.0, KarpenterTimers(2.0, 20.0, 10.0, 15.0))
    assert again == KarpenterTimers(1.0, 10.0, 5.0, 7.5)
