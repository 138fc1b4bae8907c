"""Which owners the simulated HPA decides for, and the recorded replicas it decides instead of.

An HPA writes its decision into its scale target's ``spec.replicas``. A recording therefore holds
changes of the target that are only production's HPA at work; replayed, they would overrule the
simulated HPA. So for every target of a recorded HPA:

* a recorded change of only ``spec.replicas`` is not replayed (counted in the report);
* the first write creates the target with its recorded replicas (where the recording starts);
* any later write (a new image, say) keeps the replicas the simulation has then
  (:class:`~pipeline.replay.hpa.writes.HpaWrites` reads them), so the write changes what it changed
  and not the HPA's decision.

A what-if's overrides (:mod:`pipeline.replay.hpa.overrides`) are applied to the recorded HPAs here,
so the simulated HPA, the report's settings and the pressure measure all see the same HPA.

Pure logic, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.model.errors import FormatError, KubetapeError, RewriteError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey, key_of, object_key
from pipeline.replay.autoscale.settings import ScaledSetting
from pipeline.replay.clock.schedule import ScheduledStep
from pipeline.replay.hpa.overrides import (
    HpaOverride,
    apply_overrides,
    check_overrides_match,
    cpu_target_percent,
)
from pipeline.replay.hpa.timing import HPA_KIND, as_v2, scale_hpa


def is_hpa(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == HPA_KIND and str(obj.get("apiVersion", "")).startswith("autoscaling/")


def scale_target(hpa: Mapping[str, Any]) -> ObjectKey | None:
    """The object key of ``hpa``'s scale target (None when the HPA names none)."""
    ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
    namespace = (hpa.get("metadata") or {}).get("namespace")
    api_version, kind, name = (str(ref.get(f, "")) for f in ("apiVersion", "kind", "name"))
    try:
        return object_key(api_version, kind, namespace, name)
    except FormatError:
        return None


def hpa_targets(events: Iterable[Event]) -> dict[ObjectKey, ObjectKey]:
    """Scale target → HPA, for every HPA the events apply (its latest target)."""
    targets: dict[ObjectKey, ObjectKey] = {}
    for event in events:
        if event.type is EventType.APPLIED and event.obj is not None and is_hpa(event.obj):
            target = scale_target(event.obj)
            if target is not None:
                targets = {t: h for t, h in targets.items() if h != event.key}
                targets[target] = event.key
    return targets


RECORDER_ANNOTATIONS = "kubetape.dev/"
"""The prefix of the annotations the recorder itself adds (when an event's time came from the object's
own evidence, say): they differ between versions the cluster wrote alike, so a write compares without
them."""


def _without_replicas(obj: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != "replicas"}
    meta = obj.get("metadata") or {}
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(RECORDER_ANNOTATIONS)
    }
    return spec, meta.get("labels"), annotations


def without_replica_changes(
    steps: list[ScheduledStep[Event]], targets: Iterable[ObjectKey]
) -> tuple[list[ScheduledStep[Event]], dict[ObjectKey, int]]:
    """``steps`` without the applies of a target that change nothing but ``spec.replicas`` (and
    server-managed fields), and how many were left out per target."""
    wanted = set(targets)
    previous: dict[ObjectKey, Mapping[str, Any]] = {}
    kept: list[ScheduledStep[Event]] = []
    dropped: dict[ObjectKey, int] = {}
    for step in steps:
        event = step.payload
        if event.key in wanted and event.obj is not None:
            if event.type is EventType.APPLIED:
                before = previous.get(event.key)
                previous[event.key] = event.obj
                if before is not None and _without_replicas(before) == _without_replicas(event.obj):
                    dropped[event.key] = dropped.get(event.key, 0) + 1
                    continue
            else:
                previous.pop(event.key, None)
        kept.append(step)
    return kept, dropped


@dataclass(frozen=True, slots=True)
class HpaPlan:
    """The HPAs of one trace, as the replay applies them: targets, scaled settings, left-out writes."""

    targets: Mapping[ObjectKey, ObjectKey]
    """Scale target (the autoscaled owner) → its HPA."""
    settings: tuple[ScaledSetting, ...] = ()
    """Every HPA's behavior settings, as recorded and as applied (the latest version of each HPA)."""
    replica_writes_left_out: Mapping[ObjectKey, int] = field(default_factory=dict)
    cpu_targets: Mapping[ObjectKey, float | None] = field(default_factory=dict)
    """Per owner, its HPA's CPU target utilization in percent as applied (the latest version of the
    HPA, overrides included; None: it scales on other metrics)."""
    overrides: tuple[HpaOverride, ...] = ()

    @property
    def owners(self) -> tuple[ObjectKey, ...]:
        return tuple(sorted(self.targets))


def with_overrides(
    steps: list[ScheduledStep[Event]], overrides: Sequence[HpaOverride]
) -> list[ScheduledStep[Event]]:
    """``steps`` whose HPA applies carry the overrides for their scale target (as ``autoscaling/v2``)."""
    if not overrides:
        return steps
    out = []
    for step in steps:
        event = step.payload
        if event.type is EventType.APPLIED and event.obj is not None and is_hpa(event.obj):
            target = scale_target(event.obj)
            try:
                v2 = as_v2(event.obj)
            except RewriteError:  # a version the replay cannot apply: its apply fails and is reported
                v2 = None
            if target is not None and v2 is not None:
                obj = apply_overrides(v2, target, overrides)
                out.append(dataclasses.replace(step, payload=dataclasses.replace(event, obj=obj)))
                continue
        out.append(step)
    return out


def plan_hpas(
    steps: list[ScheduledStep[Event]], speed: float, overrides: Sequence[HpaOverride] = ()
) -> tuple[list[ScheduledStep[Event]], HpaPlan]:
    """The steps without the recorded HPAs' replica writes and with ``overrides`` applied to the HPAs,
    and the HPAs' plan (see the module doc). ConfigError when an override names no autoscaled owner."""
    targets = hpa_targets(s.payload for s in steps)
    check_overrides_match(overrides, targets)
    steps = with_overrides(steps, overrides)
    events = [s.payload for s in steps]
    kept, dropped = without_replica_changes(steps, targets)
    latest: dict[ObjectKey, Mapping[str, Any]] = {}
    for event in events:
        if event.type is EventType.APPLIED and event.obj is not None and is_hpa(event.obj):
            with_key = event.obj
            try:
                latest[key_of(with_key)] = with_key
            except FormatError:
                continue
    settings: list[ScaledSetting] = []
    for key in sorted(latest):
        try:
            settings += scale_hpa(latest[key], speed)[1]
        except KubetapeError as exc:  # its apply fails too, and is reported as a failure
            settings.append(ScaledSetting(f"HPA {key}", "unreadable", "not applied", str(exc)))
    cpu_targets = {}
    for owner, hpa_key in targets.items():
        hpa = latest.get(hpa_key)
        try:
            cpu_targets[owner] = None if hpa is None else cpu_target_percent(as_v2(hpa))
        except KubetapeError:
            cpu_targets[owner] = None
    return kept, HpaPlan(targets, tuple(settings), dropped, cpu_targets, tuple(overrides))
