"""The one reader of a topic: every partition assigned to one instance (``assign``, no group membership),
configured by where it starts, where it ends and an optional consumer group to commit under.

Start per partition (:data:`Start`): ``"committed"``, the group's committed offset, otherwise the oldest
retained message; ``"beginning"``, the oldest retained message; a time (ms), the first message at or
after it. End (:data:`End`): ``"none"``, the reader follows the topic until stopped; ``"current"``, the
end offsets when the reader starts (what a compacted read-back needs); a time (ms), the first message at
or after it. Ends are fixed when the reader starts, and :meth:`TopicReader.finished` then turns true.

Kafka timestamps are the events' times (the watcher sets them), so "the first message at or after T" is
a time range's edge. A reader without a group never commits and moves no group's offsets (the sink's
and the analytics consumers' groups stay untouched); an analytics consumer reads under
``kubetape-analytics-<name>`` and commits there only, never touching another group's position.

Of a topic a fleet shares, a reader delivers one cluster's messages (``cluster``; chosen by header, see
:class:`~pipeline.io.kafka.headers.ClusterFilter`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import GroupAuthorizationFailedError, KafkaConnectionError, KafkaError

from pipeline.io.kafka.access import denied
from pipeline.io.kafka.admin import topic_partitions
from pipeline.io.kafka.clients import ConsumerClient, new_consumer, offsets_at, stop_consumer
from pipeline.io.kafka.headers import ClusterFilter
from pipeline.io.kafka.message import Message
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import ConfigError, TransientError
from pipeline.model.keys import ClusterId

Start = Literal["committed", "beginning"] | int
"""Where each partition is read from: see the module docstring."""
End = Literal["none", "current"] | int
"""Where each partition's reading stops: see the module docstring."""


class TopicMissingError(ConfigError):
    """The topic a reader was asked for does not exist (yet)."""


class TopicReader(ConsumerClient):
    """``async with TopicReader(settings, topic, start=..., end=...) as reader:``; see the module doc.

    ``fetch`` returns the next messages in offset order per partition (partitions in order), none past
    the end; ``role`` names the client to the broker (default: the group, else ``range-reader``)."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        start: Start,
        end: End = "none",
        group_id: str | None = None,
        cluster: ClusterId | ClusterFilter | None = None,
        role: str | None = None,
    ) -> None:
        if start == "committed" and group_id is None:
            raise ValueError("start='committed' needs a consumer group")
        self.settings = settings
        self.topic = topic
        self.start_at: Start = start
        self.end_at: End = end
        self.group_id = group_id
        self.wanted = cluster if isinstance(cluster, ClusterFilter) else ClusterFilter(topic, cluster)
        self.role = role or group_id or "range-reader"
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []
        self._ends: dict[TopicPartition, int] = {}
        self._positions: dict[TopicPartition, int] = {}

    @property
    def description(self) -> str:
        return f"kafka:{self.topic}"

    async def start(self) -> None:
        """Assign every partition, seek each to its start and fix the ends; TopicMissingError for a topic
        that does not exist, TransientError when the broker cannot be reached."""
        partitions = await topic_partitions(self.settings, self.topic)
        if not partitions:
            raise TopicMissingError(
                f"topic {self.topic!r} does not exist on {self.settings.bootstrap}; check --topic (has the "
                "watcher run?)"
            )
        consumer = new_consumer(self.settings, group_id=self.group_id, role=self.role)
        try:
            await consumer.start()
        except KafkaConnectionError as exc:
            await stop_consumer(consumer)
            raise TransientError(
                f"cannot reach Kafka at {self.settings.bootstrap} ({exc}); check --bootstrap and the broker"
            ) from None
        self._consumer = consumer
        self._partitions = partitions
        try:
            consumer.assign(partitions)
            starts = (
                await offsets_at(consumer, partitions, self.start_at)
                if isinstance(self.start_at, int)
                else {}
            )
            for tp in partitions:
                if tp in starts:
                    consumer.seek(tp, starts[tp])
                else:
                    committed = await self._committed(consumer, tp) if self.start_at == "committed" else None
                    if committed is not None:
                        consumer.seek(tp, committed)
                    else:
                        await consumer.seek_to_beginning(tp)
                self._positions[tp] = await consumer.position(tp)
            if isinstance(self.end_at, int):
                self._ends = await offsets_at(consumer, partitions, self.end_at)
            elif self.end_at == "current":
                self._ends = dict(await consumer.end_offsets(partitions))
            for tp, end in self._ends.items():
                if self._positions[tp] >= end:
                    consumer.pause(tp)
        except BaseException:
            await self.stop()  # a reader that failed to start holds no client
            raise

    async def _committed(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
        """The group's committed offset; a group this principal may not use is a ConfigError naming it."""
        try:
            offset: int | None = await consumer.committed(tp)
        except GroupAuthorizationFailedError:
            raise denied(self.settings, "Read", str(self.group_id), "consumer group") from None
        return offset

    async def stop(self) -> None:
        """Close the client (committed offsets stay with the group); safe to call twice."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_consumer(consumer)

    async def fetch(self, timeout_ms: int, max_records: int) -> list[Message]:
        """The next messages of the chosen cluster; TransientError when the fetch fails, ConfigError
        when a second cluster is met and none was chosen."""
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
                if self.wanted.keeps(record.headers):
                    out.append(
                        Message(
                            tp.partition,
                            record.offset,
                            record.timestamp,
                            record.key,
                            record.value,
                            record.headers,
                        )
                    )
                self._positions[tp] = record.offset + 1
        await self._pause_finished()
        self.wanted.check()
        return out

    async def _pause_finished(self) -> None:
        """Pause each partition read to its end. The consumer's position decides, not the last message
        delivered: control records (transaction markers) occupy offsets too, up to the end."""
        for tp, end in self._ends.items():
            if self._positions[tp] < end:
                self._positions[tp] = max(self._positions[tp], min(await self.consumer.position(tp), end))
            if self._positions[tp] >= end:
                self.consumer.pause(tp)

    def lag(self) -> int | None:
        """Messages not yet read up to the end of the topic (None when unknown)."""
        total = 0
        for tp in self._partitions:
            highwater = self.consumer.highwater(tp)
            if highwater is None:
                return None
            total += max(highwater - self._positions.get(tp, 0), 0)
        return total

    def finished(self) -> bool:
        """True once every partition is read to its end; never for a reader that follows the topic."""
        if self.end_at == "none":
            return False
        return all(self._positions.get(tp, 0) >= end for tp, end in self._ends.items())

    async def commit(self, next_offsets: Mapping[int, int]) -> None:
        """Commit, per partition, the offset of the next message to read, under the reader's group."""
        if self.group_id is None:
            raise RuntimeError("a reader without a consumer group does not commit")
        try:
            await self.consumer.commit({TopicPartition(self.topic, p): o for p, o in next_offsets.items()})
        except KafkaError as exc:
            raise TransientError(
                f"committing {self.group_id}'s offsets failed ({exc}); the events since the last commit "
                f"will be delivered again"
            ) from exc
