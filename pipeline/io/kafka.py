"""Kafka clients (aiokafka) configured once for kubetape's delivery guarantees, and the questions every
reader asks the cluster: which partitions a topic has, and which offset a time falls on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from pipeline.model.errors import TransientError


class Message(NamedTuple):
    """One consumed message: where it is, its timestamp (ms: the event time, which the watcher sets) and
    its bytes. A named tuple: readers build one per message, at a third of a frozen dataclass's cost."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """How to reach the broker and how hard to try.

    Defaults favour no loss over latency: idempotent producer, acks from all in-sync replicas.
    """

    bootstrap: str
    client_id: str = "kubetape"
    compression: str | None = "zstd"
    linger_ms: int = 20
    max_batch_bytes: int = 1_048_576
    request_timeout_ms: int = 30_000


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


@asynccontextmanager
async def admin_client(settings: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap, client_id=settings.client_id)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def ensure_topic(
    settings: KafkaSettings, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> bool:
    """Create ``name`` if it does not exist; returns True when it was created."""
    async with admin_client(settings) as admin:
        try:
            await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=config or {})])
        except TopicAlreadyExistsError:
            return False
    return True


async def topic_partitions(settings: KafkaSettings, topic: str) -> list[TopicPartition]:
    """Every partition of ``topic`` (empty if it does not exist), from fresh cluster metadata.

    Asked of the admin client: a consumer without a subscription does not load a topic's metadata, so
    its ``partitions_for_topic`` stays empty."""
    try:
        async with admin_client(settings) as admin:
            described = await admin.describe_topics([topic])
    except KafkaError as exc:
        raise TransientError(
            f"cannot reach Kafka at {settings.bootstrap} ({exc}); check --bootstrap and the broker"
        ) from None
    return sorted(
        TopicPartition(topic, p["partition"])
        for t in described
        if t.get("topic") == topic and not t.get("error_code")
        for p in t.get("partitions", [])
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
