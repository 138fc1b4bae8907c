"""The state of one partition's objects as events leave it, and the duplicate rule built on it.

Kafka delivers at least once and the watcher re-publishes objects it re-lists, so the same change can
arrive twice. A change is a duplicate when it would not change the state: the same object at the same
resourceVersion, the same delete of an object already gone, the same pod lifecycle, the same gap. The
sink and export fold events through the same :class:`ObjectState`, so what the sink keeps and what an
export reconstructs from a keyframe plus later events are the same by construction.

The sink folds :class:`~pipeline.formats.wire.probe.EventHead` values (events whose object body is still
wire bytes), export and restore fold decoded :class:`Event` values: the rules read only the fields both
have (the body only when an object has no resourceVersion to compare).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.formats.segment.content import Keyframe
from pipeline.formats.wire.probe import EventHead
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey

AnyEvent = Event | EventHead
"""An event decoded or not: the state treats both alike."""


@dataclass(slots=True)
class ObjectState:
    """Live objects, latest pod lifecycles, and the last delete and gap of each key (for dedupe)."""

    objects: dict[ObjectKey, AnyEvent] = field(default_factory=dict)
    lifecycles: dict[ObjectKey, AnyEvent] = field(default_factory=dict)
    tombstones: dict[ObjectKey, AnyEvent] = field(default_factory=dict)
    gaps: dict[ObjectKey, AnyEvent] = field(default_factory=dict)

    @classmethod
    def from_keyframe(cls, keyframe: Keyframe) -> ObjectState:
        return cls(dict(keyframe.objects), dict(keyframe.lifecycles), dict(keyframe.tombstones))

    def keyframe(self, at_ms: int) -> Keyframe:
        """A keyframe of the current state, keys sorted so equal states give equal bytes."""
        return Keyframe(
            at_ms,
            {k: _decoded(self.objects[k]) for k in sorted(self.objects)},
            {k: _decoded(self.lifecycles[k]) for k in sorted(self.lifecycles)},
        )

    def keyframe_heads(self) -> tuple[list[EventHead], list[EventHead], list[EventHead]]:
        """The keyframe's objects, lifecycles and tombstones as heads (wire bytes), sorted by key like
        :meth:`keyframe`: what the sink writes without decoding anything. Tombstones keep their
        deleted object as recorded: reducing each to a stub cost more CPU than the whole ingest of a
        Job-churn workload, for bytes the horizon already bounds."""
        return _sorted_heads(self.objects), _sorted_heads(self.lifecycles), _sorted_heads(self.tombstones)

    def is_duplicate(self, e: AnyEvent) -> bool:
        """Whether ``e`` would leave the state unchanged (a redelivery or a re-list of a known version)."""
        if e.type in (EventType.APPLIED, EventType.DELETED):
            live = self.objects.get(e.key)
            gone = self.tombstones.get(e.key)
            if e.type is EventType.APPLIED:
                if live is not None:
                    return _same_version(live, e) or _older(e, live)
                return gone is not None and _older(e, gone)
            if live is not None:
                return _older(e, live)
            return gone is not None and (_same_version(gone, e) or _older(e, gone))
        if e.type is EventType.POD_LIFECYCLE:
            prev = self.lifecycles.get(e.key)
            if prev is None or (prev.owner_key, prev.pod_spec_hash, prev.pod_start_ms, prev.uid) != (
                e.owner_key,
                e.pod_spec_hash,
                e.pod_start_ms,
                e.uid,
            ):
                return False
            # A re-published "still running" lifecycle does not undo a known end.
            return e.pod_end_ms == prev.pod_end_ms or e.pod_end_ms is None
        prev = self.gaps.get(e.key)
        return prev is not None and (prev.ts_ms, prev.gap_from_rv, prev.gap_to_rv, prev.gap_reason) == (
            e.ts_ms,
            e.gap_from_rv,
            e.gap_to_rv,
            e.gap_reason,
        )

    def apply(self, e: AnyEvent) -> None:
        """Fold ``e`` into the state."""
        if e.type is EventType.APPLIED:
            self.objects[e.key] = e
            self.tombstones.pop(e.key, None)
        elif e.type is EventType.DELETED:
            self.objects.pop(e.key, None)
            self.tombstones[e.key] = e
        elif e.type is EventType.POD_LIFECYCLE:
            self.lifecycles[e.key] = e
        else:
            self.gaps[e.key] = e

    def settle(self, before_ms: int, horizon_ms: int) -> None:
        """Forget history once a segment is closed (durable for the sink; read back for a restore), so
        the state's size (and every keyframe's) follows the live cluster, not its history. Every event
        folded so far is before ``before_ms``, so every later keyframe time and window start is at or
        after it. What leaves:

        * a tombstone (and a gap marker) older than ``horizon_ms`` of event time before ``before_ms``:
          a delete is remembered only to refuse a stale re-publish of the deleted object (an apply
          of an older version, the same delete again), which comes within seconds, not hours;
        * a pod's lifecycle that ended before ``before_ms``, recorded more than ``horizon_ms`` before
          it, while its pod object is not live: it cannot overlap a later window, and no live pod
          needs it to be left out of one.

        Live objects and running (or recently ended) lifecycles stay. The sink and a restore settle at
        the same segment boundaries, so a restored state equals the one the sink had (keyframes carry
        the tombstones still remembered). Exports never settle: they only read states."""
        forget_before = before_ms - horizon_ms
        for dicts in (self.tombstones, self.gaps):
            old = [k for k, e in dicts.items() if e.ts_ms < forget_before]
            for k in old:
                del dicts[k]
        lifecycles, objects = self.lifecycles, self.objects
        ended = [
            k
            for k, e in lifecycles.items()
            if e.pod_end_ms is not None
            and e.pod_end_ms < before_ms
            and e.ts_ms < forget_before
            and k not in objects
        ]
        for k in ended:
            del lifecycles[k]

    def offer(self, e: AnyEvent) -> bool:
        """Apply ``e`` unless it is a duplicate; returns whether it was new."""
        if self.is_duplicate(e):
            return False
        self.apply(e)
        return True


def _rv(e: AnyEvent) -> int | None:
    return int(e.resource_version) if e.resource_version.isdigit() else None


def _older(e: AnyEvent, than: AnyEvent) -> bool:
    """``e`` is an older version of the same object than ``than`` (a late re-delivery).

    resourceVersions are opaque to clients, but every apiserver backed by etcd issues increasing
    integers; when either is not an integer nothing is assumed."""
    if e.uid != than.uid:
        return False
    new, known = _rv(e), _rv(than)
    return new is not None and known is not None and new < known


def _same_version(prev: AnyEvent, e: AnyEvent) -> bool:
    # The resourceVersion identifies a version of an object; without one (synthetic or stub objects),
    # fall back to comparing the content.
    if prev.uid != e.uid:
        return False
    if e.resource_version:
        return prev.resource_version == e.resource_version
    return prev.spec_hash == e.spec_hash and prev.obj == e.obj


def _sorted_heads(events: dict[ObjectKey, AnyEvent]) -> list[EventHead]:
    # A state fed by the sink holds heads only (checked in C, not per item in Python); one restored
    # from a keyframe holds events. Sorting the keys alone uses CPython's fast path for str.
    ordered = list(map(events.__getitem__, sorted(events)))
    if set(map(type, ordered)) <= {EventHead}:
        return ordered  # type: ignore[return-value]  # every item is an EventHead, checked just above
    return [_head(e) for e in ordered]


def _decoded(e: AnyEvent) -> Event:
    return e.to_event() if isinstance(e, EventHead) else e


def _head(e: AnyEvent) -> EventHead:
    return e if isinstance(e, EventHead) else EventHead.of(e)
