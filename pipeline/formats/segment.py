"""kubetape segment files: a time range of events, sorted by event time, zstd-compressed.

A segment is what the sink writes for one partition range, and also the file format of an exported
kubetape trace (``kind = TRACE``, built by :mod:`pipeline.formats.assemble`). Layout (big-endian)::

    b"KTSG" | u16 format version | u32 header length | u32 header CRC-32 | header (msgpack map)
            | u32 body length    | u32 body CRC-32   | body (one zstd frame of a msgpack map)

The header is small and uncompressed so :func:`decode_segment_header` can read time range, partition
offset ranges and counts without touching the body. The body holds the events, an optional
:class:`Keyframe` (full state at a time T, so a replay can start there without reading older history)
and the tracer config. The events are stored per format version:

* version 2 (written): each event list is the concatenation of the events' own wire bytes (exactly
  :func:`~pipeline.formats.wire.codec.encode_event`'s output, i.e. the Kafka message values), so the sink
  writes what it consumed without decoding or re-encoding the object bodies (the sink's CPU per event
  fell 2.6x). The price is size: rows compress 6-25 % worse than columns (delta-coded times and the
  fields grouped by kind help zstd): 69.9 vs 65.7 bytes per event in ``bench/bench_sink.py``, 49.7
  (with the match settings below; 50.9 before them) vs 42.9 in ``bench/bench_codec.py``;
* version 1 (still read; written on request): column by column, see :mod:`pipeline.formats.columns`.

Invariants checked on encode and on decode: events sorted by ``ts_ms`` and inside
``[start_ms, end_ms)``, keyframe at or before ``start_ms``, header counts equal to the body's.
Decoding corrupt, truncated or unknown-version bytes raises
:class:`~pipeline.model.errors.FormatError` / ``UnknownVersionError`` naming the source and the problem.
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import operator
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import zstandard

from pipeline.formats.columns import events_from_columns, events_to_columns
from pipeline.formats.wire.codec import encode_event, event_from_wire, event_to_wire
from pipeline.formats.wire.probe import EventHead
from pipeline.model.errors import ConfigError, FormatError, UnknownVersionError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey
from pipeline.model.tracer_config import TracerConfig

MAGIC = b"KTSG"
SEGMENT_FORMAT_VERSION = 2
"""Version of the segment layout written by :func:`encode_segment` (1 is still read)."""
READABLE_FORMAT_VERSIONS = (1, 2)

ZSTD_LEVEL = 9
ZSTD_MIN_MATCH = 7
"""Shortest match zstd looks for, at every level (zstd's maximum; levels default to 3-7, and the lazy and
binary-tree finders of levels 5+ use at most 6). Event bytes are full of short repeats (msgpack headers,
small ints, hex in UIDs) that cost more as matches than as literals and crowd out the long ones. In
``bench/bench_codec.py``: level 3 4.4 % smaller and no slower, level 9 2.4 %; bodies of a few KB come
out up to 1 % larger."""
ZSTD_WINDOW_LOG = 23
"""Matches reach at least 2**23 bytes (8 MiB) back (levels 1-9 default to 0.5-4 MiB); a level with a larger
default keeps it. Only bodies over 2 MiB gain (at level 3, no slower: 0.4 % on bench_codec's 5 MB body,
3.5 % on a 26 MB one). A streaming decoder buffers at most this window (zstd decoders accept 2**27 by
default); a body smaller than it is a single-segment frame, whose window is the body's size."""
MAX_BODY_BYTES = 1 << 31
"""The hard ceiling of :class:`DecodeLimits` (the body length field is a u32)."""
DEFAULT_MAX_INFLATED_BYTES = 1 << 30
"""Default of :attr:`DecodeLimits.max_inflated_bytes` (1 GiB; env ``KUBETAPE_MAX_INFLATED_BYTES``)."""
DEFAULT_MAX_INFLATE_RATIO = 1000
"""Default of :attr:`DecodeLimits.max_ratio` (env ``KUBETAPE_MAX_INFLATE_RATIO``). kubetape bodies
inflate 3-30x (events), up to ~150x (keyframes of near-identical objects); a zstd bomb ~10^5x."""


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """What a decoder accepts before it inflates a body: checked on the zstd frame header alone, so a
    crafted file (a "decompression bomb": a few KB declaring gigabytes) is refused before any memory is
    allocated for it.

    ``max_inflated_bytes``: the largest decompressed body (default 1 GiB, at most 2 GiB);
    ``max_ratio``: the largest decompressed/compressed size ratio (default 1000). A body whose frame does
    not declare its size is refused (kubetape always writes it). Every reader of segments and kubetape
    traces goes through :func:`decode_segment` (``kubetape inspect``, ``replay --trace FILE|URL``, a
    Simulation's ``traceURL``, export, the sink's restore), so these limits hold for all of them.
    :meth:`from_env` reads ``KUBETAPE_MAX_INFLATED_BYTES`` and ``KUBETAPE_MAX_INFLATE_RATIO`` to raise
    them for an exceptional trace."""

    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES
    max_ratio: int = DEFAULT_MAX_INFLATE_RATIO

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DecodeLimits:
        """The limits with the environment's overrides (invalid values raise ConfigError)."""
        import os

        env = os.environ if environ is None else environ

        def read(name: str, default: int, ceiling: int) -> int:
            text = env.get(name)
            if text is None or not text.strip():
                return default
            try:
                value = int(text.strip())
            except ValueError:
                raise ConfigError(f"${name}={text!r}: expected a whole number") from None
            if not 1 <= value <= ceiling:
                raise ConfigError(f"${name}={value}: must be between 1 and {ceiling}")
            return value

        return cls(
            read("KUBETAPE_MAX_INFLATED_BYTES", DEFAULT_MAX_INFLATED_BYTES, MAX_BODY_BYTES),
            read("KUBETAPE_MAX_INFLATE_RATIO", DEFAULT_MAX_INFLATE_RATIO, 1 << 30),
        )

    def check(self, body: bytes, source: str) -> int:
        """The declared decompressed size of the zstd frame ``body``; FormatError if it breaks a limit."""
        try:
            declared = zstandard.frame_content_size(body)
        except zstandard.ZstdError as exc:
            raise FormatError(f"{source}: undecodable body (not a zstd frame: {exc})") from None
        if declared < 0:
            raise FormatError(f"{source}: the body does not declare its decompressed size; refused")
        if declared > min(self.max_inflated_bytes, MAX_BODY_BYTES):
            raise FormatError(
                f"{source}: the body would inflate to {declared} bytes, over the limit of "
                f"{self.max_inflated_bytes} (raise $KUBETAPE_MAX_INFLATED_BYTES for a trace this large)"
            )
        if declared > max(len(body), 1) * self.max_ratio and declared > 1 << 20:
            raise FormatError(
                f"{source}: the body would inflate {declared // max(len(body), 1)}x ({len(body)} -> "
                f"{declared} bytes), over the limit of {self.max_ratio}x: a crafted file? (raise "
                "$KUBETAPE_MAX_INFLATE_RATIO if it is a genuine trace)"
            )
        return int(declared)


_limits_from_env: DecodeLimits | None = None


def default_limits() -> DecodeLimits:
    """:meth:`DecodeLimits.from_env`, read once per process."""
    global _limits_from_env  # noqa: PLW0603 - a per-process cache of the environment
    if _limits_from_env is None:
        _limits_from_env = DecodeLimits.from_env()
    return _limits_from_env


_PREAMBLE = struct.Struct(">4sHII")
_BODY_PREAMBLE = struct.Struct(">II")


class SegmentKind(enum.Enum):
    """A sink segment (one partition range), an assembled trace (a window, state folded at its start),
    or a gap marker: the sink's explicit record that the offsets of its partition range were lost (the
    topic no longer held them when the store needed them); it has no events and no keyframe, and
    ``gap_reason`` says what happened. Readers older than gap markers report such a file as unreadable."""

    SEGMENT = "segment"
    TRACE = "trace"
    GAP = "gap"


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Kafka offsets ``first_offset``..``last_offset`` (inclusive) of ``topic``/``partition`` went into it."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class EventCounts:
    """Number of events per type."""

    applied: int = 0
    deleted: int = 0
    pod_lifecycle: int = 0
    gap: int = 0

    @property
    def total(self) -> int:
        """All events."""
        return self.applied + self.deleted + self.pod_lifecycle + self.gap

    @classmethod
    def of(cls, events: Iterable[Event | EventHead]) -> EventCounts:
        """Count ``events`` by type."""
        # list.count compares by identity first, all in C: per event a Python loop cost 4x more, and
        # a Counter hashes enum members in Python.
        types = list(map(_type_of, events))
        applied, deleted, lifecycle = (types.count(t) for t in _COUNTED_TYPES)
        return cls(applied, deleted, lifecycle, len(types) - applied - deleted - lifecycle)


_type_of = operator.attrgetter("type")
_COUNTED_TYPES = (EventType.APPLIED, EventType.DELETED, EventType.POD_LIFECYCLE)


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
    :meth:`pipeline.sink.state.ObjectState.settle`). Empty in traces."""


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """What a segment covers, readable without decompressing the body."""

    format_version: int
    kind: SegmentKind
    start_ms: int
    end_ms: int
    partitions: tuple[PartitionRange, ...]
    counts: EventCounts
    keyframe_at_ms: int | None = None
    keyframe_objects: int = 0
    keyframe_lifecycles: int = 0
    keyframe_tombstones: int = 0
    keyframe_offset: int | None = None
    keyframe_time: int | None = None
    source: str | None = None
    writer_epoch: int | None = None
    gap_reason: str | None = None

    @property
    def is_gap(self) -> bool:
        """A gap marker: the offsets of :attr:`partitions` were lost (see :data:`SegmentKind.GAP`)."""
        return self.kind is SegmentKind.GAP

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (for ``kubetape inspect --json`` and logs); the fields of sink identity,
        keyframe position and gaps appear only when the segment has them."""
        out = {
            "format_version": self.format_version,
            "kind": self.kind.value,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "partitions": [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "first_offset": p.first_offset,
                    "last_offset": p.last_offset,
                }
                for p in self.partitions
            ],
            "counts": {
                "applied": self.counts.applied,
                "deleted": self.counts.deleted,
                "pod_lifecycle": self.counts.pod_lifecycle,
                "gap": self.counts.gap,
            },
            "keyframe_at_ms": self.keyframe_at_ms,
            "keyframe_objects": self.keyframe_objects,
            "keyframe_lifecycles": self.keyframe_lifecycles,
        }
        optional = {
            "keyframe_tombstones": self.keyframe_tombstones or None,
            "keyframe_offset": self.keyframe_offset,
            "keyframe_time": self.keyframe_time,
            "source": self.source,
            "writer_epoch": self.writer_epoch,
            "gap_reason": self.gap_reason,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


@dataclass(frozen=True, slots=True)
class Segment:
    """Header, events sorted by event time, optional keyframe and tracer config."""

    header: SegmentHeader
    events: tuple[Event, ...]
    keyframe: Keyframe | None = None
    config: TracerConfig | None = None


def build_segment(
    events: Iterable[Event],
    *,
    start_ms: int,
    end_ms: int,
    partitions: Iterable[PartitionRange] = (),
    keyframe: Keyframe | None = None,
    config: TracerConfig | None = None,
    kind: SegmentKind = SegmentKind.SEGMENT,
) -> Segment:
    """A consistent segment: events stably sorted by time, header counts computed. Raises FormatError
    if an event lies outside ``[start_ms, end_ms)`` or the keyframe is after ``start_ms``."""
    ordered = tuple(sorted(events, key=_ts))
    header = SegmentHeader(
        format_version=SEGMENT_FORMAT_VERSION,
        kind=kind,
        start_ms=start_ms,
        end_ms=end_ms,
        partitions=tuple(partitions),
        counts=EventCounts.of(ordered),
        keyframe_at_ms=keyframe.at_ms if keyframe else None,
        keyframe_objects=len(keyframe.objects) if keyframe else 0,
        keyframe_lifecycles=len(keyframe.lifecycles) if keyframe else 0,
        keyframe_tombstones=len(keyframe.tombstones) if keyframe else 0,
    )
    segment = Segment(header, ordered, keyframe, config)
    problem = _consistency_problem(segment)
    if problem:
        raise FormatError(f"inconsistent segment: {problem}")
    return segment


_ts = operator.attrgetter("ts_ms")
_wire_of = operator.attrgetter("wire")


@dataclass(frozen=True, slots=True)
class WireSegment:
    """A segment whose events are still their wire bytes, concatenated (what the sink writes).

    Built by :func:`build_wire_segment` from :class:`~pipeline.formats.wire.probe.EventHead` values, encoded
    by :func:`encode_wire_segment` into the same file bytes :func:`encode_segment` gives for the
    decoded events. ``keyframe_objects`` / ``keyframe_lifecycles`` are empty without a keyframe."""

    header: SegmentHeader
    events: bytes
    keyframe_objects: bytes = b""
    keyframe_lifecycles: bytes = b""
    keyframe_tombstones: bytes = b""
    config: TracerConfig | None = None


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
        format_version=SEGMENT_FORMAT_VERSION,
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
        format_version=SEGMENT_FORMAT_VERSION,
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


def _consistency_problem(seg: Segment) -> str | None:
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
    if h.kind is SegmentKind.GAP and (seg.events or seg.keyframe is not None or h.gap_reason is None):
        return "a gap marker holds no events and no keyframe, and says why"
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


# ---- encoding ------------------------------------------------------------------------------------
def _header_to_wire(h: SegmentHeader) -> dict[str, Any]:
    return {
        "v": h.format_version,
        "kind": h.kind.value,
        "start_ms": h.start_ms,
        "end_ms": h.end_ms,
        "partitions": [[p.topic, p.partition, p.first_offset, p.last_offset] for p in h.partitions],
        "counts": [h.counts.applied, h.counts.deleted, h.counts.pod_lifecycle, h.counts.gap],
        "keyframe": [h.keyframe_at_ms, h.keyframe_objects, h.keyframe_lifecycles],
        **({} if not h.keyframe_tombstones else {"kf_tombstones": h.keyframe_tombstones}),
        **({} if h.keyframe_offset is None else {"kf_after": [h.keyframe_offset, h.keyframe_time]}),
        **({} if h.source is None else {"source": h.source}),
        **({} if h.writer_epoch is None else {"epoch": h.writer_epoch}),
        **({} if h.gap_reason is None else {"gap": h.gap_reason}),
    }


def encode_segment(
    seg: Segment,
    level: int = ZSTD_LEVEL,
    *,
    format_version: int = SEGMENT_FORMAT_VERSION,
    wires: EventWires | None = None,
) -> bytes:
    """The file bytes of ``seg`` (raises FormatError if it is inconsistent; see :func:`build_segment`).

    ``format_version`` 1 writes the older column layout (for readers not upgraded yet, and tests).
    ``wires``: bytes of events decoded earlier (see :func:`decode_segment`), written as they are."""
    problem = _consistency_problem(seg)
    if problem:
        raise FormatError(f"refusing to encode an inconsistent segment: {problem}")
    kf = seg.keyframe
    header = dataclasses.replace(seg.header, format_version=format_version)
    if format_version == 1:
        if kf is not None and kf.tombstones:
            raise ValueError("segment format version 1 cannot hold keyframe tombstones")
        body = {
            "events": events_to_columns(seg.events, seg.header.start_ms),
            "keyframe": None
            if kf is None
            else {
                "at_ms": kf.at_ms,
                "objects": events_to_columns(list(kf.objects.values()), kf.at_ms),
                "lifecycles": events_to_columns(list(kf.lifecycles.values()), kf.at_ms),
            },
            "config": seg.config.to_mapping() if seg.config is not None else None,
        }
        return _file_bytes(header, body, level)
    if format_version != SEGMENT_FORMAT_VERSION:
        raise ValueError(f"cannot write segment format version {format_version}")
    wire = WireSegment(
        header,
        _concatenated_wires(seg.events, wires),
        b"" if kf is None else _concatenated_wires(kf.objects.values()),
        b"" if kf is None else _concatenated_wires(kf.lifecycles.values()),
        b"" if kf is None else _concatenated_wires(kf.tombstones.values()),
        config=seg.config,
    )
    return encode_wire_segment(wire, level)


def _concatenated_wires(events: Iterable[Event], known: EventWires | None = None) -> bytes:
    """``b"".join(encode_event(e) for e in events)``, in one msgpack call instead of one per event.

    A msgpack array is its length header followed by its items' encodings, so packing the list of
    wire lists and dropping that header gives exactly the concatenation. With ``known``, events
    decoded earlier keep their bytes (the same bytes: the encoding is deterministic)."""
    if known is not None:
        get = known.get
        return b"".join([w if (w := get(e)) is not None else encode_event(e) for e in events])
    wires = [event_to_wire(e) for e in events]
    n = len(wires)
    packed: bytes = msgpack.packb(wires, use_bin_type=True)
    header_len = 1 if n < 16 else 3 if n < 1 << 16 else 5  # fixarray, array 16, array 32
    return packed[header_len:]


def encode_wire_segment(seg: WireSegment, level: int = ZSTD_LEVEL) -> bytes:
    """The file bytes of a segment built by :func:`build_wire_segment` (format version 2)."""
    h = seg.header
    body = {
        "events": seg.events,
        "keyframe": None
        if h.keyframe_at_ms is None
        else {
            "at_ms": h.keyframe_at_ms,
            "objects": seg.keyframe_objects,
            "lifecycles": seg.keyframe_lifecycles,
            **({"tombstones": seg.keyframe_tombstones} if h.keyframe_tombstones else {}),
        },
        "config": seg.config.to_mapping() if seg.config is not None else None,
    }
    return _file_bytes(h, body, level)


def _file_bytes(h: SegmentHeader, body: dict[str, Any], level: int) -> bytes:
    raw_body = msgpack.packb(body, use_bin_type=True)
    # A standard zstd frame whichever the parameters (decoding does not depend on them). Parameters left
    # out come from the level and the body's size, as with ``ZstdCompressor(level=level)``.
    params = zstandard.ZstdCompressionParameters(
        compression_level=level,
        window_log=max(ZSTD_WINDOW_LOG, zstandard.ZstdCompressionParameters.from_level(level).window_log),
        min_match=ZSTD_MIN_MATCH,
        write_checksum=1,
        write_content_size=1,
    )
    compressed = zstandard.ZstdCompressor(compression_params=params).compress(raw_body)
    header = msgpack.packb(_header_to_wire(h), use_bin_type=True)
    return b"".join(
        (
            _PREAMBLE.pack(MAGIC, h.format_version, len(header), zlib.crc32(header)),
            header,
            _BODY_PREAMBLE.pack(len(compressed), zlib.crc32(compressed)),
            compressed,
        )
    )


# ---- decoding ------------------------------------------------------------------------------------
def is_segment(data: bytes) -> bool:
    """Whether ``data`` starts like a kubetape segment."""
    return data[:4] == MAGIC


def _split_header(data: bytes, source: str) -> tuple[SegmentHeader, int]:
    """The header and the offset where the body preamble starts."""
    if len(data) < _PREAMBLE.size:
        raise FormatError(f"{source}: truncated: {len(data)} bytes, too short for a segment preamble")
    magic, version, header_len, header_crc = _PREAMBLE.unpack_from(data)
    if magic != MAGIC:
        raise FormatError(f"{source}: not a kubetape segment (magic {magic!r}, expected {MAGIC!r})")
    if version not in READABLE_FORMAT_VERSIONS:
        raise UnknownVersionError(
            f"{source}: segment format version {version} is not supported (this build reads "
            f"versions {', '.join(map(str, READABLE_FORMAT_VERSIONS))}); upgrade kubetape to read it"
        )
    end = _PREAMBLE.size + header_len
    if len(data) < end:
        raise FormatError(f"{source}: truncated header: needs {header_len} bytes, {len(data) - 14} present")
    header_bytes = data[_PREAMBLE.size : end]
    if zlib.crc32(header_bytes) != header_crc:
        raise FormatError(f"{source}: header checksum mismatch: the file is corrupt")
    try:
        raw = msgpack.unpackb(header_bytes, raw=False)
        header = _header_from_wire(raw, version)
    except FormatError as exc:
        raise FormatError(f"{source}: malformed header ({exc})") from None
    except Exception as exc:  # msgpack or malformed fields: checksummed, so written by a broken encoder
        raise FormatError(f"{source}: malformed header ({type(exc).__name__}: {exc})") from None
    return header, end


_TIME_MAX = (1 << 63) - 1  # event times are 0..2**63-1 ms (pipeline.model.events); an end is exclusive
_COUNT_MAX = 1 << 32


def _int(value: Any, what: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise FormatError(f"header {what} {value!r} is not an integer in [{low}, {high}]")
    return value


def _header_from_wire(raw: Any, version: int) -> SegmentHeader:
    """Every field checked for type and range: a header is read before anything else (inspect, the
    catalog), so a crafted one must fail here with a FormatError, not later as a crash."""
    if not isinstance(raw, dict) or raw.get("v") != version:
        raise FormatError("header version does not match the preamble")
    kf_at, kf_objects, kf_lifecycles = raw["keyframe"]
    applied, deleted, lifecycle, gap = raw["counts"]
    start_ms = _int(raw["start_ms"], "start_ms", 0, _TIME_MAX)
    end_ms = _int(raw["end_ms"], "end_ms", 0, _TIME_MAX + 1)
    if start_ms > end_ms:
        raise FormatError(f"header start_ms {start_ms} is after end_ms {end_ms}")
    partitions = []
    for t, p, f, last in raw["partitions"]:
        if not isinstance(t, str):
            raise FormatError(f"header topic {t!r} is not a string")
        first = _int(f, "first offset", 0, _TIME_MAX)
        partitions.append(
            PartitionRange(
                t, _int(p, "partition", 0, 1 << 31), first, _int(last, "last offset", 0, _TIME_MAX)
            )
        )
    kf_after = raw.get("kf_after")
    kf_offset = kf_time = None
    if kf_after is not None:
        kf_offset = _int(kf_after[0], "keyframe offset", -1, _TIME_MAX)
        kf_time = _int(kf_after[1], "keyframe time", 0, _TIME_MAX + 1)
    source, epoch, gap_reason = raw.get("source"), raw.get("epoch"), raw.get("gap")
    if source is not None and not isinstance(source, str):
        raise FormatError(f"header source {source!r} is not a string")
    if gap_reason is not None and not isinstance(gap_reason, str):
        raise FormatError(f"header gap reason {gap_reason!r} is not a string")
    return SegmentHeader(
        format_version=version,
        kind=SegmentKind(raw["kind"]),
        start_ms=start_ms,
        end_ms=end_ms,
        partitions=tuple(partitions),
        counts=EventCounts(*(_int(n, "count", 0, _COUNT_MAX) for n in (applied, deleted, lifecycle, gap))),
        keyframe_at_ms=None if kf_at is None else _int(kf_at, "keyframe time", 0, _TIME_MAX),
        keyframe_objects=_int(kf_objects, "keyframe object count", 0, _COUNT_MAX),
        keyframe_lifecycles=_int(kf_lifecycles, "keyframe lifecycle count", 0, _COUNT_MAX),
        keyframe_tombstones=_int(raw.get("kf_tombstones", 0), "keyframe tombstone count", 0, _COUNT_MAX),
        keyframe_offset=kf_offset,
        keyframe_time=kf_time,
        source=source,
        writer_epoch=None if epoch is None else _int(epoch, "writer epoch", 0, _TIME_MAX),
        gap_reason=gap_reason,
    )


def decode_segment_header(data: bytes, source: str = "segment") -> SegmentHeader:
    """Only the header (needs just the first bytes of the file); raises FormatError."""
    return _split_header(data, source)[0]


def read_segment_header(path: Path) -> SegmentHeader:
    """The header of the segment file at ``path``, reading only its first bytes."""
    try:
        with path.open("rb") as f:
            prefix = f.read(_PREAMBLE.size)
            if len(prefix) == _PREAMBLE.size and prefix[:4] == MAGIC:
                prefix += f.read(_PREAMBLE.unpack(prefix)[2])
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return decode_segment_header(prefix, str(path))


def decode_segment(
    data: bytes,
    source: str = "segment",
    *,
    with_keyframe: bool = True,
    wires: EventWires | None = None,
    limits: DecodeLimits | None = None,
) -> Segment:
    """Decode :func:`encode_segment`'s bytes; raises FormatError/UnknownVersionError naming ``source``.

    ``with_keyframe=False`` leaves the keyframe out (``Segment.keyframe`` is None whatever the header
    says): readers that start from an earlier state skip the most expensive part of the body.
    ``wires`` collects the bytes of each event (not of keyframe events; version-2 segments only).
    ``limits`` (default: :func:`default_limits`) are checked before the body is inflated."""
    limits = limits or default_limits()
    header, offset = _split_header(data, source)
    if len(data) < offset + _BODY_PREAMBLE.size:
        raise FormatError(f"{source}: truncated: the body is missing")
    body_len, body_crc = _BODY_PREAMBLE.unpack_from(data, offset)
    start = offset + _BODY_PREAMBLE.size
    body = data[start : start + body_len]
    if len(body) < body_len:
        raise FormatError(f"{source}: truncated body: {len(body)} of {body_len} bytes present")
    if len(data) > start + body_len:
        raise FormatError(f"{source}: {len(data) - start - body_len} unexpected bytes after the body")
    if zlib.crc32(body) != body_crc:
        raise FormatError(f"{source}: body checksum mismatch: the file is corrupt")
    # Bulk decoding allocates many containers that all survive: the cyclic GC would rescan them again
    # and again for nothing (msgpack's documentation recommends pausing it), so it is paused here.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            declared = limits.check(body, source)
            raw_body = zstandard.ZstdDecompressor().decompress(body, max_output_size=max(declared, 1))
            raw = msgpack.unpackb(raw_body, raw=False, strict_map_key=False)
        except FormatError:
            raise
        except Exception as exc:  # zstd and msgpack raise their own types for corrupt data
            raise FormatError(f"{source}: undecodable body ({type(exc).__name__}: {exc})") from None
        segment = _body_from_wire(raw, header, source, with_keyframe=with_keyframe, wires=wires)
    finally:
        if gc_was_enabled:
            gc.enable()
    if not with_keyframe and header.keyframe_at_ms is not None:
        header = dataclasses.replace(
            header,
            keyframe_at_ms=None,
            keyframe_objects=0,
            keyframe_lifecycles=0,
            keyframe_tombstones=0,
            keyframe_offset=None,
            keyframe_time=None,
        )
        segment = dataclasses.replace(segment, header=header)
    problem = _consistency_problem(segment)
    if problem:
        raise FormatError(f"{source}: {problem}")
    return segment


def _body_from_wire(
    raw: Any, header: SegmentHeader, source: str, *, with_keyframe: bool, wires: EventWires | None
) -> Segment:
    if not isinstance(raw, dict):
        raise FormatError(f"{source}: malformed body (not a map)")
    v1 = header.format_version == 1
    if v1:
        events = tuple(events_from_columns(raw.get("events"), header.start_ms, f"{source}: event"))
    else:
        events = tuple(_events_from_wires(raw.get("events"), header.counts.total, f"{source}: event", wires))
    keyframe = None
    kf = raw.get("keyframe")
    if kf is not None and with_keyframe:
        at_ms = kf.get("at_ms") if isinstance(kf, dict) else None
        if type(at_ms) is not int:
            raise FormatError(f"{source}: malformed keyframe (no time)")
        if v1:
            objects = events_from_columns(kf.get("objects"), at_ms, f"{source}: keyframe object")
            lifecycles = events_from_columns(kf.get("lifecycles"), at_ms, f"{source}: keyframe lifecycle")
        else:
            objects = _events_from_wires(
                kf.get("objects"), header.keyframe_objects, f"{source}: keyframe object"
            )
            lifecycles = _events_from_wires(
                kf.get("lifecycles"), header.keyframe_lifecycles, f"{source}: keyframe lifecycle"
            )
        tombstones = (
            _events_from_wires(
                kf.get("tombstones"), header.keyframe_tombstones, f"{source}: keyframe tombstone"
            )
            if header.keyframe_tombstones and not v1
            else []
        )
        keyframe = Keyframe(
            at_ms,
            {e.key: e for e in objects},
            {e.key: e for e in lifecycles},
            {e.key: e for e in tombstones},
        )
    config = None
    if raw.get("config") is not None:
        try:
            config = TracerConfig.from_mapping(raw["config"], "(embedded)")
        except ConfigError as exc:
            raise FormatError(f"{source}: {exc}") from None
    return Segment(header, events, keyframe, config)


def _events_from_wires(blob: Any, count: int, what: str, wires: EventWires | None = None) -> list[Event]:
    """The ``count`` events of a version-2 event list (their wire bytes, concatenated); each event's
    bytes are remembered in ``wires`` if given.

    The sink checks messages without decoding their object bodies (see
    :class:`~pipeline.formats.wire.probe.WireProbe`), so a body may hold what msgpack encodes but Python
    cannot decode as it is: text that is not UTF-8, a map key that is a list or a map. No kubetape
    watcher writes such a body (they come from JSON). Rather than losing the whole segment, such a
    list is read again tolerantly: invalid text with U+FFFD, unhashable keys as their ``repr``."""
    if type(blob) is not bytes:
        raise FormatError(f"{what}s: malformed (expected the events' bytes)")
    try:
        return _decode_wires(blob, count, what, wires, tolerant=False)
    except FormatError:
        raise
    except Exception:  # see the docstring: read again tolerantly
        pass
    try:
        return _decode_wires(blob, count, what, wires, tolerant=True)
    except FormatError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for corrupt data
        raise FormatError(f"{what}s: undecodable ({type(exc).__name__}: {exc})") from None


def _decode_wires(
    blob: bytes, count: int, what: str, wires: EventWires | None, *, tolerant: bool
) -> list[Event]:
    out: list[Event] = []
    ends: list[int] = []
    unpacker = (
        msgpack.Unpacker(
            raw=False,
            strict_map_key=False,
            max_buffer_size=max(len(blob), 1),
            unicode_errors="replace",
            object_pairs_hook=_tolerant_map,
        )
        if tolerant
        else msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(blob), 1))
    )
    unpacker.feed(blob)
    for value in unpacker:  # streaming is as fast as one unpackb and tells where each event ends
        ends.append(unpacker.tell())
        try:
            out.append(event_from_wire(value))
        except FormatError:
            event_from_wire(value, f"{what} #{len(out)}")  # raises again, naming the event
            raise
    if len(out) != count or (ends[-1] if ends else 0) != len(blob):
        raise FormatError(f"{what}s: {len(out)} events where the header counts {count}")
    if wires is not None:
        wires.add_all(out, [blob[a:b] for a, b in zip([0, *ends], ends, strict=False)])
    return out


def _tolerant_map(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    return {k if isinstance(k, str | int | float | bool | None) else repr(k): v for k, v in pairs}


class EventWires:
    """The wire bytes of decoded events, by identity, so that an encoder can reuse what a decoder read
    (an export writes most events exactly as the segments held them; re-encoding their object bodies
    was a third of an export's time). Holds the events, so an identity is never reused meanwhile."""

    def __init__(self) -> None:
        self._by_id: dict[int, bytes] = {}
        self._alive: list[Event] = []

    def add_all(self, events: list[Event], wires: list[bytes]) -> None:
        """Remember ``wires[i]`` as the bytes of ``events[i]``."""
        self._alive += events
        self._by_id.update(zip(map(id, events), wires, strict=True))

    def get(self, e: Event) -> bytes | None:
        return self._by_id.get(id(e))


def read_segment(path: Path) -> Segment:
    """Decode the segment file at ``path``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return decode_segment(data, str(path))
