"""The shapes of a Kafka message: one to publish (:class:`Record`, the watcher's), one consumed
(:class:`Message`), and the sink's per-partition batch, which keeps aiokafka's records as fetched and
builds a :class:`Message` only where one is needed. No third-party imports: the watch stage's ports
name :class:`Record` without pulling in aiokafka."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka message to publish: ``value`` None is a tombstone; ``ts_ms`` the message timestamp."""

    topic: str
    key: str
    value: bytes | None
    ts_ms: int


class Message(NamedTuple):
    """One consumed message: where it is, its timestamp (ms: the event time, which the watcher sets), its
    bytes and its headers (which cluster wrote it). A named tuple: readers build one per message, at a
    third of a frozen dataclass's cost."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = ()


class ConsumedRecord(Protocol):
    """The fields of a fetched record the sink reads (aiokafka's ConsumerRecord has them)."""

    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True, slots=True)
class PartitionBatch:
    """One partition's part of a ``getmany``, in offset order, as parallel lists: the sink reads only
    offsets and values per message (two list comprehensions instead of an object per message) and
    builds a :class:`Message` only for a message it sends to the dead-letter topic."""

    partition: int
    offsets: list[int]
    values: list[bytes | None]
    records: Sequence[ConsumedRecord]

    @classmethod
    def of(cls, partition: int, records: Sequence[ConsumedRecord]) -> PartitionBatch:
        # map over attrgetters: the per-message loop runs in C (two list comprehensions cost 2x)
        return cls(partition, list(map(_offset, records)), list(map(_value, records)), records)

    def message(self, index: int) -> Message:
        r = self.records[index]
        return Message(self.partition, r.offset, r.timestamp, r.key, r.value, r.headers)


_offset = operator.attrgetter("offset")
_value = operator.attrgetter("value")
