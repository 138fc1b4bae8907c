"""Kafka clients (aiokafka) configured once for kubetape's delivery guarantees, and the question every
reader asks its consumer: which offset a time falls on."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from pipeline.io.kafka.settings import KafkaSettings


def new_producer(settings: KafkaSettings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap,
        client_id=settings.client_id,
        enable_idempotence=True,
        acks="all",
        compression_type=settings.compression,
        linger_ms=settings.linger_ms,
        max_batch_size=settings.max_batch_bytes,
        request_timeout_ms=settings.request_timeout_ms,
    )


def new_consumer(
    settings: KafkaSettings,
    *topics: str,
    group_id: str | None,
    auto_offset_reset: str = "earliest",
    role: str = "",
) -> AIOKafkaConsumer:
    """A consumer that sees only committed transactions; ``role`` names it to the broker
    (``kubetape-<role>``), so a broker's logs tell the sink from a range reader."""
    # Offsets are committed explicitly by each stage, after its work is durable.
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=settings.bootstrap,
        client_id=f"{settings.client_id}-{role}" if role else settings.client_id,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset=auto_offset_reset,
        isolation_level="read_committed",
    )


async def offsets_at(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition], at_ms: int | None
) -> dict[TopicPartition, int]:
    """Per partition, the first offset whose timestamp is ≥ ``at_ms`` (the end offset if none is);
    the beginning offsets when ``at_ms`` is None. Kafka timestamps are the events' times (the watcher
    sets them), so this is where a time range of the topic begins or ends."""
    if at_ms is None:
        return dict(await consumer.beginning_offsets(partitions))
    ends = await consumer.end_offsets(partitions)
    found = await consumer.offsets_for_times({tp: max(at_ms, 0) for tp in partitions})
    return {tp: (hit.offset if hit is not None else ends[tp]) for tp, hit in found.items()}


class ConsumerClient:
    """What a consuming source has around its consumer: ``async with`` starts and stops it, and
    :attr:`consumer` is the started client. Subclasses set ``_consumer`` in ``start`` and clear it in
    ``stop``."""

    _consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._consumer
