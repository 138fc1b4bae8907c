"""One in-memory Kafka for unit tests: topics of partitions of records, committed offsets per group, and
consumers with the part of aiokafka's ``AIOKafkaConsumer`` that kubetape's readers call.

Offsets start at 0 per partition. :meth:`FakeKafka.marker` appends a control record (a transaction
marker): it takes an offset and is never delivered, as a ``read_committed`` consumer sees them.
:meth:`FakeKafka.install` points :mod:`pipeline.io.kafka`'s readers at this broker for one test.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import pytest
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.structs import OffsetAndTimestamp

from pipeline.io.kafka import reader, reads
from pipeline.io.kafka.settings import KafkaSettings

Record: TypeAlias = "ConsumerRecord[bytes, bytes]"


class FakeKafka:
    """The broker: ``topics[name][partition]`` is the log (None where a control record sits)."""

    def __init__(self) -> None:
        self.topics: dict[str, list[list[Record | None]]] = {}
        self.committed: dict[tuple[str, TopicPartition], int] = {}
        """``(group, partition) -> next offset`` as the group committed it."""
        self.consumers: list[FakeConsumer] = []

    def create(self, topic: str, partitions: int = 1) -> None:
        self.topics.setdefault(topic, [[] for _ in range(partitions)])

    def produce(
        self,
        topic: str,
        value: bytes | None,
        *,
        partition: int = 0,
        key: bytes | None = None,
        timestamp_ms: int = 0,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> int:
        """Append a record; returns its offset."""
        log = self.topics[topic][partition]
        offset = len(log)
        log.append(
            ConsumerRecord(topic, partition, offset, timestamp_ms, 0, key, value, None, 0, 0, tuple(headers))
        )
        return offset

    def marker(self, topic: str, partition: int = 0) -> int:
        """Append a control record (a transaction's commit marker); returns its offset."""
        log = self.topics[topic][partition]
        log.append(None)
        return len(log) - 1

    def consumer(
        self,
        settings: KafkaSettings,
        *topics: str,
        group_id: str | None,
        auto_offset_reset: str = "earliest",
        role: str = "",
    ) -> FakeConsumer:
        """Stands in for :func:`pipeline.io.kafka.clients.new_consumer`."""
        del settings, topics, auto_offset_reset, role
        consumer = FakeConsumer(self, group_id)
        self.consumers.append(consumer)
        return consumer

    async def partitions(self, settings: KafkaSettings, topic: str) -> list[TopicPartition]:
        """Stands in for :func:`pipeline.io.kafka.admin.topic_partitions`."""
        del settings
        return [TopicPartition(topic, p) for p in range(len(self.topics.get(topic, [])))]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeKafka:
        """Make the readers of :mod:`pipeline.io.kafka` use this broker (for the test's duration)."""
        for module in (reader, reads):
            monkeypatch.setattr(module, "new_consumer", self.consumer)
            monkeypatch.setattr(module, "topic_partitions", self.partitions)
        return self

    def log(self, tp: TopicPartition) -> list[Record | None]:
        return self.topics[tp.topic][tp.partition]


class FakeConsumer:
    """A consumer of :class:`FakeKafka` with assigned partitions (no group membership, no rebalances)."""

    def __init__(self, broker: FakeKafka, group_id: str | None) -> None:
        self.broker = broker
        self.group_id = group_id
        self.started = False
        self.stopped = False
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def topics(self) -> set[str]:
        return set(self.broker.topics)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._positions = dict.fromkeys(partitions, 0)
        self._paused.clear()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._positions[tp] = 0

    async def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    async def committed(self, tp: TopicPartition) -> int | None:
        assert self.group_id is not None, "committed offsets belong to a group"
        return self.broker.committed.get((self.group_id, tp))

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        assert self.group_id is not None, "a consumer without a group cannot commit"
        for tp, offset in offsets.items():
            self.broker.committed[(self.group_id, tp)] = offset

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(partitions, 0)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: len(self.broker.log(tp)) for tp in partitions}

    async def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, at_ms in times.items():
            hits = [r for r in self.broker.log(tp) if r is not None and r.timestamp >= at_ms]
            found[tp] = OffsetAndTimestamp(hits[0].offset, hits[0].timestamp) if hits else None
        return found

    def pause(self, *partitions: TopicPartition) -> None:
        self._paused.update(partitions)

    def highwater(self, tp: TopicPartition) -> int:
        return len(self.broker.log(tp))

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Record]]:
        """What the unpaused partitions hold past their positions, at most ``max_records`` in all
        (returns at once: there is no waiting in memory)."""
        del partitions, timeout_ms
        left = max_records if max_records is not None else 1 << 62
        out: dict[TopicPartition, list[Record]] = {}
        for tp in sorted(self._positions):
            if tp in self._paused:
                continue
            log = self.broker.log(tp)
            while self._positions[tp] < len(log) and left > 0:
                record = log[self._positions[tp]]
                self._positions[tp] += 1
                if record is not None:
                    out.setdefault(tp, []).append(record)
                    left -= 1
        return out

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"FakeConsumer has no {name}: add it when a reader needs it")
