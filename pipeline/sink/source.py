"""What the sink consumes from: a consumer-group member of the events topic (the protocol the sink loop is
written against, implemented on aiokafka in :mod:`pipeline.io.kafka.sink_member`, on fakes in unit tests),
and the refusal to mix two topics' histories in one store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from pipeline.io.kafka.message import Message, PartitionBatch
from pipeline.model.errors import ConfigError


class EventSource(Protocol):
    """A consumer-group member delivering ``kubetape.events`` (implemented on aiokafka in pipeline.io)."""

    async def getmany(self, timeout_ms: int, max_records: int) -> list[PartitionBatch]:
        """The next batch: per partition, messages in offset order (may be empty)."""

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        """Commit ``partition -> next offset to read``; False if the commit did not happen (retry later)."""

    async def committed(self, partition: int) -> int | None:
        """The group's committed offset of ``partition`` (None if never committed)."""

    async def seek(self, partition: int, offset: int) -> None:
        """Continue ``partition`` at ``offset``."""

    async def dead_letter(self, message: Message, error: str) -> None:
        """Publish ``message`` to the dead-letter topic and wait for the broker's acknowledgement."""

    async def identity(self) -> str | None:
        """The topic's identity (cluster and topic), or None if the broker does not tell."""

    async def offset_bounds(self, partition: int) -> tuple[int, int]:
        """``(log start offset, end offset)`` of ``partition``: what the topic still holds."""


class TopicIdentityError(ConfigError):
    """The topic is not the one the store was filled from: the sink refuses to mix their histories."""
