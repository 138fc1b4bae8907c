"""Time scaling of the Horizontal Pod Autoscaler: at speed S its timers run S times faster.

Two kinds of timers decide when an HPA acts:

* each HPA object's ``spec.behavior``: the stabilization windows and the policies' periods of
  scale-up and scale-down. They are rewritten when the HPA is applied, divided by S. An HPA without
  them gets Kubernetes' defaults written out, divided by S (a default is a timer too), and the
  scale-down window the controller would take from ``--horizontal-pod-autoscaler-downscale-
  stabilization`` (5 min) is written into every HPA, so it is scaled wherever the controller runs.
  The API takes whole seconds (windows 0..3600, periods 1..1800): the applied value is rounded and
  the report shows both.
* process flags: the controller's sync period (``--horizontal-pod-autoscaler-sync-period``, 15 s),
  its downscale stabilization, CPU initialization period and initial readiness delay, and
  metrics-server's ``--metric-resolution`` (15 s; upstream refuses less than 10 s, the local stack's
  build (``pipeline.stack.build``) less than 1 s, so a replay up to x15 scrapes exactly 15/S s).
  They are the cluster's, not the replay's: :func:`process_flags` gives their values, which a
  :class:`~pipeline.replay.ports.PodAutoscalerProcess` (the local stack's:
  ``services.local_pod_autoscaler``) restarts the processes with; elsewhere they run as deployed.

``autoscaling/v1`` (CPU target only, no behavior field) and ``v2beta2`` HPAs are applied as
``autoscaling/v2``, the one version with behavior. Pure logic, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.model.errors import ConfigError, RewriteError
from pipeline.model.timespec import format_duration, parse_go_duration
from pipeline.replay.autoscale.settings import ScaledSetting

HPA_KIND = "HorizontalPodAutoscaler"
HPA_API_VERSION = "autoscaling/v2"
DEFAULT_DOWNSCALE_STABILIZATION_S = 300
"""kube-controller-manager's ``--horizontal-pod-autoscaler-downscale-stabilization`` default."""
WINDOW_MAX_S = 3600
PERIOD_MAX_S = 1800


def _default_rules(direction: str) -> dict[str, Any]:
    """Kubernetes' defaults of one direction (k8s.io/kubernetes pkg/apis/autoscaling/v2/defaults.go)."""
    if direction == "scaleUp":
        return {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        }
    return {
        "stabilizationWindowSeconds": DEFAULT_DOWNSCALE_STABILIZATION_S,
        "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    }


def _scale_seconds(given: Any, speed: float, where: str, *, minimum: int, maximum: int) -> ScaledSetting:
    if not isinstance(given, int) or isinstance(given, bool) or given < 0:
        raise RewriteError(f"{where}: {given!r} is not a whole number of seconds")
    ideal = given / speed
    applied = min(max(round(ideal), minimum if given > 0 else 0), maximum)
    note = ""
    if abs(applied - ideal) > 1e-9:
        note = f"ideal {ideal:g}s; rounded to whole seconds, which is all the HPA API accepts"
    return ScaledSetting(where, f"{given}s", f"{applied}s", note)


def _given_as(setting: ScaledSetting, given: str) -> ScaledSetting:
    return ScaledSetting(setting.name, given, setting.applied, setting.note)


def as_v2(hpa: Mapping[str, Any]) -> dict[str, Any]:
    """``hpa`` as ``autoscaling/v2`` (a copy): v1's CPU target becomes a Resource metric."""
    out = copy.deepcopy(dict(hpa))
    api_version = out.get("apiVersion")
    if api_version == "autoscaling/v1":
        spec = out.setdefault("spec", {})
        target = spec.pop("targetCPUUtilizationPercentage", None)
        if target is not None:
            utilization = {"type": "Utilization", "averageUtilization": target}
            spec["metrics"] = [{"type": "Resource", "resource": {"name": "cpu", "target": utilization}}]
    elif api_version not in ("autoscaling/v2", "autoscaling/v2beta2"):
        raise RewriteError(f"HorizontalPodAutoscaler of apiVersion {api_version!r} is not supported")
    out["apiVersion"] = HPA_API_VERSION
    return out


def scale_hpa(hpa: Mapping[str, Any], speed: float) -> tuple[dict[str, Any], list[ScaledSetting]]:
    """A copy of ``hpa`` (autoscaling/v2) whose behavior windows and policy periods are divided by
    ``speed``, defaults written out; and each setting as given and applied."""
    out = as_v2(hpa)
    meta = out.get("metadata") or {}
    name = f"HPA {meta.get('namespace', '')}/{meta.get('name', '?')}: spec.behavior."
    behavior = out.setdefault("spec", {}).setdefault("behavior", {})
    settings: list[ScaledSetting] = []
    for direction in ("scaleUp", "scaleDown"):
        defaults = _default_rules(direction)
        given_rules = behavior.get(direction)
        rules = defaults if given_rules is None else {**defaults, **given_rules}
        where = f"{name}{direction}."
        window = rules.get("stabilizationWindowSeconds")
        window_default = given_rules is None or "stabilizationWindowSeconds" not in given_rules
        setting = _scale_seconds(
            window, speed, where + "stabilizationWindowSeconds", minimum=1, maximum=WINDOW_MAX_S
        )
        if window_default:
            origin = (
                "controller's --horizontal-pod-autoscaler-downscale-stabilization default"
                if direction == "scaleDown"
                else "default"
            )
            setting = _given_as(setting, f"{setting.given} ({origin})")
        rules["stabilizationWindowSeconds"] = int(setting.applied[:-1])
        settings.append(setting)
        policies = []
        for index, given_policy in enumerate(rules.get("policies") or []):
            policy = dict(given_policy)
            setting = _scale_seconds(
                policy.get("periodSeconds"),
                speed,
                f"{where}policies[{index}].periodSeconds",
                minimum=1,
                maximum=PERIOD_MAX_S,
            )
            if given_rules is None or "policies" not in given_rules:
                setting = _given_as(setting, f"{setting.given} (default)")
            policy["periodSeconds"] = int(setting.applied[:-1])
            policies.append(policy)
            settings.append(setting)
        rules["policies"] = policies
        behavior[direction] = rules
    return out, settings


@dataclass(frozen=True, slots=True)
class HpaProcessTimers:
    """The HPA's process-wide timers, in seconds, with Kubernetes' and metrics-server's defaults."""

    sync_period_s: float = 15.0
    downscale_stabilization_s: float = float(DEFAULT_DOWNSCALE_STABILIZATION_S)
    cpu_initialization_period_s: float = 300.0
    initial_readiness_delay_s: float = 30.0
    metric_resolution_s: float = 15.0


METRIC_RESOLUTION_FLOOR_S = 1.0
"""The lowest ``--metric-resolution`` the local stack's metrics-server accepts: its build lowers
upstream's 10 s floor to 1 s (``pipeline.stack.go_module.METRICS_SERVER_RESOLUTION_FLOOR_S``, the one
patch), so a replay scrapes at exactly 15/S s up to x15. Upstream's binary would refuse under 10 s."""
KUBELET_REQUEST_TIMEOUT_S = 10.0
"""metrics-server's ``--kubelet-request-timeout`` default. It refuses a resolution whose 90 % is under
this timeout (kept in the patched build), so a resolution under 11.1 s brings the timeout down too."""

KUBE_CONTROLLER_MANAGER = "kube-controller-manager"
METRICS_SERVER = "metrics-server"


@dataclass(frozen=True, slots=True)
class ProcessFlag:
    """One HPA timer as a process flag: ``component --flag``, from ``HpaProcessTimers.<timer>``."""

    component: str
    flag: str
    timer: str

    @property
    def label(self) -> str:
        return f"{self.component} --{self.flag}"


_HPA = "horizontal-pod-autoscaler-"
PROCESS_FLAGS = (
    ProcessFlag(KUBE_CONTROLLER_MANAGER, _HPA + "sync-period", "sync_period_s"),
    ProcessFlag(KUBE_CONTROLLER_MANAGER, _HPA + "downscale-stabilization", "downscale_stabilization_s"),
    ProcessFlag(KUBE_CONTROLLER_MANAGER, _HPA + "cpu-initialization-period", "cpu_initialization_period_s"),
    ProcessFlag(KUBE_CONTROLLER_MANAGER, _HPA + "initial-readiness-delay", "initial_readiness_delay_s"),
    ProcessFlag(METRICS_SERVER, "metric-resolution", "metric_resolution_s"),
)
KUBELET_REQUEST_TIMEOUT_FLAG = ProcessFlag(METRICS_SERVER, "kubelet-request-timeout", "")
"""Not a timer of the HPA: set with the resolution so that metrics-server accepts it."""

NOT_SCALABLE = (
    ScaledSetting(
        f"{KUBE_CONTROLLER_MANAGER} --{_HPA}tolerance",
        "0.1 (default)",
        "0.1",
        "not scaled: a ratio of the metric to its target, not a time",
    ),
    ScaledSetting(
        "the machine's own pace: an API write, a scheduling, KWOK starting a pod, a scrape's answer",
        "wall time",
        "wall time",
        "not scaled: it takes the time it takes, so at speed S it is S times as long in trace time "
        "(tens of ms on an idle machine, a second or more under load)",
    ),
)
"""HPA settings that the speed does not reach; named in every report of a replay with the HPA."""


def go_duration(seconds: float) -> str:
    """``seconds`` as a flag value Go's ``time.ParseDuration`` reads, to the millisecond (at least
    1 ms unless 0: a zero period would mean something else to the controller)."""
    if seconds > 0:
        seconds = max(seconds, 0.001)
    return format_duration(seconds)


def kubelet_request_timeout_s(metric_resolution_s: float) -> float:
    """metrics-server's scrape timeout for ``metric_resolution_s``: its default, lowered to 90 % of the
    resolution when that is less (metrics-server refuses a resolution otherwise)."""
    return min(KUBELET_REQUEST_TIMEOUT_S, metric_resolution_s * 9 / 10)


def process_flags(timers: HpaProcessTimers) -> dict[str, dict[str, str]]:
    """The flags that run the HPA's processes with ``timers``: component → flag name → value."""
    flags: dict[str, dict[str, str]] = {}
    for flag in PROCESS_FLAGS:
        flags.setdefault(flag.component, {})[flag.flag] = go_duration(getattr(timers, flag.timer))
    timeout = KUBELET_REQUEST_TIMEOUT_FLAG
    flags[timeout.component][timeout.flag] = go_duration(
        kubelet_request_timeout_s(timers.metric_resolution_s)
    )
    return flags


def scale_hpa_process_timers(
    speed: float, given: HpaProcessTimers | None = None
) -> tuple[HpaProcessTimers, list[ScaledSetting]]:
    """The process timers divided by ``speed``, metrics-server's resolution no lower than its floor;
    and each flag as given and as applied (the flag's value), what cannot be scaled named."""
    given = given or HpaProcessTimers()
    values = {flag.timer: getattr(given, flag.timer) / speed for flag in PROCESS_FLAGS}
    values["metric_resolution_s"] = max(values["metric_resolution_s"], METRIC_RESOLUTION_FLOOR_S)
    scaled = HpaProcessTimers(**values)
    applied_flags = process_flags(scaled)
    settings = []
    for flag in PROCESS_FLAGS:
        ideal = getattr(given, flag.timer) / speed
        applied = applied_flags[flag.component][flag.flag]
        note = ""
        if getattr(scaled, flag.timer) > ideal + 1e-9:
            note = (
                f"ideal {ideal:g}s; the stack's metrics-server refuses less than "
                f"{METRIC_RESOLUTION_FLOOR_S:g}s"
            )
        elif abs(parse_go_duration(applied, flag.label) - ideal) > 1e-9:
            note = f"ideal {ideal:g}s; flags are set to the millisecond"
        settings.append(ScaledSetting(flag.label, go_duration(getattr(given, flag.timer)), applied, note))
    timeout = KUBELET_REQUEST_TIMEOUT_FLAG
    given_timeout = go_duration(kubelet_request_timeout_s(given.metric_resolution_s))
    applied_timeout = applied_flags[timeout.component][timeout.flag]
    settings.append(
        ScaledSetting(
            timeout.label,
            given_timeout,
            applied_timeout,
            ""
            if applied_timeout == given_timeout
            else "not a timer of the HPA: lowered with the resolution, metrics-server refuses a "
            "resolution whose 90 % is under it",
        )
    )
    return scaled, [*settings, *NOT_SCALABLE]


def applied_process_timers(settings: Sequence[ScaledSetting]) -> HpaProcessTimers:
    """The timers the processes run with, from the settings a
    :class:`~pipeline.replay.ports.PodAutoscalerProcess` returned: each flag's applied value, the
    default where it was not applied ("as deployed", "not running")."""
    defaults = HpaProcessTimers()
    applied = {s.name: s.applied for s in settings}
    values = {}
    for flag in PROCESS_FLAGS:
        try:
            values[flag.timer] = parse_go_duration(applied.get(flag.label, ""), flag.label)
        except ConfigError:
            values[flag.timer] = getattr(defaults, flag.timer)
    return HpaProcessTimers(**values)


def unscaled_hpa_process_timers(reason: str) -> list[ScaledSetting]:
    """The process timers of a cluster whose controller-manager and metrics-server the replay does not
    restart: as deployed (Kubernetes' defaults unless the cluster sets them)."""
    given = HpaProcessTimers()
    unscaled = [
        ScaledSetting(
            flag.label, f"{go_duration(getattr(given, flag.timer))} (default)", "as deployed", reason
        )
        for flag in PROCESS_FLAGS
    ]
    return [*unscaled, *NOT_SCALABLE]
