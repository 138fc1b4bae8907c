"""Running an analytics consumer: over its own consumer group on ``kubetape.events``, or over a trace file.

A consumer that also folds the recorded load (:class:`UsageConsumer`, the ``timeline``) is fed
``kubetape.usage`` by a :class:`UsageRunner`: a second consume loop under a consumer group of its own
(:func:`usage_group_id`), checkpointing the same consumer, so each topic's offsets are committed only
after a checkpoint that made what was read from it durable.

The runner is the consumer's handler in the one consume loop (:mod:`pipeline.io.kafka.consume`), which
owns the delivery contract described in :mod:`pipeline.analytics.consumer`: the runner decodes and
hands over each batch (``add``) and checkpoints the consumer (``flush``); the loop commits only after
a checkpoint. Its source is a :class:`pipeline.io.kafka.reader.TopicReader`; unit tests use a list.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pipeline.analytics.consumer import AnalyticsConsumer, BatchContext
from pipeline.formats.wire.codec import decode_event
from pipeline.formats.wire.usage import decode_usage
from pipeline.io.kafka.consume import ConsumeLoop, LoopSettings, Source
from pipeline.io.kafka.message import Message
from pipeline.model.errors import FormatError
from pipeline.model.events import Event
from pipeline.model.usage import UsageSample

log = logging.getLogger("kubetape.analytics")

USAGE_GROUP_SUFFIX = ".usage"
"""An analytics consumer's group on ``kubetape.usage`` is its events group with this suffix."""


def usage_group_id(events_group: str) -> str:
    """The consumer group under which the consumer of ``events_group`` reads ``kubetape.usage``."""
    return events_group + USAGE_GROUP_SUFFIX


class UsageConsumer(AnalyticsConsumer, Protocol):
    """An analytics consumer that also folds usage samples (same checkpoint, same delivery contract)."""

    def on_usage(self, samples: Sequence[UsageSample], context: BatchContext) -> None:
        """Fold a batch of usage samples (in order per partition, i.e. per owner); fast, no I/O."""
        ...


class MessageSource(Source, Protocol):
    """The consume loop's source, which also names itself and tells its lag (for the consumer)."""

    @property
    def description(self) -> str: ...

    def lag(self) -> int | None:
        """Messages not yet fetched up to the end of the topic (None when unknown)."""
        ...


@dataclass(slots=True)
class RunStats:
    events: int = 0
    undecodable: int = 0
    checkpoints: int = 0
    batches: int = 0


ConsumerT = TypeVar("ConsumerT", bound=AnalyticsConsumer)
RecordT = TypeVar("RecordT")


class _TopicRunner(ABC, Generic[ConsumerT, RecordT]):
    """What :class:`ConsumerRunner` (``kubetape.events``) and :class:`UsageRunner` (``kubetape.usage``)
    share as the consume loop's handler of one topic: decode each batch, hand it to the consumer,
    checkpoint the consumer. Each says how a message decodes, where a batch goes and what closing does."""

    _skipped = "skipped an undecodable message"
    """What the log says when a message does not decode."""

    def __init__(
        self, consumer: ConsumerT, source: MessageSource, settings: LoopSettings | None = None
    ) -> None:
        self.consumer = consumer
        self.source = source
        self.stats = RunStats()
        self._loop = ConsumeLoop(source, self, settings)

    def stop(self) -> None:
        """Stop after the current batch; the final checkpoint and commit still run."""
        self._loop.stop()

    async def run(self) -> RunStats:
        await self._loop.run()
        return self.stats

    @abstractmethod
    def _decode(self, data: bytes, where: str) -> RecordT:
        """One message's value decoded; FormatError when it does not decode (``where`` names it)."""

    @abstractmethod
    def _hand_over(self, records: list[RecordT], context: BatchContext) -> None:
        """Give the consumer a decoded batch."""

    # ---- the consume loop's handler ----------------------------------------------------------------
    def add(self, messages: Sequence[Message]) -> None:
        """Decode ``messages`` (undecodable ones counted, logged and skipped) and hand them over."""
        records: list[RecordT] = []
        for message in messages:
            where = f"{self.source.description} partition {message.partition} offset {message.offset}"
            try:
                if message.value is None:
                    raise FormatError(f"{where}: empty message (a tombstone has no place on this topic)")
                records.append(self._decode(message.value, where))
            except FormatError as exc:
                self.stats.undecodable += 1
                log.warning(self._skipped, extra={"ctx": {"consumer": self.consumer.name, "error": str(exc)}})
        context = BatchContext(self.source.description, self.source.lag(), self.stats.undecodable)
        self._hand_over(records, context)
        self.stats.events += len(records)
        self.stats.batches += 1

    def flush(self) -> None:
        """Checkpoint the consumer: what it computed and its resume state become durable."""
        self.consumer.checkpoint()
        self.stats.checkpoints += 1

    @abstractmethod
    def close(self) -> None: ...


class ConsumerRunner(_TopicRunner[AnalyticsConsumer, Event]):
    """``await ConsumerRunner(consumer, source).run()`` until :meth:`stop` or the end of a range."""

    def _decode(self, data: bytes, where: str) -> Event:
        return decode_event(data, where)

    def _hand_over(self, records: list[Event], context: BatchContext) -> None:
        self.consumer.on_batch(records, context)

    def close(self) -> None:
        self.consumer.close()


class UsageRunner(_TopicRunner[UsageConsumer, UsageSample]):
    """``await UsageRunner(consumer, source).run()``: ``kubetape.usage`` into ``consumer.on_usage``;
    the consumer's :meth:`~AnalyticsConsumer.close` stays the event runner's."""

    _skipped = "skipped an undecodable usage sample"

    def _decode(self, data: bytes, where: str) -> UsageSample:
        return decode_usage(data, where)

    def _hand_over(self, records: list[UsageSample], context: BatchContext) -> None:
        self.consumer.on_usage(records, context)

    def close(self) -> None:
        pass


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
