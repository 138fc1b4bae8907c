"""Kafka clients (aiokafka) configured once for kubetape's delivery guarantees."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError


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
    settings: KafkaSettings, *topics: str, group_id: str | None, auto_offset_reset: str = "earliest"
) -> AIOKafkaConsumer:
    # Offsets are committed explicitly by each stage, after its work is durable.
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=settings.bootstrap,
        client_id=settings.client_id,
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
