"""kubetape segment files: a time range of events, sorted by event time, zstd-compressed.

A segment is what the sink writes for one partition range, and also the file format of an exported
kubetape trace (``kind = TRACE``, built by :mod:`pipeline.formats.assemble`). Layout (big-endian)::

    b"KTSG" | u16 format version | u32 header length | u32 header CRC-32 | header (msgpack map)
            | u32 body length    | u32 body CRC-32   | body (one zstd frame of a msgpack map)

The header is small and uncompressed so :func:`.header.decode_segment_header` can read time range,
partition offset ranges and counts without touching the body. The body holds the events, an optional
:class:`.content.Keyframe` (full state at a time T, so a replay can start there without reading older
history) and the tracer config. The events are stored per format version:

* version 2 (written): each event list is the concatenation of the events' own wire bytes (exactly
  :func:`~pipeline.formats.wire.codec.encode_event`'s output, i.e. the Kafka message values), so the sink
  writes what it consumed without decoding or re-encoding the object bodies (the sink's CPU per event
  fell 2.6x). The price is size: rows compress 6-25 % worse than columns (delta-coded times and the
  fields grouped by kind help zstd): 69.9 vs 65.7 bytes per event in ``bench/bench_sink.py``, 49.7
  (with the match settings of :mod:`.encode`; 50.9 before them) vs 42.9 in ``bench/bench_codec.py``;
* version 1 (still read; written on request): column by column, see :mod:`pipeline.formats.columns`.

Invariants checked on encode and on decode: events sorted by ``ts_ms`` and inside
``[start_ms, end_ms)``, keyframe at or before ``start_ms``, header counts equal to the body's.
Decoding corrupt, truncated or unknown-version bytes raises
:class:`~pipeline.model.errors.FormatError` / ``UnknownVersionError`` naming the source and the problem.

One concept a module:

* :mod:`.header` — the file preamble and the header (what a segment covers: kind, time range,
  partition offsets, counts), written and read without the body;
* :mod:`.content` — what a segment holds (:class:`~.content.Segment`, its
  :class:`~.content.Keyframe`, the sink's :class:`~.content.WireSegment`), built consistent and checked;
  gap markers are segments of kind ``GAP``;
* :mod:`.encode` — the file bytes (zstd settings, the version-2 and version-1 bodies);
* :mod:`.decode` — reading them back, with the wire bytes of each event kept on request;
* :mod:`.limits` — what a decoder accepts before it inflates a body or rebuilds its events.
"""
