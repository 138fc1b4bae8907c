"""Running an analytics consumer: over its own consumer group on ``kubetape.events``, or over a trace file.

The runner owns the delivery contract described in :mod:`pipeline.analytics.consumer`: decode, hand
over in batches, checkpoint, and only then commit. It is written against :class:`MessageSource`, which
:class:`pipeline.io.analytics_source.KafkaAnalyticsSource` implements on aiokafka; unit tests use a list.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.analytics.consumer import AnalyticsConsumer, BatchContext
from pipeline.formats.wire.codec import decode_event
from pipeline.io.kafka import Message
from pipeline.model.errors import FormatError
from pipeline.model.events import Event

log = logging.getLogger("kubetape.analytics")


class MessageSource(Protocol):
    """Where a runner reads from and commits to (one consumer group on one topic)."""

    @property
    def description(self) -> str: ...

    async def fetch(self, timeout_ms: int, max_records: int) -> list[Message]: ...

    def lag(self) -> int | None:
        """Messages not yet fetched up to the end of the topic (None when unknown)."""
        ...

    def finished(self) -> bool:
        """True once a bounded range (``--to``) has been read completely; never for a live topic."""
        ...

    async def commit(self, next_offsets: Mapping[int, int]) -> None:
        """Commit, per partition, the offset of the next message to read."""
        ...


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    """How often the runner checkpoints; the defaults bound re-delivery after a crash to a few seconds."""

    max_batch: int = 1000
    fetch_timeout_ms: int = 500
    checkpoint_every_s: float = 5.0
    checkpoint_every_events: int = 20_000


@dataclass(slots=True)
class RunStats:
    events: int = 0
    undecodable: int = 0
    checkpoints: int = 0
    batches: int = 0


class ConsumerRunner:
    """``await ConsumerRunner(consumer, source).run()`` until :meth:`stop` or the end of a range."""

    def __init__(
        self, consumer: AnalyticsConsumer, source: MessageSource, settings: RunnerSettings | None = None
    ) -> None:
        self.consumer = consumer
        self.source = source
        self.settings = settings or RunnerSettings()
        self.stats = RunStats()
        self._stopping = asyncio.Event()
        self._uncommitted: dict[int, int] = {}

    def stop(self) -> None:
        """Stop after the current batch; the final checkpoint and commit still run."""
        self._stopping.set()

    async def run(self) -> RunStats:
        last_checkpoint = time.monotonic()
        since_checkpoint = 0
        try:
            while not self._stopping.is_set() and not self.source.finished():
                messages = await self.source.fetch(self.settings.fetch_timeout_ms, self.settings.max_batch)
                if messages:
                    since_checkpoint += self._hand_over(messages)
                due = time.monotonic() - last_checkpoint >= self.settings.checkpoint_every_s
                if self._uncommitted and (due or since_checkpoint >= self.settings.checkpoint_every_events):
                    await self._checkpoint()
                    last_checkpoint, since_checkpoint = time.monotonic(), 0
        finally:
            await self._checkpoint()
            self.consumer.close()
        return self.stats

    def _hand_over(self, messages: Sequence[Message]) -> int:
        events: list[Event] = []
        for message in messages:
            self._uncommitted[message.partition] = message.offset + 1
            where = f"{self.source.description} partition {message.partition} offset {message.offset}"
            try:
                if message.value is None:
                    raise FormatError(f"{where}: empty message (a tombstone has no place on this topic)")
                events.append(decode_event(message.value, where))
            except FormatError as exc:
                self.stats.undecodable += 1
                log.warning(
                    "skipped an undecodable message",
                    extra={"ctx": {"consumer": self.consumer.name, "error": str(exc)}},
                )
        context = BatchContext(self.source.description, self.source.lag(), self.stats.undecodable)
        self.consumer.on_batch(events, context)
        self.stats.events += len(events)
        self.stats.batches += 1
        return len(messages)

    async def _checkpoint(self) -> None:
        self.consumer.checkpoint()
        self.stats.checkpoints += 1
        if self._uncommitted:
            await self.source.commit(dict(self._uncommitted))
            self._uncommitted.clear()


def run_offline(
    consumer: AnalyticsConsumer, events: Iterable[Event], source: str, batch_size: int = 1000
) -> RunStats:
    """Run ``consumer`` over ``events`` (a trace file's), checkpoint once at the end, close it."""
    stats = RunStats()
    batch: list[Event] = []
    try:
        for event in events:
            batch.append(event)
            if len(batch) >= batch_size:
                consumer.on_batch(batch, BatchContext(source, None, 0))
                stats.events += len(batch)
                stats.batches += 1
                batch = []
        if batch:
            consumer.on_batch(batch, BatchContext(source, None, 0))
            stats.events += len(batch)
            stats.batches += 1
        consumer.checkpoint()
        stats.checkpoints += 1
    finally:
        consumer.close()
    return stats
