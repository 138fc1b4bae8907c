"""How the sink batches, compresses and bounds its durable writes."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.formats.segment.header import DEFAULT_WRITE_VERSION
from pipeline.sink.compactor import CompactionSettings


@dataclass(frozen=True, slots=True)
class SinkSettings:
    """``compaction``: segment rules; ``batch_max_records`` / ``poll_timeout_ms``: ``getmany`` limits;
    ``zstd_level``: segment compression (3 is several times faster than the codec default and close
    in size on this data); ``write_concurrency``: segments encoded and fsynced at once (4);
    ``max_pending_writes``: closed segments waiting to become durable before consuming pauses (64);
    ``segment_format``: the segment format version written (2, events whole; 3 delta-codes them, at
    several times the writer threads' CPU: see
    :data:`~pipeline.formats.segment.header.DEFAULT_WRITE_VERSION`; readers take both, mixed in one store).
    Durable writes are bound by fsync latency (2-3 ms each here), not CPU, so consuming goes on while
    they complete; the bound keeps memory in check when the disk is slower than the topic."""

    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    batch_max_records: int = 10_000
    poll_timeout_ms: int = 500
    zstd_level: int = 3
    write_concurrency: int = 4
    max_pending_writes: int = 64
    segment_format: int = DEFAULT_WRITE_VERSION
