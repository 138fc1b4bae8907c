"""Reads of a topic built on the one :class:`~pipeline.io.kafka.reader.TopicReader`, none in a consumer
group: a time range (a replay or an export of a recorded range), the live tail from a time on (a
follow), the compacted read-back (the watcher's memory), and the clusters a topic's last records name.

A replay or an analysis of a recorded range must not move any group's committed offsets, so these
readers assign partitions themselves and never commit. A topic a fleet shares holds several clusters'
records: a read keeps one cluster's, chosen by the record header alone
(:class:`~pipeline.io.kafka.headers.ClusterFilter`), so other clusters' values are never decoded or kept.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from typing import Protocol

from aiokafka.errors import KafkaConnectionError, KafkaError

from pipeline.io.kafka.admin import topic_partitions
from pipeline.io.kafka.clients import new_consumer, stop_consumer
from pipeline.io.kafka.headers import ClusterFilter, cluster_named, is_from_cluster
from pipeline.io.kafka.message import Message
from pipeline.io.kafka.reader import Start, TopicMissingError, TopicReader
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import TransientError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId, split_message_key


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
    start: Start = start_ms if start_ms is not None else "beginning"
    reader = TopicReader(settings, topic, start=start, end=end_ms, cluster=cluster)
    out: dict[int, list[Message]] = {}
    try:
        async with reader:
            while not reader.finished():
                for message in await reader.fetch(timeout_ms=500, max_records=5000):
                    out.setdefault(message.partition, []).append(message)
    except KafkaError as exc:
        raise TransientError(f"reading {topic!r} from {settings.bootstrap} failed: {exc}") from None
    return [message for p in sorted(out) for message in out[p]]


async def tail_topic(
    settings: KafkaSettings,
    topic: str,
    from_ms: int,
    poll_timeout_ms: int = 200,
    *,
    cluster: ClusterId | ClusterFilter | None = None,
) -> AsyncGenerator[list[Message], None]:
    """Batches of ``cluster``'s records (:class:`ClusterFilter`; a record of another cluster not chosen
    raises ConfigError) of ``topic`` from the first at or after ``from_ms`` on, forever (each batch in
    offset order per partition; an empty batch when nothing arrived within ``poll_timeout_ms``)."""
    async with TopicReader(settings, topic, start=from_ms, cluster=cluster) as reader:
        while True:
            try:
                batch = await reader.fetch(timeout_ms=poll_timeout_ms, max_records=5000)
            except TransientError as exc:
                if not isinstance(exc.__cause__, KafkaConnectionError):
                    raise
                await asyncio.sleep(1.0)  # the broker is away: keep the position, try again
                continue
            yield batch


class KeyedRecord(Protocol):
    """What :func:`own_record_key` reads of a record (a :class:`Message` and aiokafka's record have it)."""

    @property
    def key(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


async def read_compacted(
    settings: KafkaSettings, topic: str, timeout_s: float = 120.0, cluster: ClusterId = DEFAULT_CLUSTER
) -> dict[str, bytes]:
    """The latest value of every key ``cluster`` wrote to ``topic`` (tombstoned keys left out), read up to
    its current end, keyed without the cluster prefix: a fleet's watchers share the topic and each reads
    back only its own records (:data:`~pipeline.io.kafka.headers.CLUSTER_HEADER`); empty for a topic that
    does not exist yet."""
    reader = TopicReader(settings, topic, start="beginning", end="current", cluster=cluster, role="read-back")
    try:
        await reader.start()
    except TopicMissingError:
        return {}
    latest: dict[str, bytes] = {}
    try:
        async with asyncio.timeout(timeout_s):
            while not reader.finished():
                for message in await reader.fetch(timeout_ms=500, max_records=10_000):
                    key = own_record_key(message, cluster)
                    if key is None:
                        continue  # another cluster's record
                    if message.value is None:
                        latest.pop(key, None)
                    else:
                        latest[key] = message.value
    except TimeoutError:
        raise TransientError(
            f"reading {topic} back from {settings.bootstrap} did not finish in {timeout_s:.0f}s; "
            f"is the broker healthy?"
        ) from None
    finally:
        await reader.stop()
    return latest


def own_record_key(record: KeyedRecord, cluster: ClusterId) -> str | None:
    """The key of ``record`` without its cluster prefix, or None if another cluster wrote it (its header
    and its key must both name ``cluster``)."""
    if not is_from_cluster(record.headers, cluster):
        return None
    return split_message_key(record.key.decode() if record.key is not None else "", cluster)


async def latest_clusters(settings: KafkaSettings, topic: str) -> set[str]:
    """The clusters named by the last record of each partition of ``topic`` (empty for an empty or
    missing topic): which cluster a sink nobody named a cluster for records (:class:`ClusterFilter`'s
    header rule)."""
    partitions = await topic_partitions(settings, topic)
    if not partitions:
        return set()  # no topic yet: nothing recorded, the default cluster
    consumer = new_consumer(settings, group_id=None, role="range-reader")
    try:
        try:
            await consumer.start()
        except KafkaConnectionError as exc:
            raise TransientError(
                f"cannot reach the Kafka broker at {settings.bootstrap} ({exc}); check --bootstrap and "
                f"that the broker is up"
            ) from None
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
    except KafkaError as exc:
        raise TransientError(
            f"reading the last records of {topic!r} from {settings.bootstrap} failed: {exc}"
        ) from None
    finally:
        await stop_consumer(consumer)
