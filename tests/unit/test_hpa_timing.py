"""Time scaling of the HPA: every behavior window and policy period of an HPA is divided by the speed
(whole seconds, within the API's bounds), defaults are written out scaled, the report lists each as
given and applied; the process timers are divided too, metrics-server's resolution no lower than the
stack's build's 1 s floor."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.model.errors import RewriteError
from pipeline.model.timespec import parse_go_duration
from pipeline.replay.hpa.timing import (
    DEFAULT_DOWNSCALE_STABILIZATION_S,
    METRIC_RESOLUTION_FLOOR_S,
    PERIOD_MAX_S,
    PROCESS_FLAGS,
    WINDOW_MAX_S,
    HpaProcessTimers,
    as_v2,
    go_duration,
    process_flags,
    scale_hpa,
    scale_hpa_process_timers,
)

SPEEDS = st.sampled_from([0.5, 1.0, 2.0, 5.0, 10.0, 33.3, 100.0])


def hpa(behavior: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": 1,
        "maxReplicas": 10,
    }
    if behavior is not None:
        spec["behavior"] = behavior
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": spec,
    }


def expected(given_s: int, speed: float, maximum: int) -> int:
    if given_s == 0:
        return 0
    return min(max(round(given_s / speed), 1), maximum)


policies = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["Pods", "Percent"]),
            "value": st.integers(1, 100),
            "periodSeconds": st.integers(1, PERIOD_MAX_S),
        }
    ),
    min_size=1,
    max_size=3,
)
rules = st.fixed_dictionaries(
    {},
    optional={
        "stabilizationWindowSeconds": st.integers(0, WINDOW_MAX_S),
        "selectPolicy": st.sampled_from(["Max", "Min", "Disabled"]),
        "policies": policies,
    },
)
behaviors = st.fixed_dictionaries({}, optional={"scaleUp": rules, "scaleDown": rules})


@given(behavior=behaviors, speed=SPEEDS)
def test_every_window_and_period_is_divided_by_the_speed(behavior: dict[str, Any], speed: float) -> None:
    original = hpa(behavior)
    scaled, settings = scale_hpa(original, speed)
    assert original == hpa(behavior), "the recorded object is not modified"
    applied = scaled["spec"]["behavior"]
    default_windows = {"scaleUp": 0, "scaleDown": DEFAULT_DOWNSCALE_STABILIZATION_S}
    default_periods = {"scaleUp": [15, 15], "scaleDown": [15]}
    for direction in ("scaleUp", "scaleDown"):
        given_rules = behavior.get(direction, {})
        window = given_rules.get("stabilizationWindowSeconds", default_windows[direction])
        assert applied[direction]["stabilizationWindowSeconds"] == expected(window, speed, WINDOW_MAX_S)
        periods = [p["periodSeconds"] for p in given_rules.get("policies", [])] or default_periods[direction]
        assert [p["periodSeconds"] for p in applied[direction]["policies"]] == [
            expected(p, speed, PERIOD_MAX_S) for p in periods
        ]
        if "selectPolicy" in given_rules:
            assert applied[direction]["selectPolicy"] == given_rules["selectPolicy"]
    # one setting per window and per period, each naming the HPA and the field, given → applied
    assert len(settings) == 2 + sum(len(applied[d]["policies"]) for d in ("scaleUp", "scaleDown"))
    assert all(s.name.startswith("HPA shop/web: spec.behavior.") for s in settings)
    for setting in settings:
        assert setting.applied.endswith("s")
        ideal = float(setting.given.split("s")[0]) / speed
        assert (setting.note == "") == (abs(int(setting.applied[:-1]) - ideal) < 1e-9)


def test_an_hpa_without_behavior_gets_the_defaults_scaled_and_says_where_they_come_from() -> None:
    scaled, settings = scale_hpa(hpa(), 10.0)
    down = scaled["spec"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] == 30
    assert down["policies"] == [{"type": "Percent", "value": 100, "periodSeconds": 2}]
    by_name = {s.name.rsplit(".", 2)[-2] + "." + s.name.rsplit(".", 1)[-1]: s for s in settings}
    window = by_name["scaleDown.stabilizationWindowSeconds"]
    assert window.given == "300s (controller's --horizontal-pod-autoscaler-downscale-stabilization default)"
    assert window.applied == "30s"


def test_v1_is_applied_as_v2_with_its_cpu_target() -> None:
    v1 = {
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"maxReplicas": 4, "targetCPUUtilizationPercentage": 60},
    }
    v2 = as_v2(v1)
    assert v2["apiVersion"] == "autoscaling/v2"
    assert v2["spec"]["metrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}},
        }
    ]
    assert "targetCPUUtilizationPercentage" not in v2["spec"]


def test_a_window_that_is_not_whole_seconds_is_refused_with_where_it_is() -> None:
    with pytest.raises(RewriteError, match=r"scaleUp.stabilizationWindowSeconds: '30s'"):
        scale_hpa(hpa({"scaleUp": {"stabilizationWindowSeconds": "30s"}}), 2.0)


@given(speed=SPEEDS)
def test_process_timers_are_divided_and_the_metric_resolution_stops_at_its_floor(speed: float) -> None:
    scaled, settings = scale_hpa_process_timers(speed)
    given_timers = HpaProcessTimers()
    assert scaled.sync_period_s == given_timers.sync_period_s / speed
    assert scaled.metric_resolution_s == max(
        given_timers.metric_resolution_s / speed, METRIC_RESOLUTION_FLOOR_S
    )
    floor_note = next(s for s in settings if s.name == "metrics-server --metric-resolution").note
    floored = given_timers.metric_resolution_s / speed < METRIC_RESOLUTION_FLOOR_S
    assert ("refuses less than 1s" in floor_note) == floored
    assert any(s.note.startswith("not scaled") for s in settings), "what cannot be scaled is named"


@given(speed=SPEEDS)
def test_every_process_flag_is_set_to_its_timer_divided_by_the_speed(speed: float) -> None:
    """What the controller-manager and metrics-server are restarted with: each flag the given timer /
    speed to the millisecond (Go reads the value back), the resolution at its floor at most, and the
    scrape timeout under 90 % of the resolution, which metrics-server requires."""
    scaled, settings = scale_hpa_process_timers(speed)
    flags = process_flags(scaled)
    given_timers = HpaProcessTimers()
    for flag in PROCESS_FLAGS:
        applied_s = parse_go_duration(flags[flag.component][flag.flag], flag.label)
        ideal = getattr(given_timers, flag.timer) / speed
        if flag.flag == "metric-resolution":
            ideal = max(ideal, METRIC_RESOLUTION_FLOOR_S)
        assert abs(applied_s - ideal) <= 0.0005, (flag, applied_s, ideal)
        setting = next(s for s in settings if s.name == flag.label)
        assert setting.applied == flags[flag.component][flag.flag], "the report shows the flag's value"
        assert parse_go_duration(setting.given, flag.label) == getattr(given_timers, flag.timer)
    resolution = parse_go_duration(flags["metrics-server"]["metric-resolution"], "resolution")
    timeout = parse_go_duration(flags["metrics-server"]["kubelet-request-timeout"], "timeout")
    assert resolution * 9 / 10 >= timeout, (
        "metrics-server refuses a resolution whose 90 % is under the timeout"
    )
    assert timeout <= 10.0


def test_at_x10_the_flags_are_the_documented_ones_and_every_timer_scales_exactly() -> None:
    """The stack's metrics-server takes 1.5 s (its floor is 1 s): at x10 every HPA timer is exactly
    the recorded one divided by 10, and the scrape timeout comes down under 90 % of the resolution."""
    scaled, settings = scale_hpa_process_timers(10.0)
    assert process_flags(scaled) == {
        "kube-controller-manager": {
            "horizontal-pod-autoscaler-sync-period": "1s500ms",
            "horizontal-pod-autoscaler-downscale-stabilization": "30s",
            "horizontal-pod-autoscaler-cpu-initialization-period": "30s",
            "horizontal-pod-autoscaler-initial-readiness-delay": "3s",
        },
        "metrics-server": {"metric-resolution": "1s500ms", "kubelet-request-timeout": "1s350ms"},
    }
    by_name = {s.name: s for s in settings}
    resolution = by_name["metrics-server --metric-resolution"]
    assert (resolution.given, resolution.applied, resolution.note) == ("15s", "1s500ms", "")
    assert "90 %" in by_name["metrics-server --kubelet-request-timeout"].note
    tolerance = by_name["kube-controller-manager --horizontal-pod-autoscaler-tolerance"]
    assert tolerance.note.startswith("not scaled"), "what cannot be scaled is named"
    not_scaled = [s.name for s in settings if s.note.startswith("not scaled")]
    assert len(not_scaled) == 2, f"only what really cannot be scaled: {not_scaled}"


def test_above_x15_the_resolution_stops_at_the_stacks_floor_and_says_so() -> None:
    scaled, settings = scale_hpa_process_timers(30.0)
    assert scaled.metric_resolution_s == METRIC_RESOLUTION_FLOOR_S == 1.0
    resolution = next(s for s in settings if s.name == "metrics-server --metric-resolution")
    assert resolution.applied == "1s"
    assert resolution.note == "ideal 0.5s; the stack's metrics-server refuses less than 1s"
    assert process_flags(scaled)["metrics-server"]["kubelet-request-timeout"] == "900ms"


def test_the_floor_is_the_one_the_stacks_metrics_server_build_patches_in() -> None:
    from pipeline.stack.go_module import METRICS_SERVER_PATCHES, METRICS_SERVER_RESOLUTION_FLOOR_S

    assert METRIC_RESOLUTION_FLOOR_S == METRICS_SERVER_RESOLUTION_FLOOR_S
    [floor] = [p for p in METRICS_SERVER_PATCHES if "MetricResolution <" in p[1]]
    assert floor[2].startswith(f"if o.MetricResolution < {METRICS_SERVER_RESOLUTION_FLOOR_S}*time.Second {{")
    assert not any("KubeletRequestTimeout" in p[1] for p in METRICS_SERVER_PATCHES), (
        "the timeout rule is upstream's"
    )


def test_at_speed_one_the_flags_are_the_defaults() -> None:
    """What a plain replay puts back: Kubernetes' and metrics-server's own values."""
    scaled, _ = scale_hpa_process_timers(1.0)
    assert process_flags(scaled) == process_flags(HpaProcessTimers())
    assert process_flags(scaled)["kube-controller-manager"]["horizontal-pod-autoscaler-sync-period"] == "15s"
    assert process_flags(scaled)["metrics-server"] == {
        "metric-resolution": "15s",
        "kubelet-request-timeout": "10s",
    }


def test_a_flag_value_is_a_go_duration_of_at_least_a_millisecond() -> None:
    assert go_duration(0.45045) == "450ms"
    assert go_duration(0.0001) == "1ms", "a tiny period must not become 0 (which means something else)"
    assert go_duration(0.0) == "0s"
    assert go_duration(300.0) == "5m"
