"""What-ifs on the recorded HPAs: the sweep's HPA axes become variants (a cross product, per owner or for
all), each variant's overrides reach the HPA the replay applies and the plan's CPU targets, and bad
values are refused naming the flag."""

from __future__ import annotations

import re

import pytest

from pipeline.model.errors import ConfigError
from pipeline.model.events import EventType
from pipeline.replay.hpa.overrides import (
    HpaOverride,
    apply_overrides,
    hpa_variants,
    parse_axis_value,
)
from pipeline.replay.hpa.targets import is_hpa, plan_hpas
from tests import hpa_recording as rec
from tests.unit.test_hpa_replay import steps_of


def test_each_axis_value_is_a_point_and_axes_cross() -> None:
    values = [
        parse_axis_value("target_utilization", "50"),
        parse_axis_value("target_utilization", "80"),
        parse_axis_value("max_replicas", "web=6"),
    ]
    variants = hpa_variants(values)
    assert [dict(v.labels) for v in variants] == [
        {"autoscaler_pods": "hpa", "hpa_target": "50", "hpa_max[web]": "6"},
        {"autoscaler_pods": "hpa", "hpa_target": "80", "hpa_max[web]": "6"},
    ]
    # the override for every owner comes first, so the one naming an owner has the last word
    assert variants[0].overrides == (
        HpaOverride(None, target_utilization=50),
        HpaOverride("web", max_replicas=6),
    )
    assert hpa_variants([])[0].describe() == "HPAs as recorded"


@pytest.mark.parametrize(
    ("setting", "text", "problem"),
    [
        ("target_utilization", "high", "--hpa-target 'high': give [OWNER=]N"),
        ("target_utilization", "0", "out of range"),
        ("scale_down_window_s", "7200", "--hpa-scale-down-window '7200': 7200 is out of range"),
        ("min_replicas", "=2", "the owner before '=' is empty"),
    ],
)
def test_a_bad_axis_value_is_refused_naming_its_flag(setting: str, text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_axis_value(setting, text)


def test_overrides_for_all_then_for_one_owner_reach_the_hpa() -> None:
    overrides = (
        HpaOverride(None, target_utilization=80, scale_down_window_s=30),
        HpaOverride("hpa-shop/web", target_utilization=70, min_replicas=1),
        HpaOverride("other", max_replicas=1),
    )
    out = apply_overrides(rec.hpa(), rec.OWNER, overrides)
    spec = out["spec"]
    assert spec["metrics"][0]["resource"]["target"]["averageUtilization"] == 70
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, rec.MAX_REPLICAS)
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 30
    assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0, "kept as recorded"
    assert rec.hpa()["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 50, "a copy"


def test_an_override_that_cannot_apply_is_refused() -> None:
    with pytest.raises(ConfigError, match="minReplicas 5 above maxReplicas 4"):
        apply_overrides(rec.hpa(), rec.OWNER, (HpaOverride(None, min_replicas=5),))
    memory_only = rec.hpa()
    memory_only["spec"]["metrics"][0]["resource"]["name"] = "memory"
    with pytest.raises(ConfigError, match="has none"):
        apply_overrides(memory_only, rec.OWNER, (HpaOverride(None, target_utilization=60),))


def test_the_plan_applies_the_overrides_and_knows_the_cpu_target() -> None:
    steps = steps_of(rec.recording([(60_000, 4)], span_ms=300_000))
    overrides = (HpaOverride(None, target_utilization=90, scale_up_window_s=20),)
    kept, plan = plan_hpas(steps, 10.0, overrides)
    [hpa] = [
        s.payload.obj for s in kept if s.payload.type is EventType.APPLIED and is_hpa(s.payload.obj or {})
    ]
    assert hpa is not None
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 90
    assert plan.cpu_targets == {rec.OWNER: 90.0}
    up_window = [s for s in plan.settings if s.name.endswith("scaleUp.stabilizationWindowSeconds")]
    assert [(s.given, s.applied) for s in up_window] == [("20s", "2s")], "overridden, then scaled"
    assert plan_hpas(steps, 10.0)[1].cpu_targets == {rec.OWNER: float(rec.TARGET_PERCENT)}


def test_an_override_naming_no_autoscaled_owner_is_refused_with_the_owners() -> None:
    steps = steps_of(rec.recording([], span_ms=300_000))
    with pytest.raises(ConfigError, match=f"'api' names no autoscaled owner.*{rec.OWNER}"):
        plan_hpas(steps, 10.0, (HpaOverride("api", target_utilization=60),))
