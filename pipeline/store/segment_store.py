"""Where the sink keeps its segment files: the store protocol, segment names and the fencing rules.

The stores: a local directory (:mod:`pipeline.store.local_store`), an object store
(:mod:`pipeline.store.s3_store`), and memory for tests (:mod:`pipeline.store.memory_store`).

Segment names are deterministic from partition and first offset (``p0003-000000000123456.kseg``), so a
segment rewritten after a crash lands on the same name. A put is atomic and durable (the local store:
temp file in the same directory, fsync, rename, fsync of the directory). A reader therefore sees either
the old complete file or the new complete file.

**Fencing.** Kafka hands a partition to a new group member while an evicted one may still be running
(it missed its heartbeats, it is paused, its network is cut): both can write the same partition. The
store, the source of truth, fences writers itself, with two rules checked atomically with the rename:

1. *Epochs.* A sink takes a partition with :meth:`SegmentStore.acquire_epoch`, which raises the
   partition's epoch in the store and returns it; each segment it writes carries that epoch
   (:class:`WriteFence`, also recorded in the segment's header). A write under an older epoch than the
   partition's current one is refused with :class:`StaleWriterError` and a log line naming both epochs:
   the writer was fenced out by a newer owner. The epoch is the store's own counter rather than
   Kafka's group generation, because a generation restarts when the group is deleted or renamed and
   is not known to tools, while the store's counter only grows, whoever writes.
2. *Never less.* A write never replaces a segment with one covering fewer offsets (a stale writer's
   shorter segment under the same name as a newer, longer one); an unreadable file may be replaced.

What an older writer may still add (before the new owner took the epoch) covers offsets of the same
topic, so it overlaps what the new owner writes and readers take each offset once
(:mod:`pipeline.store.catalog`): overlaps cost space, never data. This needs the lock to be shared by
every writer: a local directory uses ``flock`` on ``.lock`` (one host, or one volume mounted by one
pod); an object store uses conditional writes (``If-Match`` on an epoch object, ``If-None-Match`` on
segments: :mod:`pipeline.store.s3_store`).

The store also records the identity of the topic it was filled from (:meth:`SegmentStore.claim_source`),
so a sink pointed at another or a recreated topic refuses to start instead of mixing histories.

An object store (S3, GCS) fits the same protocol: ``put`` is one PUT (atomic by nature), ``head`` a
ranged GET of the first bytes, ``stat`` the object's size and ETag/mtime.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import NewType, Protocol

from pipeline.formats.segment.header import decode_segment_header
from pipeline.model.errors import FormatError, TransientError

log = logging.getLogger("kubetape.sink")

SegmentName = NewType("SegmentName", str)
"""A segment file name, ``p{partition:04d}-{first_offset:015d}.kseg``."""

SEGMENT_SUFFIX = ".kseg"
_NAME_RE = re.compile(r"^p(\d{4,})-(\d{15,})\.kseg$")


def segment_name(partition: int, first_offset: int) -> SegmentName:
    """The deterministic name of the segment of ``partition`` starting at ``first_offset``."""
    if partition < 0 or first_offset < 0:
        raise ValueError(f"partition and offset must be non-negative, got {partition}, {first_offset}")
    return SegmentName(f"p{partition:04d}-{first_offset:015d}{SEGMENT_SUFFIX}")


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(partition, first_offset)`` of a segment name, or None for any other file (temp files, notes)."""
    match = _NAME_RE.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True, slots=True)
class StoredSegment:
    """A segment as listed by the store; ``version`` changes whenever the bytes may have changed."""

    name: SegmentName
    size: int
    version: str


@dataclass(frozen=True, slots=True)
class WriteFence:
    """What a fenced write claims: ``partition`` offsets ``first_offset``..``last_offset`` (inclusive),
    written under the partition's fencing ``epoch`` (see the module docstring)."""

    partition: int
    first_offset: int
    last_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class IndexLayout:
    """How a store that keeps an index (:mod:`pipeline.store.segment_index`) buckets it: writers and
    readers of one store must agree, so it is fixed per store kind, not configured."""

    bucket_ms: int = 3_600_000
    """Width of a ``start/`` bucket: an hour, so a one-hour export lists a few of them."""
    late_slack_ms: int = 3_600_000
    """A segment starting more than this before its partition's high water is listed as late."""

    def bucket(self, ts_ms: int) -> int:
        return max(ts_ms, 0) // self.bucket_ms


class MissingSegmentError(FormatError):
    """The segment is not in the store (deleted by retention meanwhile, or an index marker without its
    segment): readers that found its name somewhere other than a listing skip it."""


class StaleWriterError(TransientError):
    """A fenced write was refused: a newer owner holds the partition, or the write would replace a
    segment with less. The writer must drop the partition (its new owner carries on)."""


STORE_META = "kubetape-store.json"
"""The store's own record: the topic identity it was filled from and each partition's fencing epoch."""


class SegmentStore(Protocol):
    """The seam between the sink/export logic and where segment bytes live."""

    def put(self, name: SegmentName, data: bytes, fence: WriteFence | None = None) -> None:
        """Store ``data`` under ``name`` atomically and durably (replacing any earlier copy). With a
        ``fence``, refuse (:class:`StaleWriterError`) a write under an epoch older than the partition's
        or one that would replace a segment covering more offsets."""

    def acquire_epoch(self, partition: int) -> int:
        """Raise ``partition``'s fencing epoch and return it: writes under older epochs are refused."""

    def claim_source(self, identity: str) -> str:
        """Record ``identity`` as the topic this store is filled from if none is recorded yet; return
        the recorded one (the caller refuses to go on when it differs)."""

    def get(self, name: SegmentName) -> bytes:
        """The bytes of ``name``; raises FormatError if it cannot be read."""

    def head(self, name: SegmentName, size: int) -> bytes:
        """Up to the first ``size`` bytes of ``name`` (enough to decode a segment header)."""

    def list(self) -> list[StoredSegment]:
        """Every segment in the store (other files are ignored), sorted by name."""

    def delete(self, name: SegmentName) -> None:
        """Remove ``name`` (no error if it is already gone)."""

    def describe(self, name: SegmentName) -> str:
        """Where ``name`` lives, for messages (a path or URL)."""

    def check(self) -> None:
        """Raise (TransientError, ConfigError) unless the store can be written now (readiness)."""


def check_fence(
    name: SegmentName, fence: WriteFence, meta: dict[str, object], existing: bytes | None, where: str
) -> None:
    """The two fencing rules of the module docstring; raises StaleWriterError (and logs why)."""
    epochs = meta.get("epochs")
    current = int(epochs.get(str(fence.partition), 0)) if isinstance(epochs, dict) else 0
    reason = None
    if fence.epoch < current:
        reason = (
            f"written under fencing epoch {fence.epoch}, but epoch {current} owns partition "
            f"{fence.partition} since: this sink lost the partition to a newer owner (rebalance)"
        )
    elif existing is not None:
        try:
            header = decode_segment_header(existing, where)
        except FormatError:
            header = None  # an unreadable file holds nothing to keep
        if header is not None and header.partitions:
            held = header.partitions[0]
            if held.last_offset > fence.last_offset:
                reason = (
                    f"would replace offsets {held.first_offset}..{held.last_offset} with "
                    f"{fence.first_offset}..{fence.last_offset}: a write never replaces a segment with less"
                )
    if reason is not None:
        log.warning(
            "stale segment write refused",
            extra={
                "ctx": {"segment": where, "epoch": fence.epoch, "partition_epoch": current, "why": reason}
            },
        )
        raise StaleWriterError(f"{where}: refused: {reason}")
