"""The sink: consume ``kubetape.events`` in batches, compact per partition, write durably, then commit.

Written against two seams, :class:`EventSource` (the Kafka consumer group, see
:mod:`pipeline.io.kafka.sink_member`) and :class:`~pipeline.store.segment_store.SegmentStore`, so the loop
runs in unit tests against in-memory fakes. The order inside one round is what makes the effect exactly-once:

1. ``getmany`` a batch; check each message (undecodable ones go to the dead-letter topic first);
2. feed the per-partition compactors; close segments on window end, size, or idleness;
3. write every closed segment (temp, fsync, rename) and only then commit, per partition, the first
   offset not yet inside a durable segment.

A crash anywhere re-reads what the store lacks; offsets already inside a durable segment are skipped
(the compactor is restored from the store on assignment), the rest is rebuilt identically.

The store is the source of truth, reconciled with the topic on every assignment:

* dead letters are at least once: a message refused and set aside is met again only by a member that
  re-reads below the commit covering it (a rebalance whose commit failed, a crash); below the offset
  the group had committed it is known to be set aside already and is skipped;
* the sink resumes each partition at the store's next offset, whatever the group committed (a new or
  wiped store is filled again from the topic instead of silently starting at the group's offset);
* where the topic no longer holds what the store lacks (its retention deleted it meanwhile), the sink
  writes a gap marker for those offsets, which exports and replays report, and goes on after them;
* where the topic is not the one the store was filled from (another cluster, another topic id: deleted
  and re-created, or the topic ends below what the store holds), the sink refuses to start with
  :class:`TopicIdentityError`;
* each assignment takes a new fencing epoch in the store; a write refused as stale (see
  :mod:`pipeline.store.segment_store`) drops the partition from this member, which lost it.

Fleets: a sink records one cluster (``cluster``) into that cluster's sub-store
(:func:`pipeline.store.store_url.cluster_store_location`), with a consumer group of its own. Other
clusters' messages are told apart by their Kafka header alone: never scanned or decoded, they pass like
dead letters (consumed, not stored). Its store's topic identity and every segment's ``source`` name the
cluster, so a segment knows which cluster it holds. With ``skip_other_clusters`` False (a sink whose
cluster nobody named: the topic's only one, see :mod:`pipeline.sink.service`) a message of another
cluster stops the sink instead, naming the cluster to pass (never a silent merge, never a silent skip).

Throughput: each partition's batch is checked and folded into the compactor's state by the C code of
:mod:`pipeline.formats.wire.native` (object bodies are walked, never built), and the message bytes go into
the segment as they are. Whatever that code leaves undecided goes through the Python rules
(:class:`~pipeline.formats.wire.probe.WireProbe`, :class:`~pipeline.store.state.ObjectState`), which are the
definition of both. Per message in Python the same work cost 10x more (``bench/bench_sink.py``).
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Callable, Iterable

from pipeline.formats.segment.content import build_gap_marker
from pipeline.formats.segment.encode import encode_wire_segment
from pipeline.formats.segment.header import PartitionRange
from pipeline.formats.wire import native
from pipeline.formats.wire.probe import EventHead, WireProbe
from pipeline.io.kafka.headers import cluster_header, cluster_named, is_from_cluster
from pipeline.io.kafka.message import Message, PartitionBatch
from pipeline.io.metrics import Metrics
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId
from pipeline.sink.compactor import ClosedSegment, PartitionCompactor
from pipeline.sink.restore import restore_partition
from pipeline.sink.settings import SinkSettings
from pipeline.sink.source import EventSource, TopicIdentityError
from pipeline.sink.writer import SegmentWriter, WrittenSegment
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.index_backfill import ensure_index
from pipeline.store.segment_index import SegmentFacts, index_segment
from pipeline.store.segment_store import SegmentStore, StaleWriterError, WriteFence, segment_name

log = logging.getLogger("kubetape.sink")
_headers = operator.attrgetter("headers")

Clock = Callable[[], float]


def _without_topic_id(identity: str) -> str:
    """The identity as stores filled before topic ids recorded it (``kafka:<cluster>/<topic>``, then any
    ``#cluster=``): such a store goes on, without the check of a re-created topic."""
    head, sep, tail = identity.partition("#")
    return head.rsplit("@", 1)[0] + sep + tail


def declare_metrics(metrics: Metrics) -> None:
    # Values are passed as floats: Metrics.render relies on float.is_integer (ints lack it on 3.11).
    metrics.counter("sink_messages_total", "Messages consumed from the events topic")
    metrics.counter("sink_events_stored_total", "Events written into durable segments")
    metrics.counter("sink_duplicates_total", "Events dropped as duplicates (redelivery or re-list)")
    metrics.counter("sink_deadletter_total", "Undecodable messages sent to the dead-letter topic")
    metrics.counter("sink_segments_written_total", "Segments written durably")
    metrics.counter("sink_segment_bytes_total", "Bytes of segments written")
    metrics.counter("sink_commits_total", "Offset commits after durable writes")
    metrics.gauge("sink_assigned_partitions", "Partitions currently assigned to this sink")
    metrics.gauge("sink_open_segments", "Segments open (not yet durable)")
    metrics.counter("sink_gap_markers_total", "Gap markers written: offsets the topic no longer held")
    metrics.counter("sink_fenced_total", "Partitions dropped after a stale write was refused")
    metrics.counter("sink_other_cluster_messages_total", "Messages of other clusters, skipped unread")


class Sink:
    """Compacts the partitions assigned to this member of the sink group into the segment store."""

    def __init__(
        self,
        source: EventSource,
        store: SegmentStore,
        settings: SinkSettings,
        metrics: Metrics | None = None,
        clock: Clock = time.monotonic,
        *,
        cluster: ClusterId = DEFAULT_CLUSTER,
        skip_other_clusters: bool = True,
    ) -> None:
        self.source = source
        self.cluster = cluster
        self._skip_other_clusters = skip_other_clusters
        # the headers its watcher writes, as aiokafka delivers them (a tuple): one C comparison a message
        self._own_headers = tuple(cluster_header(self.cluster))
        self._other_clusters: set[str] = set()  # header values of other clusters met so far (logged once)
        self.store = store
        self.settings = settings
        self.metrics = metrics or Metrics()
        declare_metrics(self.metrics)
        self.clock = clock
        self.catalog = SegmentCatalog(store)
        self.compactors: dict[int, PartitionCompactor] = {}
        self._committed: dict[int, int] = {}
        self._committed_at_assignment: dict[int, int] = {}
        """Per partition, what the group had committed when this member got it: messages below it were
        handled already, dead letters included."""
        self._lock = asyncio.Lock()  # rounds and rebalance callbacks must not interleave
        self._in_flight: list[tuple[asyncio.Future[WrittenSegment], ClosedSegment]] = []
        self._commit_task: asyncio.Task[None] | None = None
        self._writer = SegmentWriter(
            store, settings.zstd_level, settings.write_concurrency, format_version=settings.segment_format
        )
        self._probe = WireProbe()
        self._fatal: BaseException | None = None

    # ---- rebalance -------------------------------------------------------------------------------
    async def on_assigned(self, partitions: Iterable[int]) -> None:
        """Restore each partition from the store and skip what is already durable.

        Kafka's eager rebalance revokes everything first and restarts every assigned partition at its
        committed offset, so each one is restored afresh, even one this member owned before."""
        async with self._lock:
            try:
                await self._assign(partitions)
            except TopicIdentityError as exc:
                # Kafka's rebalance callbacks cannot stop the consumer: the loop raises it instead.
                log.error("the sink refuses to start", extra={"ctx": {"error": str(exc)}})
                self._fatal = exc
                raise

    async def _assign(self, partitions: Iterable[int]) -> None:
        partitions = sorted(partitions)
        # Epochs first: a write of the previous owner either landed before (the refresh below sees it)
        # or is refused (it cannot replace what this member writes from the restored state).
        epochs = {p: await asyncio.to_thread(self.store.acquire_epoch, p) for p in partitions}
        self.catalog.refresh()
        await asyncio.to_thread(ensure_index, self.catalog)
        identity = await self.source.identity()
        if identity is not None and self.cluster != DEFAULT_CLUSTER:
            identity = f"{identity}#cluster={self.cluster}"
        if identity is not None:
            recorded = await asyncio.to_thread(self.store.claim_source, identity)
            if recorded != identity and recorded != _without_topic_id(identity):
                raise TopicIdentityError(
                    f"the segment store was filled from {recorded}, but this sink reads {identity}: another "
                    "Kafka cluster, or the topic was recreated. Start this sink with a new --segment-dir "
                    "(keep the old one for exports of its past), or point it at the topic it recorded"
                )
        for p in partitions:
            epoch = epochs[p]
            compactor = await asyncio.to_thread(
                restore_partition, self.catalog, p, self.settings.compaction, source=identity, epoch=epoch
            )
            committed = await self.source.committed(p)
            log_start, log_end = await self.source.offset_bounds(p)
            store_next = compactor.next_offset
            if store_next > log_end:
                raise TopicIdentityError(
                    f"partition {p}: the segment store holds offsets up to {store_next - 1} of "
                    f"{identity or self.settings.compaction.topic}, but the topic ends at offset {log_end}: "
                    "it was recreated or truncated. Start this sink with a new --segment-dir (keep the old "
                    "one for exports of its past)"
                )
            if store_next < log_start:
                await self._write_gap(compactor, log_start)
            self.compactors[p] = compactor
            self._committed[p] = committed if committed is not None else -1
            self._committed_at_assignment[p] = self._committed[p]
            # The store is the source of truth: resume where it ends, whatever the group committed.
            await self.source.seek(p, compactor.next_offset)
            log.info(
                "partition assigned",
                extra={
                    "ctx": {
                        "partition": p,
                        "committed": committed,
                        "store_next_offset": compactor.next_offset,
                        "epoch": epoch,
                    }
                },
            )
        self.metrics.set("sink_assigned_partitions", float(len(self.compactors)))

    async def _write_gap(self, compactor: PartitionCompactor, log_start: int) -> None:
        """Record that offsets ``compactor.next_offset`` .. ``log_start - 1`` are gone from the topic
        before the store got them, and continue after them."""
        first, p = compactor.next_offset, compactor.partition
        topic = self.settings.compaction.topic
        epoch = compactor.epoch
        marker = build_gap_marker(
            PartitionRange(topic, p, first, log_start - 1),
            start_ms=compactor.max_ts + 1,
            end_ms=int(time.time() * 1000),
            reason="the topic's retention deleted them before the store got them",
            source=compactor.source,
            writer_epoch=epoch,
        )
        fence = None if epoch is None else WriteFence(p, first, log_start - 1, epoch)
        name = segment_name(p, first)
        facts = SegmentFacts(name, p, first, marker.header, compactor.max_ts, None)
        await asyncio.to_thread(index_segment, self.store, facts)
        await asyncio.to_thread(self.store.put, name, encode_wire_segment(marker), fence)
        compactor.next_offset = log_start
        self.metrics.inc("sink_gap_markers_total")
        log.warning(
            "gap marker written: offsets lost before the store got them",
            extra={"ctx": {"partition": p, "first_offset": first, "last_offset": log_start - 1}},
        )

    async def on_revoked(self, partitions: Iterable[int]) -> None:
        """Flush the open segments of partitions leaving this member, commit them, forget them."""
        async with self._lock:
            revoked = [p for p in partitions if p in self.compactors]
            self._in_flight = [(w, c) for w, c in self._in_flight if c.partition in self.compactors]
            closed = [c for p in revoked if (c := self.compactors[p].flush()) is not None]
            try:
                await self._write(closed)
                await self._commit(revoked)
            finally:
                # Whatever happened, these partitions are no longer ours: forget them.
                for p in revoked:
                    del self.compactors[p]
                    self._committed.pop(p, None)
            self.metrics.set("sink_assigned_partitions", float(len(self.compactors)))
            log.info(
                "partitions revoked", extra={"ctx": {"partitions": revoked, "flushed_segments": len(closed)}}
            )

    # ---- the loop --------------------------------------------------------------------------------
    async def run_round(self) -> int:
        """One batch: consume, compact, write, commit. Returns the number of messages consumed."""
        if self._fatal is not None:
            raise self._fatal
        batches = await self.source.getmany(self.settings.poll_timeout_ms, self.settings.batch_max_records)
        if self._fatal is not None:
            raise self._fatal
        async with self._lock:
            closed: list[ClosedSegment] = []
            now = self.clock()
            duplicates_before = self._duplicates()
            consumed = 0
            for batch in batches:
                consumed += len(batch.offsets)
                compactor = self.compactors.get(batch.partition)
                if compactor is None:  # revoked between fetch and processing: the new owner reads it
                    continue
                closed += compactor.add_batch(batch.offsets, await self._heads(batch), now)
            for compactor in self.compactors.values():
                idle = compactor.close_if_idle(now)
                if idle is not None:
                    closed.append(idle)
            self.metrics.inc("sink_messages_total", float(consumed))
            self.metrics.inc("sink_duplicates_total", float(self._duplicates() - duplicates_before))
            self._start_writes(closed)
            await self._reap()
            await self._commit(list(self.compactors), wait=False)
            self.metrics.set(
                "sink_open_segments", float(sum(c.has_open_segment for c in self.compactors.values()))
            )
        return consumed

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds until ``stop`` is set, then flush everything open and commit (graceful shutdown)."""
        while not stop.is_set():
            await self.run_round()
        await self.flush_all()

    def close(self) -> None:
        """Stop the writer threads (after :meth:`flush_all`, nothing is left to write)."""
        self._writer.close()

    async def flush_all(self) -> None:
        async with self._lock:
            closed = [c for comp in self.compactors.values() if (c := comp.flush()) is not None]
            await self._write(closed)
            await self._commit(list(self.compactors))
            self.metrics.set("sink_open_segments", 0.0)

    def _duplicates(self) -> int:
        return sum(c.duplicates for c in self.compactors.values())

    async def _heads(self, batch: PartitionBatch) -> list[EventHead | None]:
        """Each message's checked head (None once it is in the dead-letter topic): the C scanner
        takes the common cases, the probe decides the rest (and names what is wrong)."""
        others = self._other_clusters_in(batch)
        values = [None if i in others else v for i, v in enumerate(batch.values)] if others else batch.values
        heads, undecided = native.scan(values)
        for i in undecided:
            if i in others:
                continue  # another cluster's message: this sink does not record it
            value = values[i]
            try:
                # a None value fails as undecodable; _dead_letter then says it had no value
                heads[i] = self._probe.head(value)  # type: ignore[arg-type]
            except FormatError:
                await self._dead_letter(batch.message(i))
        return heads

    def _other_clusters_in(self, batch: PartitionBatch) -> set[int]:
        """Indices of ``batch``'s messages from other clusters than this sink's (by header only)."""
        mine, own = self.cluster, self._own_headers
        if list(map(_headers, batch.records)).count(own) == len(batch.records):
            return set()  # every message is this sink's cluster's (the rule below, all in C)
        others = {
            i
            for i, r in enumerate(batch.records)
            if r.headers != own and not is_from_cluster(r.headers, mine)
        }
        if others and not self._skip_other_clusters:
            met = sorted({cluster_named(batch.records[i].headers) for i in others})
            self._fatal = ConfigError(
                f"topic {self.settings.compaction.topic} p{batch.partition} holds messages of the "
                f"cluster(s) {', '.join(met)} besides {self.cluster} (a watcher's --cluster-id, by default "
                f"its kube-system namespace UID): a sink records one cluster; start it with --cluster "
                f"{met[0]} (one sink per cluster)"
            )
            raise self._fatal
        if others:
            self.metrics.inc("sink_other_cluster_messages_total", float(len(others)))
            # a watcher writes the same headers on every record: name each distinct set once
            for seen in {cluster_named(h) for h in {tuple(batch.records[i].headers) for i in others}}:
                if seen not in self._other_clusters:
                    self._other_clusters.add(seen)
                    log.warning(
                        "messages of another cluster are skipped: a sink records one cluster; run one "
                        "with --cluster for it",
                        extra={"ctx": {"cluster": self.cluster, "other": seen}},
                    )
        return others

    async def _dead_letter(self, message: Message) -> None:
        """Send a message the probe refused to the dead-letter topic, with the error naming where it was."""
        where = f"topic {self.settings.compaction.topic} p{message.partition} @{message.offset}"
        if message.offset < self._committed_at_assignment.get(message.partition, -1):
            # Below the offset the group had committed: this message was set aside before (offsets are
            # committed only once a refused message is in the dead-letter topic). The store holds only
            # segments, so after a rebalance the sink re-reads from the store's end and meets it again.
            log.info(
                "refused message already in the dead-letter topic (below the committed offset)",
                extra={"ctx": {"partition": message.partition, "offset": message.offset}},
            )
            return
        try:
            if message.value is None:
                raise FormatError(f"{where}: message has no value")
            self._probe.head(message.value, where)  # raises again, now naming the message
            raise AssertionError("the probe accepted a message it refused")  # pragma: no cover
        except FormatError as exc:
            await self.source.dead_letter(message, str(exc))
            self.metrics.inc("sink_deadletter_total")
            log.warning(
                "undecodable message sent to the dead-letter topic",
                extra={"ctx": {"partition": message.partition, "offset": message.offset, "error": str(exc)}},
            )
            return

    def _start_writes(self, closed: list[ClosedSegment]) -> None:
        """Start writing ``closed`` in the background; the next batch is decoded meanwhile. Offsets are
        committed only below the first segment still in flight (see :meth:`_commit`)."""
        for c in closed:
            self._in_flight.append((asyncio.wrap_future(self._writer.submit(c)), c))

    async def _reap(self, *, wait_all: bool = False) -> None:
        """Collect finished writes (raising the first failure); wait while too many are in flight."""
        limit = 0 if wait_all else self.settings.max_pending_writes
        while len(self._in_flight) > limit:
            await asyncio.wait([self._in_flight[0][0]])
            self._collect_done()
        self._collect_done()

    def _collect_done(self) -> None:
        still = []
        fenced: dict[int, BaseException] = {}
        for write, c in self._in_flight:
            if not write.done():
                still.append((write, c))
            elif c.partition in fenced:
                continue  # later segments of a partition this member lost
            elif isinstance(write.exception(), StaleWriterError):
                fenced[c.partition] = write.exception()  # type: ignore[assignment]
            else:
                # any other failed write stops the sink before anything after it is committed
                self._written(write.result())
        self._in_flight = [(w, c) for w, c in still if c.partition not in fenced]
        for p, why in fenced.items():
            self._fenced_out(p, why)

    def _fenced_out(self, partition: int, why: BaseException) -> None:
        """A write of ``partition`` was refused as stale: a newer owner has it. Forget it (nothing more
        is written or committed for it here); the group moves it away from this member."""
        self.compactors.pop(partition, None)
        self._committed.pop(partition, None)
        self.metrics.inc("sink_fenced_total")
        self.metrics.set("sink_assigned_partitions", float(len(self.compactors)))
        log.warning(
            "partition dropped: this sink was fenced out of it",
            extra={"ctx": {"partition": partition, "error": str(why)}},
        )

    def _written(self, written: WrittenSegment) -> None:
        c = written.segment
        self.metrics.inc("sink_segments_written_total")
        self.metrics.inc("sink_segment_bytes_total", float(written.size))
        self.metrics.inc("sink_events_stored_total", float(c.wire.header.counts.total))
        log.info(
            "segment written",
            extra={
                "ctx": {
                    "segment": c.name,
                    "partition": c.partition,
                    "events": c.wire.header.counts.total,
                    "bytes": written.size,
                    "keyframe": c.wire.header.keyframe_at_ms is not None,
                }
            },
        )

    async def _write(self, closed: list[ClosedSegment]) -> None:
        """Write ``closed`` and wait until everything in flight is durable."""
        self._start_writes(closed)
        await self._reap(wait_all=True)

    async def _commit(self, partitions: Iterable[int], *, wait: bool = True) -> None:
        """Commit, per partition, the first offset not yet inside a durable segment.

        ``wait=False`` (the consuming loop) sends the commit in the background, at most one at a time:
        a commit is a broker round trip (5 ms here) that nothing in the loop needs to wait for, and
        the next round commits whatever advanced meanwhile. Rebalances and shutdown wait for it."""
        if self._commit_task is not None:
            if not wait and not self._commit_task.done():
                return
            task, self._commit_task = self._commit_task, None
            await task  # a failure other than a refused commit (those return False) is raised here
        offsets = {}
        for p in partitions:
            if p not in self.compactors:
                continue  # fenced out meanwhile
            offset = min(
                [self.compactors[p].committable_offset]
                + [c.first_offset for _, c in self._in_flight if c.partition == p]
            )
            if offset > self._committed.get(p, -1):
                offsets[p] = offset
        if not offsets:
            return
        if wait:
            await self._send_commit(offsets)
        else:
            self._commit_task = asyncio.create_task(self._send_commit(offsets), name="sink-commit")

    async def _send_commit(self, offsets: dict[int, int]) -> None:
        if await self.source.commit(offsets):
            # partitions revoked meanwhile are no longer ours: their next owner tracks them
            self._committed.update((p, o) for p, o in offsets.items() if p in self.compactors)
            self.metrics.inc("sink_commits_total")
