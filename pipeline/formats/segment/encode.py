"""The file bytes of a segment: the preamble, the header and one zstd frame of the body.

Version 3 bodies hold the events delta-coded (:mod:`.delta`) and the keyframe's lists in the same
columns (one row per object: whole); version 2 (written on request) the events as wire bytes; version 1
(written on request) column by column (:mod:`pipeline.formats.columns`).
"""

from __future__ import annotations

import dataclasses
import gc
import zlib
from collections.abc import Iterable
from typing import Any

import msgpack
import zstandard

from pipeline.formats.columns import events_to_columns
from pipeline.formats.segment import delta
from pipeline.formats.segment.content import Segment, WireSegment, consistency_problem
from pipeline.formats.segment.decode import EventWires
from pipeline.formats.segment.header import (
    BODY_PREAMBLE,
    DEFAULT_WRITE_VERSION,
    MAGIC,
    PREAMBLE,
    SEGMENT_FORMAT_VERSION,
    SegmentHeader,
    header_to_wire,
)
from pipeline.formats.wire.codec import encode_event, event_to_wire
from pipeline.model.errors import FormatError
from pipeline.model.events import Event

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


def encode_segment(
    seg: Segment,
    level: int = ZSTD_LEVEL,
    *,
    format_version: int = DEFAULT_WRITE_VERSION,
    wires: EventWires | None = None,
) -> bytes:
    """The file bytes of ``seg`` (raises FormatError if it is inconsistent; see
    :func:`~.content.build_segment`).

    ``format_version`` 2 (wire rows) or 1 (columns) writes an older layout (for readers not upgraded
    yet, and tests).
    ``wires``: bytes of events decoded earlier (see :func:`~.decode.decode_segment`), written as they
    are."""
    problem = consistency_problem(seg)
    if problem:
        raise FormatError(f"refusing to encode an inconsistent segment: {problem}")
    kf = seg.keyframe
    header = dataclasses.replace(seg.header, format_version=format_version)
    if format_version == 1:
        if kf is not None and kf.tombstones:
            raise ValueError("segment format version 1 cannot hold keyframe tombstones")
        if seg.usage:
            raise ValueError("segment format version 1 cannot hold usage samples")
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
    if format_version not in (2, SEGMENT_FORMAT_VERSION):
        raise ValueError(f"cannot write segment format version {format_version}")
    wire = WireSegment(
        header,
        concatenated_wires(seg.events, wires),
        b"" if kf is None else concatenated_wires(kf.objects.values()),
        b"" if kf is None else concatenated_wires(kf.lifecycles.values()),
        b"" if kf is None else concatenated_wires(kf.tombstones.values()),
        config=seg.config,
        usage=seg.usage,
    )
    return encode_wire_segment(wire, level, format_version=format_version)


def concatenated_wires(events: Iterable[Event], known: EventWires | None = None) -> bytes:
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


def encode_wire_segment(
    seg: WireSegment, level: int = ZSTD_LEVEL, *, format_version: int = DEFAULT_WRITE_VERSION
) -> bytes:
    """The file bytes of a segment built by :func:`~.content.build_wire_segment` (version 3, or 2 on
    request)."""
    h = dataclasses.replace(seg.header, usage_samples=len(seg.usage))
    events: dict[str, bytes] = {"events": seg.events}
    if format_version == SEGMENT_FORMAT_VERSION:
        table = _packed_table(seg.events, h.counts.total, h.start_ms)
        if table is not None:
            # a bin of its own: the body's outer map stays small and a reader bounds its parse tightly
            events = {"delta": table}
        keyframe_bytes = (
            len(seg.keyframe_objects) + len(seg.keyframe_lifecycles) + len(seg.keyframe_tombstones)
        )
        h = dataclasses.replace(
            h, format_version=format_version, event_bytes=len(seg.events), keyframe_bytes=keyframe_bytes
        )
    elif format_version == 2:
        h = dataclasses.replace(h, format_version=format_version, event_bytes=None, keyframe_bytes=None)
    else:
        raise ValueError(f"cannot write wire segments in format version {format_version}")
    keyframe: dict[str, Any] | None = None
    if h.keyframe_at_ms is not None:
        keyframe = {"at_ms": h.keyframe_at_ms}
        lists = [("objects", seg.keyframe_objects, h.keyframe_objects)]
        lists.append(("lifecycles", seg.keyframe_lifecycles, h.keyframe_lifecycles))
        if h.keyframe_tombstones:
            lists.append(("tombstones", seg.keyframe_tombstones, h.keyframe_tombstones))
        for name, blob, count in lists:
            # Version 3 codes a keyframe's lists as the events (one row per key, so no row has a base:
            # every object stays whole), for the columns: binary UIDs, times as steps, keys apart.
            table = _packed_table(blob, count, h.keyframe_at_ms) if h.format_version == 3 else None
            if table is None:
                keyframe[name] = blob
            else:
                keyframe[f"{name}_delta"] = table
    body = {
        **events,
        "keyframe": keyframe,
        "config": seg.config.to_mapping() if seg.config is not None else None,
    }
    if seg.usage:  # a bin of its own, as the events: the outer map stays small (see decode)
        body["usage"] = msgpack.packb([s.to_wire() for s in seg.usage], use_bin_type=True)
    return _file_bytes(h, body, level)


def _packed_table(blob: bytes, count: int, start_ms: int) -> bytes | None:
    """The msgpack bytes of :func:`.delta.encode_events`'s table, or None. The cyclic GC stays paused
    until the table is packed and gone: its many small containers all live until then, and a
    collection on the way (one is due as soon as the GC is back on) would only walk them; the table is
    freed when this returns, before any allocation after the GC is back on."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        table = delta.encode_events(blob, count, start_ms)
        return None if table is None else msgpack.packb(table, use_bin_type=True)
    finally:
        if gc_was_enabled:
            gc.enable()


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
    header = msgpack.packb(header_to_wire(h), use_bin_type=True)
    return b"".join(
        (
            PREAMBLE.pack(MAGIC, h.format_version, len(header), zlib.crc32(header)),
            header,
            BODY_PREAMBLE.pack(len(compressed), zlib.crc32(compressed)),
            compressed,
        )
    )
