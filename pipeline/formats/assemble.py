"""Assembling a time window into one trace, and converting traces to and from SimKube v2.

:func:`assemble_window` turns a keyframe (state at T ≤ A) plus the events after it into the trace of the
window ``[A, B)``, the way SimKube's export builds a trace (``collect_events``):

* every object alive at A is folded into the trace's first events, all at time A (sorted by key); pods
  whose recorded lifecycle finished by A are left out (they would run again);
* applied, deleted and gap events in ``[A, B)`` follow in event-time order;
* each pod's latest lifecycle that overlaps the window is kept once, clipped to it (a start before A
  moves to A, an end at or after B is not known yet), if its owner is part of the trace;
* objects owned (``ownerReferences``) by another object of the trace are dropped, so a replay does not
  create them twice (their owner does), unless that owner makes nothing in a simulated cluster (a custom
  resource without pod templates, a pod: see ``TracerConfig.recreates_dependents``).

The result is a :class:`~pipeline.formats.segment.content.Segment` of kind ``TRACE``.

:func:`trace_to_simkube` converts such a trace to SimKube's v2 model for export: times become whole
seconds, truncated as SimKube's tracer does; events in the same second share one SimKube event (a delete
followed by an apply starts a new one, since SimKube applies before it deletes); deleted objects become
SimKube's stubs; lifecycles are grouped by owner and pod-spec hash in launch order.
:func:`simkube_to_trace` goes the other way (SimKube does not record pod names, so lifecycle events get
synthetic pod keys ``<owner>-<hash>-<n>``).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterable
from typing import Any

from pipeline.formats.segment.content import Keyframe, Segment, build_segment
from pipeline.formats.segment.decode import EventWires
from pipeline.formats.segment.header import PartitionRange, SegmentKind
from pipeline.formats.simkube import SIMKUBE_TRACE_VERSION, SimkubeEvent, SimkubeLifecycle, SimkubeTrace
from pipeline.formats.usage_window import usage_window
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.events import Event, EventType, decoded_event
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import GroupVersionKind, ObjectKey, key_of, object_key, parse_object_key
from pipeline.model.lifecycle import PodLifecycle
from pipeline.model.sanitize import deletion_stub
from pipeline.model.tracer_config import TracerConfig
from pipeline.model.usage import UsageSample

_OBJECT_TYPES = (EventType.APPLIED, EventType.DELETED)


_ts = operator.attrgetter("ts_ms")
"""The sort key of events (a C call: sorting a window calls it once per event)."""


def _owner_keys(obj: dict[str, Any] | None) -> list[ObjectKey]:
    """Keys of the objects named in ``obj``'s ownerReferences (same namespace, as Kubernetes requires)."""
    if obj is None:
        return []
    meta = obj.get("metadata") or {}
    refs = meta.get("ownerReferences")
    if not refs:  # most objects of a window: no list to build
        return []
    keys = []
    for ref in refs:
        try:
            keys.append(object_key(ref["apiVersion"], ref["kind"], meta.get("namespace"), ref["name"]))
        except (KeyError, TypeError, FormatError):
            continue  # a malformed reference owns nothing we can find
    return keys


_fields_after_time = operator.attrgetter(*(f.name for f in dataclasses.fields(Event)[2:]))
"""An event's fields after ``type`` and ``ts_ms``, in declaration order, which is the order
:func:`decoded_event` takes them in; read from the class so that a new field cannot be left behind."""


def moved_to(e: Event, ts_ms: int) -> Event:
    """``dataclasses.replace(e, ts_ms=ts_ms)`` at less than half the cost: every object alive at a
    window's start is moved to it, and ``replace`` goes through keyword arguments and ``__init__``.
    :func:`decoded_event` validates the copy as the constructor does."""
    return decoded_event(e.type, ts_ms, *_fields_after_time(e))


def _lifecycle_of(e: Event) -> PodLifecycle:
    assert e.pod_start_ms is not None  # guaranteed by Event validation for POD_LIFECYCLE
    return PodLifecycle(e.pod_start_ms, e.pod_end_ms)


def fold_keyframe(keyframe: Keyframe | None, events: Iterable[Event], at_ms: int) -> Keyframe:
    """The keyframe at ``at_ms``: ``keyframe`` (or empty state) advanced by the events before ``at_ms``.

    Applied objects replace, deleted ones leave; each pod keeps its latest lifecycle unless it finished
    before ``at_ms`` and its pod object is gone. Events before the given
    keyframe's time are ignored, as it already holds them. Raises FormatError if ``at_ms`` is earlier
    than the given keyframe.
    """
    if keyframe is not None and at_ms < keyframe.at_ms:
        raise FormatError(f"cannot fold the keyframe at {keyframe.at_ms} back to {at_ms}")
    since = keyframe.at_ms if keyframe is not None else None
    objects: dict[ObjectKey, Event] = dict(keyframe.objects) if keyframe else {}
    lifecycles: dict[ObjectKey, Event] = dict(keyframe.lifecycles) if keyframe else {}
    for e in sorted(events, key=lambda ev: ev.ts_ms):
        if (since is not None and e.ts_ms < since) or e.ts_ms >= at_ms:
            continue
        if e.type is EventType.APPLIED:
            objects[e.key] = e
        elif e.type is EventType.DELETED:
            objects.pop(e.key, None)
        elif e.type is EventType.POD_LIFECYCLE:
            lifecycles[e.key] = e
    # a lifecycle over before at_ms cannot overlap a later window; it is kept only while its pod object
    # lives, because a tracked pod that finished must not be replayed again (see assemble_window)
    live = {
        k: e for k, e in lifecycles.items() if e.pod_end_ms is None or e.pod_end_ms >= at_ms or k in objects
    }
    return Keyframe(at_ms, objects, live)


def assemble_window(
    keyframe: Keyframe | None,
    events: Iterable[Event],
    start_ms: int,
    end_ms: int,
    *,
    config: TracerConfig | None = None,
    partitions: Iterable[PartitionRange] = (),
    suppress_owned: bool = True,
    usage: Iterable[UsageSample] = (),
    wires: EventWires | None = None,
) -> Segment:
    """The trace of ``[start_ms, end_ms)`` from the state at ``keyframe.at_ms`` and the events after it;
    with the recorded load of ``usage`` in the window and each owner's at its start
    (:func:`~pipeline.formats.usage_window.usage_window`). ``wires``: the stored bytes of the events
    (see :class:`~pipeline.formats.segment.decode.EventWires`); an event without its body is moved to
    the window start with them.

    ``events`` may come in any order (they are stably sorted by time); events before the keyframe time
    are ignored (the keyframe already holds them), events at or after ``end_ms`` too. Without a keyframe
    the state starts empty. Raises FormatError if the keyframe is after ``start_ms``.
    """
    if start_ms >= end_ms:
        raise FormatError(f"empty window: start {start_ms} is not before end {end_ms}")
    if keyframe is not None and keyframe.at_ms > start_ms:
        raise FormatError(f"keyframe at {keyframe.at_ms} is after the window start {start_ms}")
    kf_at = keyframe.at_ms if keyframe else None
    state: dict[ObjectKey, Event] = dict(keyframe.objects) if keyframe else {}
    lifecycles: dict[tuple[ObjectKey, str], Event] = (
        {(e.key, e.uid): e for e in keyframe.lifecycles.values()} if keyframe else {}
    )
    in_window: list[Event] = []
    for e in sorted(events, key=_ts):
        if (kf_at is not None and e.ts_ms < kf_at) or e.ts_ms >= end_ms:
            continue
        if e.type is EventType.POD_LIFECYCLE:
            lifecycles[(e.key, e.uid)] = e
        elif e.ts_ms >= start_ms:
            in_window.append(e)
        elif e.type is EventType.APPLIED:
            state[e.key] = e
        elif e.type is EventType.DELETED:
            state.pop(e.key, None)
    known = set(state) | {e.key for e in in_window if e.type in _OBJECT_TYPES}
    finished_uids: dict[ObjectKey, set[str]] = {}
    for (key, uid), lc_event in lifecycles.items():
        if lc_event.pod_end_ms is not None and lc_event.pod_end_ms <= start_ms:
            finished_uids.setdefault(key, set()).add(uid)

    def finished_pod(e: Event) -> bool:
        """A tracked pod whose lifecycle ended by the window start (uids tell incarnations apart)."""
        uids = finished_uids.get(e.key)
        if uids is None or not e.key.startswith("core/Pod/"):
            return False
        return not e.uid or e.uid in uids or "" in uids

    rules = config or TracerConfig.default()

    def recreated(owner: ObjectKey) -> bool:
        """Whether ``owner`` is in the trace and makes its dependents again on replay (a custom resource
        without pod templates does not: its recorded pods are all a simulation will have of it)."""
        if owner not in known:
            return False
        parsed = parse_object_key(owner)
        return rules.recreates_dependents(parsed.group, parsed.kind)

    # Pods whose lifecycles belong to another object of the trace: their owner (maybe through an
    # untracked ReplicaSet, which ownerReferences alone do not reveal) recreates them on replay.
    owned_through_chain = {
        key
        for (key, _uid), lc in lifecycles.items()
        if lc.owner_key is not None and lc.owner_key != key and recreated(lc.owner_key)
    }

    def kept(e: Event) -> bool:
        if not suppress_owned or e.type not in _OBJECT_TYPES:
            return True
        if e.key in owned_through_chain:
            return False
        return not any(recreated(owner) for owner in _owner_keys(e.obj))

    move = moved_to if wires is None else _mover(wires)
    initial = [
        move(state[key], start_ms)
        for key in sorted(state)
        if kept(state[key]) and not finished_pod(state[key])
    ]
    return build_segment(
        [
            *initial,
            *[e for e in in_window if kept(e)],
            *_clipped_lifecycles(lifecycles, known, start_ms, end_ms),
        ],
        start_ms=start_ms,
        end_ms=end_ms,
        partitions=partitions,
        config=config,
        kind=SegmentKind.TRACE,
        usage=usage_window(usage, start_ms, end_ms),
    )


def _mover(wires: EventWires) -> Callable[[Event, int], Event]:
    """:func:`moved_to` for events that hold their body, :meth:`EventWires.moved` for the others."""

    def move(e: Event, ts_ms: int) -> Event:
        return wires.moved(e, ts_ms) or moved_to(e, ts_ms)

    return move


def _clipped_lifecycles(
    lifecycles: dict[tuple[ObjectKey, str], Event], known: set[ObjectKey], start_ms: int, end_ms: int
) -> list[Event]:
    """The lifecycles that overlap ``[start_ms, end_ms)`` and whose owner is in the trace, clipped to
    the window, by time then pod key."""
    clipped = []
    for lc_event in lifecycles.values():
        lc = _lifecycle_of(lc_event)
        assert lc_event.owner_key is not None
        if lc.overlaps(start_ms, end_ms) and lc_event.owner_key in known:
            window_lc = lc.clipped(start_ms, end_ms)
            ts_ms = max(lc_event.ts_ms, start_ms)
            if (ts_ms, window_lc.start_ms, window_lc.end_ms) == (
                lc_event.ts_ms,
                lc_event.pod_start_ms,
                lc_event.pod_end_ms,
            ):
                clipped.append(lc_event)  # inside the window as it is (most are): no copy to make
                continue
            clipped.append(
                dataclasses.replace(
                    lc_event, ts_ms=ts_ms, pod_start_ms=window_lc.start_ms, pod_end_ms=window_lc.end_ms
                )
            )
    clipped.sort(key=_time_then_key)
    return clipped


_time_then_key = operator.attrgetter("ts_ms", "key")


# ---- to SimKube ----------------------------------------------------------------------------------
def to_seconds(ts_ms: int) -> int:
    """Whole Unix seconds of a millisecond time, truncated as SimKube's tracer clock does."""
    return ts_ms // 1000


class _GvkCache:
    """SimKube's GVK strings by ``(apiVersion, kind)``: a window holds few kinds, and building the
    string for each of its events was a third of a conversion's time."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], str] = {}

    def of(self, api_version: str, kind: str) -> str:
        gvk = self._known.get((api_version, kind))
        if gvk is None:
            gvk = GroupVersionKind.from_api_version(api_version, kind).format()
            self._known[(api_version, kind)] = gvk
        return gvk


def _namespaced_name(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def trace_to_simkube(
    trace: Segment, config: TracerConfig | None = None, *, keep_status: bool = False
) -> SimkubeTrace:
    """SimKube v2 form of an assembled trace (see the module docstring). ``config`` defaults to the
    trace's own, else an empty one. Objects lose their ``status``, as in SimKube's own traces (its
    validator flags a status with W0000), unless ``keep_status`` (validation looks at the trace as is)."""
    config = config or trace.config or TracerConfig()
    gvks = _GvkCache()
    events = _simkube_events(trace.events, to_seconds(trace.header.start_ms), keep_status=keep_status)
    index, api_versions = _simkube_index(trace.events, gvks)
    lifecycles = _simkube_lifecycles(trace.events, api_versions, gvks)
    return SimkubeTrace(SIMKUBE_TRACE_VERSION, config.to_simkube_mapping(), events, index, lifecycles)


def _simkube_events(events: Iterable[Event], start_s: int, *, keep_status: bool) -> list[SimkubeEvent]:
    """Objects applied and deleted, grouped by second (see the module docstring)."""
    out = [SimkubeEvent(start_s)]
    current = out[0]
    for e in events:
        if e.type not in _OBJECT_TYPES:
            continue
        obj = e.obj
        assert obj is not None  # APPLIED and DELETED events always carry an object
        ts = to_seconds(e.ts_ms)
        if e.type is EventType.APPLIED:
            if current.ts != ts or current.deleted_objs:
                current = SimkubeEvent(ts)
                out.append(current)
            # SimKube traces carry no status (its validator flags one with W0000, and the replay drops
            # it anyway); kubetape's own format keeps it, for analytics and desired-pod truth
            if "status" in obj and not keep_status:
                obj = {k: v for k, v in obj.items() if k != "status"}
            current.applied_objs.append(obj)
        else:
            if current.ts != ts:
                current = SimkubeEvent(ts)
                out.append(current)
            current.deleted_objs.append(deletion_stub(obj))
    return out


def _simkube_index(
    events: Iterable[Event], gvks: _GvkCache
) -> tuple[dict[str, dict[str, int]], dict[ObjectKey, str]]:
    """SimKube's index (GVK → namespace/name → spec hash, the last one wins) and each object's
    apiVersion (lifecycle owners are named by it)."""
    index: dict[str, dict[str, int]] = {}
    api_versions: dict[ObjectKey, str] = {}
    last_hash: dict[ObjectKey, int] = {}
    for e in events:
        if e.type not in _OBJECT_TYPES:
            continue
        obj = e.obj
        assert obj is not None  # APPLIED and DELETED events always carry an object
        # a delete without a hash deletes the object last applied (the hash is slow pure Python)
        spec_hash = e.spec_hash or last_hash.get(e.key) or object_spec_hash(obj)
        last_hash[e.key] = spec_hash
        api_version = str(obj["apiVersion"])
        gvk = gvks.of(api_version, str(obj["kind"]))
        index.setdefault(gvk, {})[_namespaced_name(obj)] = spec_hash
        api_versions[e.key] = api_version
    return index, api_versions


def _simkube_lifecycles(
    events: Iterable[Event], api_versions: dict[ObjectKey, str], gvks: _GvkCache
) -> dict[tuple[str, str], dict[int, list[SimkubeLifecycle]]]:
    grouped: dict[tuple[str, str], dict[int, list[Event]]] = {}
    owners: dict[ObjectKey, tuple[str, str]] = {}  # an owner has many pods: parse its key once
    for e in events:
        if e.type is not EventType.POD_LIFECYCLE or e.owner_key not in api_versions:
            continue  # SimKube keeps lifecycles only for owners that are in the trace
        owner_id = owners.get(e.owner_key)
        if owner_id is None:
            owner = parse_object_key(e.owner_key)
            owner_id = owners[e.owner_key] = (
                gvks.of(api_versions[e.owner_key], owner.kind),
                owner.namespaced_name,
            )
        grouped.setdefault(owner_id, {}).setdefault(e.pod_spec_hash, []).append(e)
    out: dict[tuple[str, str], dict[int, list[SimkubeLifecycle]]] = {}
    for owner_id, by_hash in grouped.items():
        out[owner_id] = {}
        for pod_hash, lcs in by_hash.items():
            lcs.sort(key=_launch_order)
            out[owner_id][pod_hash] = [_simkube_lifecycle(e) for e in lcs]
    return out


def _simkube_lifecycle(e: Event) -> SimkubeLifecycle:
    assert e.pod_start_ms is not None  # guaranteed by Event validation for POD_LIFECYCLE
    end = None if e.pod_end_ms is None else to_seconds(e.pod_end_ms)
    return SimkubeLifecycle(to_seconds(e.pod_start_ms), end)


_launch_order = operator.attrgetter("pod_start_ms", "key")


# ---- from SimKube --------------------------------------------------------------------------------
def simkube_to_trace(trace: SimkubeTrace, source: str = "SimKube trace") -> Segment:
    """A kubetape trace (kind ``TRACE``) with the content of a SimKube trace, times in milliseconds."""
    events: list[Event] = []
    try:
        for sk_event in trace.events:
            ts_ms = sk_event.ts * 1000
            for obj in sk_event.applied_objs:
                events.append(Event.applied(ts_ms, key_of(obj), obj, object_spec_hash(obj)))
            for obj in sk_event.deleted_objs:
                events.append(Event.deleted(ts_ms, key_of(obj), obj))
    except FormatError as exc:
        raise FormatError(f"{source}: {exc}") from None
    start_ms = trace.events[0].ts * 1000 if trace.events else 0
    end_ms = (trace.events[-1].ts + 1) * 1000 if trace.events else 0
    if any(e.ts_ms < start_ms for e in events) or start_ms < 0:
        raise FormatError(f"{source}: events are not sorted by time or have negative times")
    for (gvk_text, ns_name), by_hash in trace.pod_lifecycles.items():
        gvk = GroupVersionKind.parse(gvk_text)
        namespace, _, name = ns_name.rpartition("/")
        owner = object_key(gvk.api_version, gvk.kind, namespace or None, name)
        for pod_hash, lcs in by_hash.items():
            for seq, lc in enumerate(lcs):
                if lc.start is None:
                    continue
                if gvk.group == "" and gvk.kind == "Pod" and seq == 0:
                    pod = owner  # a bare pod is its own lifecycle owner
                else:
                    pod = object_key("v1", "Pod", namespace or None, f"{name}-{pod_hash:016x}-{seq}")
                start, end = lc.start * 1000, None if lc.end is None else lc.end * 1000
                if end is not None and end < start:
                    raise FormatError(f"{source}: lifecycle of {ns_name} ends before it starts")
                ts = min(max(start, start_ms), max(end_ms - 1, start_ms))
                events.append(
                    Event.pod_lifecycle(
                        ts, pod, owner_key=owner, pod_spec_hash=pod_hash, start_ms=max(start, 0), end_ms=end
                    )
                )
    if events:
        end_ms = max(end_ms, max(e.ts_ms for e in events) + 1)
    try:
        config = trace.tracer_config("(embedded)")
    except ConfigError as exc:  # a config inside a file is part of that file's format
        raise FormatError(f"{source}: {exc}") from None
    return build_segment(events, start_ms=start_ms, end_ms=end_ms, config=config, kind=SegmentKind.TRACE)
