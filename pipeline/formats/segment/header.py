"""The segment file's preamble and header: what a segment covers, readable without its body.

The header (kind, time range, partition offset ranges, event counts, where the keyframe is, who wrote
it) is small and uncompressed, so the catalog, ``kubetape inspect`` and the store read it from the first
bytes of a file. Every field is checked for type and range on reading.
"""

from __future__ import annotations

import enum
import operator
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from pipeline.formats.wire.probe import EventHead
from pipeline.model.errors import FormatError, UnknownVersionError
from pipeline.model.events import Event, EventType

MAGIC = b"KTSG"
SEGMENT_FORMAT_VERSION = 3
"""The newest segment layout (1 and 2 are still read; writers write :data:`DEFAULT_WRITE_VERSION`
unless told otherwise)."""
READABLE_FORMAT_VERSIONS = (1, 2, 3)
ENCODINGS = {1: "columns", 2: "wire rows", 3: "delta"}
DEFAULT_WRITE_VERSION = 2
"""What writers write unless told otherwise (the sink's ``SinkSettings.segment_format``, export,
``encode_segment``). Format 3 (delta-coded) is written on request: its rows encoded in C, it still costs
the sink's writer about 3x the CPU of format 2 per event (``bench/bench_storage.py``'s ``encode_cpu``; 12-19x
with the Python rows alone) for 1-19 % fewer bytes at the default settings (``docs/storage-cost.md``).
Readers take all."""
"""How each format version stores its events (``kubetape inspect`` shows it)."""


PREAMBLE = struct.Struct(">4sHII")
BODY_PREAMBLE = struct.Struct(">II")


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
    event_bytes: int | None = field(default=None, compare=False)
    """Version 3: the events' wire bytes once rebuilt, and the keyframe's (``keyframe_bytes``): a
    reader refuses a body that would inflate or rebuild to more before it does. Facts of the encoding
    (what the file holds is the same whatever they are), so they take no part in comparisons."""
    keyframe_bytes: int | None = field(default=None, compare=False)
    usage_samples: int = 0
    """Recorded load the body holds (:class:`~pipeline.model.usage.UsageSample`, issue 36); absent from
    the header, and so 0, in segments written before it."""

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
            "event_bytes": self.event_bytes,
            "keyframe_bytes": self.keyframe_bytes,
            "usage_samples": self.usage_samples or None,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


def header_to_wire(h: SegmentHeader) -> dict[str, Any]:
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
        **({} if h.event_bytes is None else {"sizes": [h.event_bytes, h.keyframe_bytes or 0]}),
        **({} if not h.usage_samples else {"usage": h.usage_samples}),
    }


def is_segment(data: bytes) -> bool:
    """Whether ``data`` starts like a kubetape segment."""
    return data[:4] == MAGIC


def split_header(data: bytes, source: str) -> tuple[SegmentHeader, int]:
    """The header and the offset where the body preamble starts."""
    if len(data) < PREAMBLE.size:
        raise FormatError(f"{source}: truncated: {len(data)} bytes, too short for a segment preamble")
    magic, version, header_len, header_crc = PREAMBLE.unpack_from(data)
    if magic != MAGIC:
        raise FormatError(f"{source}: not a kubetape segment (magic {magic!r}, expected {MAGIC!r})")
    if version not in READABLE_FORMAT_VERSIONS:
        raise UnknownVersionError(
            f"{source}: segment format version {version} is not supported (this build reads "
            f"versions {', '.join(map(str, READABLE_FORMAT_VERSIONS))}); upgrade kubetape to read it"
        )
    end = PREAMBLE.size + header_len
    if len(data) < end:
        raise FormatError(f"{source}: truncated header: needs {header_len} bytes, {len(data) - 14} present")
    header_bytes = data[PREAMBLE.size : end]
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
    sizes = raw.get("sizes")
    if version >= 3 and (type(sizes) is not list or len(sizes) != 2):
        raise FormatError("header has no declared sizes (a version-3 header has them)")
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
        event_bytes=None if sizes is None else _int(sizes[0], "event bytes", 0, _TIME_MAX),
        keyframe_bytes=None if sizes is None else _int(sizes[1], "keyframe bytes", 0, _TIME_MAX),
        usage_samples=_int(raw.get("usage", 0), "usage sample count", 0, _COUNT_MAX),
    )


def decode_segment_header(data: bytes, source: str = "segment") -> SegmentHeader:
    """Only the header (needs just the first bytes of the file); raises FormatError."""
    return split_header(data, source)[0]


def read_segment_header(path: Path) -> SegmentHeader:
    """The header of the segment file at ``path``, reading only its first bytes."""
    try:
        with path.open("rb") as f:
            prefix = f.read(PREAMBLE.size)
            if len(prefix) == PREAMBLE.size and prefix[:4] == MAGIC:
                prefix += f.read(PREAMBLE.unpack(prefix)[2])
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return decode_segment_header(prefix, str(path))
