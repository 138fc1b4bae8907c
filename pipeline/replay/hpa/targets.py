"""Which owners the simulated HPA decides for, and the recorded replicas it decides instead of.

An HPA writes its decision into its scale target's ``spec.replicas``. A recording therefore holds
changes of the target that are only production's HPA at work; replayed, they would overrule the
simulated HPA. So for every target of a recorded HPA:

* a recorded change of only ``spec.replicas`` is not replayed (counted in the report);
* the first write creates the target with its recorded replicas (where the recording starts);
* any later write (a new image, say) keeps the replicas the simulation has then
  (:class:`~pipeline.replay.hpa.writes.HpaWrites` reads them), so the write changes what it changed
  and not the HPA's decision.

Pure logic, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.model.errors import FormatError, KubetapeError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey, key_of, object_key
from pipeline.replay.autoscale.settings import ScaledSetting
from pipeline.replay.clock.schedule import ScheduledStep
from pipeline.replay.hpa.timing import HPA_KIND, scale_hpa


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


def _without_replicas(obj: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != "replicas"}
    meta = obj.get("metadata") or {}
    return spec, meta.get("labels"), meta.get("annotations")


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

    @property
    def owners(self) -> tuple[ObjectKey, ...]:
        return tuple(sorted(self.targets))


def plan_hpas(steps: list[ScheduledStep[Event]], speed: float) -> tuple[list[ScheduledStep[Event]], HpaPlan]:
    """The steps without the recorded HPAs' replica writes, and the HPAs' plan (see the module doc)."""
    events = [s.payload for s in steps]
    targets = hpa_targets(events)
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
    return kept, HpaPlan(targets, tuple(settings), dropped)
