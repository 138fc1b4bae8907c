"""Reading a time range of a topic, or tailing it, without a consumer group.

A replay or an analysis of a recorded range must not move any group's committed offsets (the sink's and
the analytics consumers' groups stay untouched), so these readers assign partitions themselves
(``group_id=None``) and never commit. Offsets are located with ``offsets_for_times``: Kafka timestamps
are the events' times (the watcher sets them), so "the first record at or after T" is the range edge.

A topic a fleet shares holds several clusters' records: a reader keeps one cluster's, chosen by the
record header alone (:class:`ClusterFilter`), so other clusters' values are never decoded or kept.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from pipeline.io.kafka import KafkaSettings, Message, new_consumer, offsets_at, topic_partitions
from pipeline.io.topics import cluster_named, is_from_cluster
from pipeline.model.errors import ConfigError, TransientError
from pipeline.model.keys import ClusterId


class ClusterFilter:
    """Keeps the records of one cluster of a fleet, by :data:`~pipeline.io.topics.CLUSTER_HEADER` alone.

    ``cluster`` None: the only cluster the topic holds, taken from the first record met (the default
    cluster for records without the header); a record of a second cluster makes :meth:`check` raise,
    naming both: a reader never merges clusters silently. One filter may serve several reads (a
    follow's range, then its tail) so they keep the same cluster."""

    def __init__(self, topic: str, cluster: ClusterId | None) -> None:
        self.topic = topic
        self.cluster = cluster
        self.chosen = cluster is not None
        self.others: set[str] = set()

    def keeps(self, headers: Sequence[tuple[str, bytes]] | None) -> bool:
        if self.cluster is None:
            self.cluster = ClusterId(cluster_named(headers))
            return True
        if is_from_cluster(headers, self.cluster):
            return True
        if not self.chosen:
            self.others.add(cluster_named(headers))
        return False

    def check(self) -> None:
        """Raise ConfigError if, with no cluster chosen, records of several clusters were met."""
        if self.others:
            met = ", ".join(sorted({str(self.cluster), *self.others}))
            raise ConfigError(
                f"topic {self.topic!r} holds records of several clusters ({met}): a fleet shares it; "
                "choose one with --cluster"
            )


async def _start(consumer: AIOKafkaConsumer, settings: KafkaSettings, topic: str) -> list[TopicPartition]:
    try:
        await consumer.start()
        topics = await consumer.topics()
    except KafkaConnectionError as exc:
        raise TransientError(
            f"cannot reach the Kafka broker at {settings.bootstrap} ({exc}); check --bootstrap and that "
            f"the broker is up"
        ) from None
    if topic not in topics:
        raise ConfigError(
            f"topic {topic!r} does not exist on {settings.bootstrap} (topics: {', '.join(sorted(topics))}); "
            f"check --topic"
        )
    return await topic_partitions(settings, topic)


async def read_topic_range(
    settings: KafkaSettings,
    topic: str,
    end_ms: int,
    *,
    start_ms: int | None = None,
    cluster: ClusterId | ClusterFilter | None = None,
) -> list[Message]:
    """Every record of ``cluster`` (:class:`ClusterFilter`) in ``topic`` from ``start_ms`` (default: the
    oldest retained) up to, not including, the first record at or after ``end_ms``, per partition in
    offset order, partitions concatenated.

    Raises ConfigError for a missing topic or records of clusters not chosen, and TransientError when
    the broker cannot be reached.
    """
    wanted = cluster if isinstance(cluster, ClusterFilter) else ClusterFilter(topic, cluster)
    consumer = new_consumer(settings, group_id=None, role="range-reader")
    try:
        partitions = await _start(consumer, settings, topic)
        starts = await offsets_at(consumer, partitions, start_ms)
        stops = await offsets_at(consumer, partitions, end_ms)
        consumer.assign(partitions)
        remaining: set[TopicPartition] = set()
        for tp in partitions:
            if starts[tp] < stops[tp]:
                consumer.seek(tp, starts[tp])
                remaining.add(tp)
        out: dict[int, list[Message]] = {tp.partition: [] for tp in partitions}
        consumer.pause(*(set(partitions) - remaining))
        while remaining:
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            for tp, messages in batches.items():
                for m in messages:
                    if m.offset < stops[tp] and wanted.keeps(m.headers):
                        out[tp.partition].append(Message(tp.partition, m.offset, m.timestamp, m.key, m.value))
            for tp in list(remaining):
                # control records (transaction markers) occupy offsets too: the position tells
                if await consumer.position(tp) >= stops[tp]:
                    remaining.discard(tp)
                    consumer.pause(tp)
        wanted.check()
        return [record for p in sorted(out) for record in out[p]]
    except KafkaError as exc:
        raise TransientError(f"reading {topic!r} from {settings.bootstrap} failed: {exc}") from None
    finally:
        await consumer.stop()


async def tail_topic(
    settings: KafkaSettings,
    topic: str,
    from_ms: int,
    poll_timeout_ms: int = 200,
    *,
    cluster: ClusterId | ClusterFilter | None = None,
) -> AsyncIterator[list[Message]]:
    """Batches of ``cluster``'s records (:class:`ClusterFilter`; a record of another cluster not chosen
    raises ConfigError) of ``topic`` from the first at or after ``from_ms`` on, forever (each batch in
    offset order per partition; an empty batch when nothing arrived within ``poll_timeout_ms``)."""
    wanted = cluster if isinstance(cluster, ClusterFilter) else ClusterFilter(topic, cluster)
    consumer = new_consumer(settings, group_id=None, role="range-reader")
    try:
        partitions = await _start(consumer, settings, topic)
        starts = await offsets_at(consumer, partitions, from_ms)
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, starts[tp])
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=poll_timeout_ms, max_records=5000)
            except KafkaConnectionError:
                await asyncio.sleep(1.0)  # the broker is away: keep the position, try again
                continue
            batch = [
                Message(tp.partition, m.offset, m.timestamp, m.key, m.value)
                for tp, messages in batches.items()
                for m in messages
                if wanted.keeps(m.headers)
            ]
            wanted.check()
            yield batch
    finally:
        await consumer.stop()


async def latest_clusters(settings: KafkaSettings, topic: str) -> set[str]:
    """The clusters named by the last record of each partition of ``topic`` (empty for an empty or
    missing topic): which cluster a sink nobody named a cluster for records (:class:`ClusterFilter`'s
    header rule)."""
    consumer = new_consumer(settings, group_id=None, role="range-reader")
    try:
        partitions = await _start(consumer, settings, topic)
        ends = await consumer.end_offsets(partitions)
        starts = await consumer.beginning_offsets(partitions)
        last = {tp: ends[tp] - 1 for tp in partitions if ends[tp] > starts[tp]}
        if not last:
            return set()  # nothing recorded yet
        consumer.assign(list(last))
        for tp, offset in last.items():
            consumer.seek(tp, offset)
        met: set[str] = set()
        # a partition whose last offset is a transaction marker yields nothing: the others decide
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                while last:
                    for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                        met.update(cluster_named(r.headers) for r in records)
                        last.pop(tp, None)
        return met
    except ConfigError:
        return set()  # no topic yet: nothing recorded, the default cluster
    except KafkaError as exc:
        raise TransientError(
            f"reading the last records of {topic!r} from {settings.bootstrap} failed: {exc}"
        ) from None
    finally:
        await consumer.stop()
