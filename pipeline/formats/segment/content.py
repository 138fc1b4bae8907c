"""What a segment holds, built consistent: events sorted by time inside its window, an optional
keyframe (the state at its start), the tracer config; or, for the sink, the same as wire bytes.

Every segment obeys :func:`consistency_problem`'s rules: they are checked when one is built, encoded
and decoded.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pipeline.formats.segment.header import (
    DEFAULT_WRITE_VERSION,
    EventCounts,
    PartitionRange,
    SegmentHeader,
    SegmentKind,
)
from pipeline.formats.wire.probe import EventHead
from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey
from pipeline.model.tracer_config import TracerConfig
from pipeline.model.usage import UsageSample


@dataclass(frozen=True, slots=True)
class Keyframe:
    """The full state at ``at_ms``: what all events with ``ts_ms < at_ms`` leave behind.

    ``objects`` holds the latest APPLIED event of every live object; ``lifecycles`` the latest
    POD_LIFECYCLE event of every pod (keyed by pod key; kept apart because a tracked bare pod has both).
    """

    at_ms: int
    objects: Mapping[ObjectKey, Event] = field(default_factory=dict)
    lifecycles: Mapping[ObjectKey, Event] = field(default_factory=dict)
    tombstones: Mapping[ObjectKey, Event] = field(default_factory=dict)
    """The sink's recent deletes (DELETED events as recorded): they are not state, they
    let a restored sink still recognize a stale re-publish of a deleted object (see
    :meth:`pipeline.store.state.ObjectState.settle`). Empty in traces."""


@dataclass(frozen=True, slots=True)
class Segment:
    """Header, events sorted by event time, optional keyframe and tracer config, and the recorded load
    (usage samples sorted by time, inside the window like the events; a trace's first ones, at its
    start, are the load each owner had then: see :func:`pipeline.formats.usage_window.usage_window`)."""

    header: SegmentHeader
    events: tuple[Event, ...]
    keyframe: Keyframe | None = None
    config: TracerConfig | None = None
    usage: tuple[UsageSample, ...] = ()


def usage_order(sample: UsageSample) -> tuple[int, str, str]:
    """How a segment orders its usage samples: by time, then owner and template hash."""
    return (sample.ts_ms, sample.owner_key, sample.template_hash)


def build_segment(
    events: Iterable[Event],
    *,
    start_ms: int,
    end_ms: int,
    partitions: Iterable[PartitionRange] = (),
    keyframe: Keyframe | None = None,
    config: TracerConfig | None = None,
    kind: SegmentKind = SegmentKind.SEGMENT,
    usage: Iterable[UsageSample] = (),
) -> Segment:
    """A consistent segment: events stably sorted by time, usage samples by :func:`usage_order`, header
    counts computed. Raises FormatError if an event or sample lies outside ``[start_ms, end_ms)`` or the
    keyframe is after ``start_ms``."""
    ordered = tuple(sorted(events, key=_ts))
    samples = tuple(sorted(usage, key=usage_order))
    header = SegmentHeader(
        format_version=DEFAULT_WRITE_VERSION,
        kind=kind,
        start_ms=start_ms,
        end_ms=end_ms,
        partitions=tuple(partitions),
        counts=EventCounts.of(ordered),
        keyframe_at_ms=keyframe.at_ms if keyframe else None,
        keyframe_objects=len(keyframe.objects) if keyframe else 0,
        keyframe_lifecycles=len(keyframe.lifecycles) if keyframe else 0,
        keyframe_tombstones=len(keyframe.tombstones) if keyframe else 0,
        usage_samples=len(samples),
    )
    segment = Segment(header, ordered, keyframe, config, samples)
    problem = consistency_problem(segment)
    if problem:
        raise FormatError(f"inconsistent segment: {problem}")
    return segment


_ts = operator.attrgetter("ts_ms")
_wire_of = operator.attrgetter("wire")


@dataclass(frozen=True, slots=True)
class WireSegment:
    """A segment whose events are still their wire bytes, concatenated (what the sink writes).

    Built by :func:`build_wire_segment` from :class:`~pipeline.formats.wire.probe.EventHead` values, encoded
    by :func:`~.encode.encode_wire_segment` into the same file bytes :func:`~.encode.encode_segment`
    gives for the decoded events. ``keyframe_objects`` / ``keyframe_lifecycles`` are empty without a
    keyframe."""

    header: SegmentHeader
    events: bytes
    keyframe_objects: bytes = b""
    keyframe_lifecycles: bytes = b""
    keyframe_tombstones: bytes = b""
    config: TracerConfig | None = None
    usage: tuple[UsageSample, ...] = ()


def build_wire_segment(
    heads: Iterable[EventHead],
    *,
    start_ms: int,
    end_ms: int,
    partitions: Iterable[PartitionRange] = (),
    keyframe: tuple[int, Iterable[EventHead], Iterable[EventHead]] | None = None,
    config: TracerConfig | None = None,
    in_time_order: bool = False,
    keyframe_offset: int | None = None,
    keyframe_time: int | None = None,
    keyframe_tombstones: Iterable[EventHead] = (),
    source: str | None = None,
    writer_epoch: int | None = None,
) -> WireSegment:
    """The wire form of :func:`build_segment`: heads stably sorted by time, header counts computed.

    ``in_time_order``: the caller knows ``heads`` is a list already sorted by time (the sink's
    compactor tracks it as events arrive), so the sort is skipped.

    ``keyframe`` is ``(at_ms, objects, lifecycles)``, as in :class:`Keyframe` (the caller guarantees
    one APPLIED head per object key and one POD_LIFECYCLE head per pod key, sorted by key). Raises
    FormatError if a head lies outside ``[start_ms, end_ms)`` or the keyframe is after ``start_ms``.

    The sink's own segments also say exactly what their keyframe is (``keyframe_offset``: the state
    after every offset up to it; ``keyframe_time``: every event in that state is before it), where the
    partition's events came from (``source``: the topic's identity) and who wrote them
    (``writer_epoch``); see :mod:`pipeline.sink.compactor`."""
    ordered = heads if in_time_order and isinstance(heads, list) else sorted(heads, key=_ts)
    if start_ms > end_ms:
        raise FormatError(f"inconsistent segment: start_ms {start_ms} is after end_ms {end_ms}")
    if ordered and not start_ms <= ordered[0].ts_ms <= ordered[-1].ts_ms < end_ms:
        raise FormatError(
            f"inconsistent segment: events from {ordered[0].ts_ms} to {ordered[-1].ts_ms} are not "
            f"inside [{start_ms}, {end_ms})"
        )
    kf_at, kf_objects, kf_lifecycles = (None, (), ()) if keyframe is None else keyframe
    objects, lifecycles = list(map(_wire_of, kf_objects)), list(map(_wire_of, kf_lifecycles))
    tombstones = [] if kf_at is None else list(map(_wire_of, keyframe_tombstones))
    if kf_at is not None and kf_at > start_ms:
        raise FormatError(f"inconsistent segment: keyframe at {kf_at} is after start_ms {start_ms}")
    header = SegmentHeader(
        format_version=DEFAULT_WRITE_VERSION,
        kind=SegmentKind.SEGMENT,
        start_ms=start_ms,
        end_ms=end_ms,
        partitions=tuple(partitions),
        counts=EventCounts.of(ordered),
        keyframe_at_ms=kf_at,
        keyframe_objects=len(objects),
        keyframe_lifecycles=len(lifecycles),
        keyframe_tombstones=len(tombstones),
        keyframe_offset=None if kf_at is None else keyframe_offset,
        keyframe_time=None if kf_at is None or keyframe_offset is None else keyframe_time,
        source=source,
        writer_epoch=writer_epoch,
    )
    return WireSegment(
        header,
        b"".join(map(_wire_of, ordered)),
        b"".join(objects),
        b"".join(lifecycles),
        b"".join(tombstones),
        config,
    )


def build_gap_marker(
    lost: PartitionRange,
    *,
    start_ms: int,
    end_ms: int,
    reason: str,
    source: str | None = None,
    writer_epoch: int | None = None,
) -> WireSegment:
    """A gap marker (:data:`SegmentKind.GAP`): the offsets of ``lost`` are gone for good, for ``reason``.
    ``[start_ms, end_ms)`` bounds when the lost events may have happened (from the last event the
    store holds before them to when the loss was found)."""
    header = SegmentHeader(
        format_version=DEFAULT_WRITE_VERSION,
        kind=SegmentKind.GAP,
        start_ms=start_ms,
        end_ms=max(start_ms, end_ms),
        partitions=(lost,),
        counts=EventCounts(),
        source=source,
        writer_epoch=writer_epoch,
        gap_reason=reason,
    )
    return WireSegment(header, b"")


def consistency_problem(seg: Segment) -> str | None:
    h = seg.header
    if h.start_ms > h.end_ms:
        return f"start_ms {h.start_ms} is after end_ms {h.end_ms}"
    previous = h.start_ms
    for e in seg.events:
        if e.ts_ms < previous:
            return f"events are not sorted by time or start before start_ms ({e.key} at {e.ts_ms})"
        previous = e.ts_ms
    if seg.events and seg.events[-1].ts_ms >= h.end_ms:
        return f"event at {seg.events[-1].ts_ms} is not before end_ms {h.end_ms}"
    if h.counts != EventCounts.of(seg.events):
        return f"header counts {h.counts} do not match the events"
    if h.kind is SegmentKind.GAP and (
        seg.events or seg.usage or seg.keyframe is not None or h.gap_reason is None
    ):
        return "a gap marker holds no events, no usage and no keyframe, and says why"
    problem = usage_consistency_problem(seg.usage, h)
    if problem:
        return problem
    kf = seg.keyframe
    if (kf.at_ms if kf else None) != h.keyframe_at_ms:
        return "header keyframe time does not match the keyframe"
    if kf is not None:
        if kf.at_ms > h.start_ms:
            return f"keyframe at {kf.at_ms} is after start_ms {h.start_ms}"
        if (len(kf.objects), len(kf.lifecycles)) != (h.keyframe_objects, h.keyframe_lifecycles):
            return "header keyframe counts do not match the keyframe"
        for key, e in kf.objects.items():
            if e.type is not EventType.APPLIED or e.key != key:
                return f"keyframe object {key} is not an APPLIED event with that key"
        if len(kf.tombstones) != h.keyframe_tombstones:
            return "header keyframe tombstone count does not match the keyframe"
        for key, e in kf.tombstones.items():
            if e.type is not EventType.DELETED or e.key != key:
                return f"keyframe tombstone {key} is not a DELETED event with that key"
        for key, e in kf.lifecycles.items():
            if e.type is not EventType.POD_LIFECYCLE or e.key != key:
                return f"keyframe lifecycle {key} is not a POD_LIFECYCLE event with that key"
    return None


def usage_consistency_problem(usage: tuple[UsageSample, ...], h: SegmentHeader) -> str | None:
    """What is wrong with a segment's usage samples against its header, or None."""
    if len(usage) != h.usage_samples:
        return f"header usage count {h.usage_samples} does not match the {len(usage)} samples"
    previous: tuple[int, str, str] | None = None
    entries: tuple[object, ...] = usage  # typed loosely: a segment built by hand may hold anything
    for entry in entries:
        if not isinstance(entry, UsageSample):
            return "a usage entry is not a UsageSample"
        sample = entry
        order = usage_order(sample)
        if previous is not None and order <= previous:
            return f"usage samples are not sorted by time, owner and hash, or repeat ({sample.owner_key})"
        previous = order
    if usage and not h.start_ms <= usage[0].ts_ms <= usage[-1].ts_ms < max(h.end_ms, h.start_ms + 1):
        return f"usage samples from {usage[0].ts_ms} to {usage[-1].ts_ms} are not inside the window"
    return None
