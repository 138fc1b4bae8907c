"""Time scaling of an autoscaler's settings: at speed S every timer of Karpenter runs S times faster.

A replay at ×10 compresses ten minutes of the recording into one; an autoscaler that waited its
recorded 30 s before consolidating would then act after five trace minutes. So each time setting of a
NodePool (``consolidateAfter``, ``expireAfter``, ``terminationGracePeriod``, the durations of
disruption budgets) and Karpenter's batch windows are divided by S.

What the API allows limits this: NodePool durations are whole seconds (``^([0-9]+(s|m|h))+$``) and
budget durations whole minutes, so the applied value is rounded and the report shows both the given
and the applied value. A budget's ``schedule`` is a cron expression in wall-clock time and cannot be
scaled; it is named in the report. Pure logic, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.timespec import parse_go_duration

NODEPOOL_API_VERSION = "karpenter.sh/v1"
NEVER = "Never"
DEFAULT_EXPIRE_AFTER = "720h"
"""Karpenter's default ``expireAfter`` (the CRD's), scaled too when a NodePool does not set it."""
DEFAULT_BATCH_IDLE_S = 1.0
DEFAULT_BATCH_MAX_S = 10.0


@dataclass(frozen=True, slots=True)
class ScaledSetting:
    """One time setting as the user gave it and as the simulated autoscaler got it."""

    name: str
    """Where it lives, e.g. ``NodePool general: spec.disruption.consolidateAfter``."""
    given: str
    applied: str
    note: str = ""
    """Why applied is not exactly given / speed (rounding, not scalable), empty otherwise."""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "given": self.given, "applied": self.applied, "note": self.note}


def _whole_seconds(seconds: float) -> str:
    return f"{round(seconds)}s"


def scale_duration(given: str, speed: float, where: str, *, unit_s: float = 1.0) -> ScaledSetting:
    """``given`` / ``speed``, rounded to whole ``unit_s`` (at least one unit unless ``given`` is 0)."""
    if given == NEVER:
        return ScaledSetting(where, given, given, "Never: nothing to scale")
    seconds = parse_go_duration(given, where)
    ideal = seconds / speed
    units = round(ideal / unit_s)
    if seconds > 0 and units < 1:
        units = 1
    applied_s = units * unit_s
    applied = f"{units}m" if unit_s == 60.0 else _whole_seconds(applied_s)
    note = ""
    if abs(applied_s - ideal) > 1e-6:
        grain = "minutes" if unit_s == 60.0 else "seconds"
        note = f"ideal {ideal:g}s; rounded to whole {grain}, which is all the NodePool API accepts"
    return ScaledSetting(where, given, applied, note)


def scale_nodepool(
    pool: Mapping[str, Any], speed: float, *, source: str
) -> tuple[dict[str, Any], list[ScaledSetting]]:
    """A copy of ``pool`` with its time settings divided by ``speed``, and what was done to each."""
    if pool.get("apiVersion") != NODEPOOL_API_VERSION or pool.get("kind") != "NodePool":
        raise ConfigError(
            f"{source}: expected a Karpenter NodePool (apiVersion: {NODEPOOL_API_VERSION}, kind: "
            f"NodePool), got {pool.get('apiVersion')!r} {pool.get('kind')!r}"
        )
    name = (pool.get("metadata") or {}).get("name")
    if not name:
        raise ConfigError(f"{source}: the NodePool has no metadata.name")
    scaled = copy.deepcopy(dict(pool))
    spec = scaled.setdefault("spec", {})
    template_spec = spec.setdefault("template", {}).setdefault("spec", {})
    disruption = spec.setdefault("disruption", {})
    prefix = f"NodePool {name}: spec."
    settings: list[ScaledSetting] = []

    given = str(disruption.get("consolidateAfter", "0s"))
    setting = scale_duration(given, speed, prefix + "disruption.consolidateAfter")
    disruption["consolidateAfter"] = setting.applied
    settings.append(setting)

    for field_name, default in (("expireAfter", DEFAULT_EXPIRE_AFTER), ("terminationGracePeriod", None)):
        value = template_spec.get(field_name, default)
        if value is None:
            continue
        where = f"{prefix}template.spec.{field_name}"
        setting = scale_duration(str(value), speed, where)
        if field_name not in template_spec:
            setting = ScaledSetting(setting.name, f"{value} (default)", setting.applied, setting.note)
        template_spec[field_name] = setting.applied
        settings.append(setting)

    for index, budget in enumerate(disruption.get("budgets") or []):
        where = f"{prefix}disruption.budgets[{index}]"
        if "duration" in budget:
            setting = scale_duration(str(budget["duration"]), speed, where + ".duration", unit_s=60.0)
            budget["duration"] = setting.applied
            settings.append(setting)
        if "schedule" in budget:
            settings.append(
                ScaledSetting(
                    where + ".schedule",
                    str(budget["schedule"]),
                    str(budget["schedule"]),
                    "not scaled: a cron schedule in wall-clock time",
                )
            )
    return scaled, settings


@dataclass(frozen=True, slots=True)
class KarpenterTimers:
    """Karpenter's process-wide timers, in seconds (flags, and two constants kubetape's build exposes)."""

    batch_idle_s: float = DEFAULT_BATCH_IDLE_S
    batch_max_s: float = DEFAULT_BATCH_MAX_S
    polling_period_s: float = 10.0
    validation_delay_s: float = 15.0


_TIMER_NAMES = {
    "batch_idle_s": "Karpenter --batch-idle-duration",
    "batch_max_s": "Karpenter --batch-max-duration",
    "polling_period_s": "Karpenter disruption polling period (kubetape build patch)",
    "validation_delay_s": "Karpenter consolidation command validation delay (kubetape build patch)",
}


NOT_SCALED = (
    ScaledSetting(
        "Karpenter node termination: minimum drain time, and requeue while the instance terminates",
        "5s, 5s",
        "5s, 5s",
        "not scaled: constants in pkg/controllers/node/termination, so a consolidated node takes a few "
        "wall seconds more to go than the scaled timers say",
    ),
)
"""Karpenter timers no flag, environment variable or patch reaches; named in every autoscaled report."""


def scale_karpenter_timers(
    speed: float, given: KarpenterTimers | None = None
) -> tuple[KarpenterTimers, list[ScaledSetting]]:
    """Karpenter's timers (Go durations in flags and the environment: any precision) divided by ``speed``."""
    given = given or KarpenterTimers()
    scaled = KarpenterTimers(*(getattr(given, name) / speed for name in _TIMER_NAMES))
    settings = [
        ScaledSetting(label, f"{getattr(given, name):g}s", f"{getattr(scaled, name):g}s")
        for name, label in _TIMER_NAMES.items()
    ]
    return scaled, [*settings, *NOT_SCALED]


def unscaled_karpenter_timers(reason: str) -> list[ScaledSetting]:
    """The timers of a Karpenter the replay does not run (another cluster's): not scaled."""
    unscaled = [ScaledSetting(label, "as deployed", "as deployed", reason) for label in _TIMER_NAMES.values()]
    return [*unscaled, *NOT_SCALED]
