"""The usage sink: ``kubetape.usage`` (the recorded load) into segments of the store's ``usage/`` sub-store.

A consumer-group member of its own (the sink's group with ``.usage``), beside the event sink in the same
service. Samples are few (one per tracked owner and template hash every 15 s), so the loop is simple:
each partition's samples gather until ``flush_every_s`` has passed (or ``max_samples``), then one segment
per partition is written (no events; its usage samples, the partition's offset range in the header) and
only then are the offsets committed: a crash re-reads what no durable segment holds. A sample delivered
twice is stored once per segment and read once by an export (see :mod:`pipeline.formats.usage_window`).

Usage segments are fenced as event segments are (:mod:`pipeline.store.segment_store`): each assignment
takes a new fencing epoch of the partition in the ``usage/`` sub-store (its own epochs), every write
claims it, and a write refused as stale (a newer member owns the partition) drops the partition here:
its open samples are forgotten and nothing more is written or committed for it until it is assigned
again (its new owner reads them again from the last commit).

On assignment each partition resumes after the last offset its segments hold, or the group's commit if
that is further (a range of nothing but other clusters' or undecodable records is committed without a
segment). A record of another cluster is skipped by its header; one that does not decode goes to the
dead-letter topic with the reason, counted and logged, and the rest goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import PartitionRange, decode_segment_header
from pipeline.formats.usage_window import usage_window
from pipeline.formats.wire.usage import decode_usage
from pipeline.io.kafka.headers import is_from_cluster
from pipeline.io.kafka.settings import USAGE_TOPIC
from pipeline.io.metrics import Metrics
from pipeline.model.errors import FormatError
from pipeline.model.keys import ClusterId
from pipeline.model.usage import UsageSample
from pipeline.sink.source import EventSource
from pipeline.store.segment_store import (
    SegmentStore,
    StaleWriterError,
    WriteFence,
    parse_segment_name,
    segment_name,
)

log = logging.getLogger("kubetape.sink.usage")

RETRY_S = 5.0
USAGE_GROUP_SUFFIX = ".usage"
"""The usage sink's consumer group is the event sink's with this suffix."""


@dataclass(slots=True)
class _Open:
    """One partition's samples not yet in a durable segment."""

    first_offset: int | None = None
    last_offset: int | None = None
    samples: list[UsageSample] = field(default_factory=list)


class UsageSink:
    def __init__(
        self,
        source: EventSource,
        store: SegmentStore,
        metrics: Metrics,
        *,
        cluster: ClusterId,
        flush_every_s: float = 60.0,
        max_samples: int = 20_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._store = store
        self._metrics = metrics
        self._cluster = cluster
        self._flush_every_s = flush_every_s
        self._max_samples = max_samples
        self._clock = clock
        self._open: dict[int, _Open] = {}
        self._epochs: dict[int, int] = {}  # partition → the fencing epoch this member writes under
        self._last_flush = clock()
        metrics.counter("usage_samples_stored_total", "usage samples written to the store")
        metrics.counter("usage_records_deadlettered_total", "kubetape.usage records that do not decode")
        metrics.counter("usage_store_errors_total", "rounds of the usage sink that failed (store or Kafka)")
        metrics.counter("usage_fenced_total", "usage partitions dropped after a stale write was refused")

    async def on_assigned(self, partitions: list[int]) -> None:
        # epochs first: a write of the previous owner either landed before (the listing below sees it)
        # or is refused after
        for p in partitions:
            self._epochs[p] = await asyncio.to_thread(self._store.acquire_epoch, p)
        stored: dict[int, int] = {}
        for entry in await asyncio.to_thread(self._store.list):
            parsed = parse_segment_name(entry.name)
            if parsed is not None and parsed[0] in partitions:
                stored[parsed[0]] = max(stored.get(parsed[0], 0), parsed[1])
        for p in partitions:
            # a segment's name holds its first offset; its header the last: read it for the newest only
            next_offset = await self._after_stored(p, stored.get(p))
            committed = await self._source.committed(p)
            await self._source.seek(p, max(next_offset, committed or 0))
            self._open[p] = _Open()

    async def on_revoked(self, partitions: list[int]) -> None:
        await self.flush([p for p in partitions if p in self._open])
        for p in partitions:
            self._open.pop(p, None)
            self._epochs.pop(p, None)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a store that does not answer: the samples stay open, nothing is committed
                self._metrics.inc("usage_store_errors_total")
                log.exception("storing usage failed; trying again in %.0fs", RETRY_S)
                await asyncio.sleep(RETRY_S)
        await self.flush(list(self._open))

    async def run_once(self, timeout_ms: int = 500) -> None:
        for batch in await self._source.getmany(timeout_ms, 5_000):
            state = self._open.get(batch.partition)
            if state is None:
                continue  # a partition this member was fenced out of: its new owner reads it

            for i, (offset, value) in enumerate(zip(batch.offsets, batch.values, strict=True)):
                if state.first_offset is None:
                    state.first_offset = offset
                state.last_offset = offset
                record = batch.records[i]
                if value is None or not is_from_cluster(record.headers, self._cluster):
                    continue  # another cluster's load (a fleet shares the topic): not this store's
                try:
                    state.samples.append(decode_usage(value, f"{USAGE_TOPIC}[{batch.partition}]@{offset}"))
                except FormatError as exc:
                    self._metrics.inc("usage_records_deadlettered_total")
                    log.warning("usage record set aside: %s", exc)
                    await self._source.dead_letter(batch.message(i), str(exc))
        due = self._clock() - self._last_flush >= self._flush_every_s
        if due or sum(len(o.samples) for o in self._open.values()) >= self._max_samples:
            await self.flush(list(self._open))

    async def flush(self, partitions: list[int]) -> None:
        """Write each partition's open samples as one segment, then commit past them."""
        commits: dict[int, int] = {}
        for p in partitions:
            state = self._open.get(p)
            if state is None or state.first_offset is None or state.last_offset is None:
                continue
            if state.samples:
                try:
                    await asyncio.to_thread(self._write, p, state)
                except StaleWriterError as exc:
                    self._fenced_out(p, exc)
                    continue
                self._metrics.inc("usage_samples_stored_total", len(state.samples))
            commits[p] = state.last_offset + 1
            self._open[p] = _Open()
        self._last_flush = self._clock()
        if commits and not await self._source.commit(commits):
            log.warning("committing usage offsets failed; they are committed with the next segments")

    def _fenced_out(self, partition: int, why: StaleWriterError) -> None:
        """A write of ``partition`` was refused as stale: a newer member owns it. Forget it here."""
        self._open.pop(partition, None)
        self._epochs.pop(partition, None)
        self._metrics.inc("usage_fenced_total")
        log.warning("usage partition %d dropped: this sink was fenced out of it (%s)", partition, why)

    def _write(self, partition: int, state: _Open) -> None:
        assert state.first_offset is not None
        assert state.last_offset is not None
        start = min(s.ts_ms for s in state.samples)
        end = max(s.ts_ms for s in state.samples) + 1
        segment = build_segment(
            [],
            start_ms=start,
            end_ms=end,
            partitions=[PartitionRange(USAGE_TOPIC, partition, state.first_offset, state.last_offset)],
            usage=usage_window(state.samples, start, end),  # one per owner, hash and time
        )
        epoch = self._epochs.get(partition)
        fence = None if epoch is None else WriteFence(partition, state.first_offset, state.last_offset, epoch)
        self._store.put(segment_name(partition, state.first_offset), encode_segment(segment), fence)

    async def _after_stored(self, partition: int, newest_first_offset: int | None) -> int:
        if newest_first_offset is None:
            return 0
        name = segment_name(partition, newest_first_offset)
        head = await asyncio.to_thread(self._store.head, name, 64 * 1024)
        header = decode_segment_header(head, self._store.describe(name))
        return max(r.last_offset for r in header.partitions) + 1
