"""What-ifs on the recorded HPAs: settings overridden before the simulated HPA gets them, and the sweep
axes that make them. Pure logic, no I/O.

``kubetape sweep --autoscaler hpa --hpa-target 50 --hpa-target 80`` replays the trace once per value:
each point's recorded HPAs are applied with that CPU target utilization. A value may name the owner it
is for (``--hpa-target web=50``, the scale target as ``apps/Deployment/NS/NAME``, ``NS/NAME`` or
``NAME``); without one it is for every autoscaled owner. Each (setting, owner) with values is one axis,
and the points are their cross product. Overrides apply to the HPA as recorded (behavior windows in
trace seconds): the replay divides the windows by its speed afterwards, like any recorded HPA's.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.keys import ObjectKey

WINDOW_MAX_S = 3600
"""The HPA API's bound on a stabilization window."""

SETTINGS = {
    # field of HpaOverride: (flag, low, high)
    "target_utilization": ("--hpa-target", 1, 100_000),
    "min_replicas": ("--hpa-min-replicas", 1, 1_000_000),
    "max_replicas": ("--hpa-max-replicas", 1, 1_000_000),
    "scale_up_window_s": ("--hpa-scale-up-window", 0, WINDOW_MAX_S),
    "scale_down_window_s": ("--hpa-scale-down-window", 0, WINDOW_MAX_S),
}
POD_AUTOSCALER_LABEL = "autoscaler_pods"
"""A run's label saying the simulated HPA decided (beside Karpenter's ``autoscaler`` label)."""
LABELS = {
    "target_utilization": "hpa_target",
    "min_replicas": "hpa_min",
    "max_replicas": "hpa_max",
    "scale_up_window_s": "hpa_up_window",
    "scale_down_window_s": "hpa_down_window",
}


@dataclass(frozen=True, slots=True)
class HpaOverride:
    """Settings given to the HPAs of ``owner`` (None: of every autoscaled owner); None keeps the
    recorded value."""

    owner: str | None = None
    target_utilization: int | None = None
    """Percent of the pods' CPU request (the HPA's CPU Resource metric)."""
    min_replicas: int | None = None
    max_replicas: int | None = None
    scale_up_window_s: int | None = None
    scale_down_window_s: int | None = None

    def matches(self, owner: ObjectKey) -> bool:
        return self.owner is None or owner_matches(self.owner, owner)


def owner_matches(selector: str, owner: ObjectKey) -> bool:
    """``selector`` names ``owner``: its key, ``NAMESPACE/NAME`` or ``NAME``."""
    key = str(owner)
    return key == selector or key.endswith("/" + selector)


@dataclass(frozen=True, slots=True)
class HpaAxisValue:
    """One value of one axis: ``setting`` (a field of :class:`HpaOverride`) for ``owner``."""

    setting: str
    owner: str | None
    value: int


def parse_axis_value(setting: str, text: str) -> HpaAxisValue:
    """``[OWNER=]VALUE`` of the flag of ``setting``; ConfigError naming the flag and what to give."""
    flag, low, high = SETTINGS[setting]
    owner, _, number = text.rpartition("=")
    try:
        value = int(number)
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: give [OWNER=]N, a whole number such as {flag} 70") from None
    if not low <= value <= high:
        raise ConfigError(f"{flag} {text!r}: {value} is out of range ({low} to {high})")
    if "=" in text and not owner:
        raise ConfigError(f"{flag} {text!r}: the owner before '=' is empty")
    return HpaAxisValue(setting, owner or None, value)


@dataclass(frozen=True, slots=True)
class HpaVariant:
    """One point of the HPA grid: its overrides and the values that make it (the run's labels)."""

    overrides: tuple[HpaOverride, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.labels.items() if k != POD_AUTOSCALER_LABEL)
        return f"HPA with {settings}" if settings else "HPAs as recorded"


def hpa_variants(values: Iterable[HpaAxisValue]) -> list[HpaVariant]:
    """The cross product of the axes (one per setting and owner) that ``values`` give; one variant with
    the HPAs as recorded when there are none."""
    axes: dict[tuple[str, str | None], list[int]] = {}
    for value in values:
        axis = axes.setdefault((value.setting, value.owner), [])
        if value.value not in axis:
            axis.append(value.value)
    variants = []
    for point in itertools.product(*axes.values()):
        overrides: dict[str | None, HpaOverride] = {}
        labels: dict[str, str] = {POD_AUTOSCALER_LABEL: "hpa"}
        for (setting, owner), number in zip(axes, point, strict=True):
            given: dict[str, Any] = {setting: number}  # a field of HpaOverride (SETTINGS)
            overrides[owner] = replace(overrides.get(owner, HpaOverride(owner)), **given)
            label = LABELS[setting] if owner is None else f"{LABELS[setting]}[{owner}]"
            labels[label] = str(number)
        # the overrides for every owner first: one naming an owner overrides them
        ordered = sorted(overrides.values(), key=lambda o: o.owner is not None)
        variants.append(HpaVariant(tuple(ordered), labels))
    return variants


def check_overrides_match(overrides: Sequence[HpaOverride], owners: Iterable[ObjectKey]) -> None:
    """ConfigError when an override names an owner that no recorded HPA scales (or several)."""
    autoscaled = sorted(owners)
    for override in overrides:
        if override.owner is None:
            continue
        matched = [o for o in autoscaled if owner_matches(override.owner, o)]
        if len(matched) != 1:
            known = ", ".join(map(str, autoscaled)) or "none: the trace holds no HPA"
            which = "no" if not matched else f"{len(matched)}"
            raise ConfigError(
                f"HPA override for {override.owner!r} names {which} autoscaled owner(s); name one of: {known}"
            )


def _cpu_utilization_target(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    for metric in spec.get("metrics") or []:
        resource = metric.get("resource") or {}
        target = resource.get("target") or {}
        is_cpu = metric.get("type") == "Resource" and resource.get("name") == "cpu"
        if is_cpu and "averageUtilization" in target:
            return target
    return None


def cpu_target_percent(hpa: Mapping[str, Any]) -> float | None:
    """The CPU target utilization of an ``autoscaling/v2`` HPA (None when it scales on something else)."""
    target = _cpu_utilization_target(hpa.get("spec") or {})
    value = None if target is None else target.get("averageUtilization")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def apply_overrides(
    hpa: Mapping[str, Any], owner: ObjectKey, overrides: Sequence[HpaOverride]
) -> dict[str, Any]:
    """A copy of ``hpa`` (``autoscaling/v2``), scale target ``owner``, with the overrides for it."""
    out = copy.deepcopy(dict(hpa))
    spec = out.setdefault("spec", {})
    meta = out.get("metadata") or {}
    where = f"HPA {meta.get('namespace', '')}/{meta.get('name', '?')}"
    for override in overrides:
        if not override.matches(owner):
            continue
        if override.target_utilization is not None:
            _set_cpu_target(spec, override.target_utilization, where)
        if override.min_replicas is not None:
            spec["minReplicas"] = override.min_replicas
        if override.max_replicas is not None:
            spec["maxReplicas"] = override.max_replicas
        for direction, window in (
            ("scaleUp", override.scale_up_window_s),
            ("scaleDown", override.scale_down_window_s),
        ):
            if window is not None:
                behavior = spec.setdefault("behavior", {})
                behavior.setdefault(direction, {})["stabilizationWindowSeconds"] = window
    low, high = spec.get("minReplicas", 1), spec.get("maxReplicas")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        raise ConfigError(f"{where}: the overrides give minReplicas {low} above maxReplicas {high}")
    return out


def _set_cpu_target(spec: dict[str, Any], percent: int, where: str) -> None:
    target = _cpu_utilization_target(spec)
    if target is None:
        raise ConfigError(
            f"{where}: --hpa-target sets a CPU target utilization, and this HPA has none (it scales on "
            "other metrics); name the owners whose HPAs have one (--hpa-target OWNER=N)"
        )
    target["averageUtilization"] = percent
