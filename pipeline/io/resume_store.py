"""The watcher's durable memory in Kafka: creating its topics and reading compacted topics back.

On start the watcher reads ``kubetape.state`` (latest published object per key) and
``kubetape.watch-resume`` (resourceVersion per watched kind, lifecycle per pod) to continue exactly where
it stopped, without a local disk.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from pipeline.io.kafka import KafkaSettings, ensure_topic, new_consumer, topic_partitions
from pipeline.io.topics import EVENTS_TOPIC, RESUME_TOPIC, STATE_TOPIC, is_from_cluster
from pipeline.model.errors import TransientError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId, split_message_key

_COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}


async def ensure_watcher_topics(settings: KafkaSettings, partitions: int = 3) -> None:
    """Create the events (history), state and resume (compacted) topics if missing."""
    await ensure_topic(settings, EVENTS_TOPIC, partitions)
    await ensure_topic(settings, STATE_TOPIC, partitions, dict(_COMPACTED))
    await ensure_topic(settings, RESUME_TOPIC, 1, dict(_COMPACTED))


async def read_compacted(
    settings: KafkaSettings, topic: str, timeout_s: float = 120.0, cluster: ClusterId = DEFAULT_CLUSTER
) -> dict[str, bytes]:
    """The latest value of every key ``cluster`` wrote to ``topic`` (tombstoned keys left out), read up to
    its current end, keyed without the cluster prefix: a fleet's watchers share the topic and each reads
    back only its own records (:data:`~pipeline.io.topics.CLUSTER_HEADER`)."""
    tps = await topic_partitions(settings, topic)
    if not tps:
        return {}
    consumer = new_consumer(settings, group_id=None, role="read-back")
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        latest: dict[str, bytes] = {}
        try:
            async with asyncio.timeout(timeout_s):
                while not await _caught_up(consumer, ends):
                    batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
                    for messages in batches.values():
                        for msg in messages:
                            key = own_record_key(msg, cluster)
                            if key is None:
                                continue  # another cluster's record
                            if msg.value is None:
                                latest.pop(key, None)
                            else:
                                latest[key] = msg.value
        except TimeoutError:
            raise TransientError(
                f"reading {topic} back from {settings.bootstrap} did not finish in {timeout_s:.0f}s; "
                f"is the broker healthy?"
            ) from None
        return latest
    finally:
        await consumer.stop()


def own_record_key(msg: ConsumerRecord[bytes, bytes], cluster: ClusterId) -> str | None:
    """The key of ``msg`` without its cluster prefix, or None if another cluster wrote it."""
    if not is_from_cluster(msg.headers, cluster):
        return None
    return split_message_key(msg.key.decode() if msg.key is not None else "", cluster)


async def _caught_up(consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return False
    return True
