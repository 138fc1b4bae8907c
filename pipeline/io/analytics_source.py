"""The Kafka side of an analytics consumer: its own consumer group on ``kubetape.events``.

Every partition of the topic is assigned to the one instance (``assign``, no group membership), and
offsets are committed under the group ``kubetape-analytics-<name>``: each analytics consumer keeps its
own position and never touches another group's, the sink's included. Run one instance per name.

Start per partition: the first message at or after ``start_ms`` when given (a topic range), otherwise
the group's committed offset, otherwise the oldest retained message. End: with ``end_ms``, the first
message at or after it, fixed when the source starts (``finished()`` then turns true); without, the
source follows the topic until stopped.

Of a topic a fleet shares, a source delivers one cluster's messages (``cluster``; chosen by header, see
:class:`~pipeline.io.kafka_range.ClusterFilter`), with a group of its own per cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from pipeline.io.kafka import (
    ConsumerClient,
    KafkaSettings,
    Message,
    new_consumer,
    offsets_at,
    topic_partitions,
)
from pipeline.io.kafka_range import ClusterFilter
from pipeline.model.errors import ConfigError, TransientError
from pipeline.model.keys import ClusterId


class KafkaAnalyticsSource(ConsumerClient):
    """``async with KafkaAnalyticsSource(settings, topic, group_id) as source:``; see the module doc."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        group_id: str,
        *,
        start_ms: int | None = None,
        end_ms: int | None = None,
        cluster: ClusterId | None = None,
    ) -> None:
        self.settings = settings
        self._wanted = ClusterFilter(topic, cluster)
        self.topic = topic
        self.group_id = group_id
        self.start_ms = start_ms
        self.end_ms = end_ms
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []
        self._ends: dict[TopicPartition, int] = {}
        self._positions: dict[TopicPartition, int] = {}

    @property
    def description(self) -> str:
        return f"kafka:{self.topic}"

    async def start(self) -> None:
        partitions = await topic_partitions(self.settings, self.topic)
        if not partitions:
            raise ConfigError(
                f"topic {self.topic!r} does not exist on {self.settings.bootstrap}; has the watcher run?"
            )
        consumer = new_consumer(self.settings, group_id=self.group_id, role=self.group_id)
        try:
            await consumer.start()
        except KafkaConnectionError as exc:
            await consumer.stop()
            raise TransientError(
                f"cannot reach Kafka at {self.settings.bootstrap} ({exc}); check --bootstrap and the broker"
            ) from None
        self._consumer = consumer
        self._partitions = partitions
        consumer.assign(self._partitions)
        starts = await offsets_at(consumer, partitions, self.start_ms) if self.start_ms is not None else {}
        for tp in self._partitions:
            if tp in starts:
                consumer.seek(tp, starts[tp])
            else:
                committed = await consumer.committed(tp)
                if committed is not None:
                    consumer.seek(tp, committed)
                else:
                    await consumer.seek_to_beginning(tp)
            self._positions[tp] = await consumer.position(tp)
        if self.end_ms is not None:
            self._ends = await offsets_at(consumer, partitions, self.end_ms)
            for tp, end in self._ends.items():
                if self._positions[tp] >= end:
                    consumer.pause(tp)

    async def stop(self) -> None:
        """Close the client (committed offsets stay with the group); safe to call twice."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def fetch(self, timeout_ms: int, max_records: int) -> list[Message]:
        try:
            batches = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except KafkaError as exc:
            raise TransientError(f"fetching from {self.topic} failed ({exc}); retry later") from exc
        out: list[Message] = []
        for tp, records in sorted(batches.items(), key=lambda item: item[0].partition):
            end = self._ends.get(tp)
            for record in records:
                if end is not None and record.offset >= end:
                    break
                if self._wanted.keeps(record.headers):
                    out.append(
                        Message(tp.partition, record.offset, record.timestamp, record.key, record.value)
                    )
                self._positions[tp] = record.offset + 1
            if end is not None and self._positions[tp] >= end:
                self.consumer.pause(tp)
        self._wanted.check()
        return out

    def lag(self) -> int | None:
        total = 0
        for tp in self._partitions:
            highwater = self.consumer.highwater(tp)
            if highwater is None:
                return None
            total += max(highwater - self._positions.get(tp, 0), 0)
        return total

    def finished(self) -> bool:
        if self.end_ms is None:
            return False
        return all(self._positions.get(tp, 0) >= end for tp, end in self._ends.items())

    async def commit(self, next_offsets: Mapping[int, int]) -> None:
        try:
            await self.consumer.commit({TopicPartition(self.topic, p): o for p, o in next_offsets.items()})
        except KafkaError as exc:
            raise TransientError(
                f"committing {self.group_id}'s offsets failed ({exc}); the events since the last commit "
                f"will be delivered again"
            ) from exc
