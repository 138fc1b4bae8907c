"""Creating kubetape's topics and describing their partitions (the admin client).

The watcher creates its topics on start: ``kubetape.events`` (history) and the compacted
``kubetape.state`` (latest published object per key) and ``kubetape.watch-resume`` (resourceVersion per
watched kind, lifecycle per pod), which it reads back (:func:`pipeline.io.kafka.reads.read_compacted`) to
continue exactly where it stopped, without a local disk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    KafkaError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    for_code,
)
from aiokafka.protocol.metadata import MetadataRequest

from pipeline.io.kafka.access import denied
from pipeline.io.kafka.clients import new_admin
from pipeline.io.kafka.diagnose import refusal
from pipeline.io.kafka.settings import EVENTS_TOPIC, RESUME_TOPIC, STATE_TOPIC, USAGE_TOPIC, KafkaSettings
from pipeline.model.errors import ConfigError, TransientError

_COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}


@asynccontextmanager
async def admin_client(settings: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client. Every component's first contact with Kafka goes through here (topics are
    checked or created before anything is read or written), so a client the brokers refuse (a wrong
    password, an untrusted certificate) is a ConfigError saying why, here, once."""
    admin = new_admin(settings)
    try:
        await admin.start()
    except KafkaError:
        await admin.close()
        problem = await refusal(settings)
        if problem is not None:
            raise ConfigError(f"Kafka at {settings.describe()} refuses this client: {problem}") from None
        raise
    try:
        yield admin
    finally:
        await admin.close()


async def ensure_topic(
    settings: KafkaSettings, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> bool:
    """Create ``name`` if it does not exist; returns True when it was created.

    The broker answers per topic (aiokafka raises nothing for it): a topic that exists is fine, and so is
    a principal without the CREATE permission when the topic exists already (production ACLs)."""
    async with admin_client(settings) as admin:
        response = await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=config or {})])
        code = next((error[1] for error in response.topic_errors if error[0] == name), 0)
        if code == 0:
            return True
        if code == TopicAlreadyExistsError.errno:
            return False
        if code == TopicAuthorizationFailedError.errno:
            described = await admin.describe_topics([name])
            if any(t.get("topic") == name and not t.get("error_code") for t in described):
                return False
            who = settings.security.username or "this client"
            raise ConfigError(
                f"topic {name!r} does not exist on {settings.describe()} and {who} may not create it; "
                "create it as docs/production-kafka.md shows (or with an operator's KafkaTopic) or grant "
                "CREATE on it"
            )
        raise TransientError(
            f"creating topic {name!r} on {settings.describe()} failed: {for_code(code).__name__}"
        )


async def topic_partitions(settings: KafkaSettings, topic: str) -> list[TopicPartition]:
    """Every partition of ``topic`` (empty if it does not exist), from fresh cluster metadata.

    Asked of the admin client: a consumer without a subscription does not load a topic's metadata, so
    its ``partitions_for_topic`` stays empty. It only looks: aiokafka's ``describe_topics`` would let a
    broker with ``auto.create.topics.enable`` (Kafka's default) create a missing topic with the broker's
    defaults, behind the back of the component that creates it with kubetape's settings."""
    try:
        async with admin_client(settings) as admin:
            metadata = await admin._send_request(MetadataRequest([topic], allow_auto_topic_creation=False))
            described: list[dict[str, Any]] = metadata.to_object()["topics"]
    except KafkaError as exc:
        raise TransientError(
            f"cannot reach Kafka at {settings.bootstrap} ({exc}); check --bootstrap and the broker"
        ) from None
    if any(
        t.get("topic") == topic and t.get("error_code") == TopicAuthorizationFailedError.errno
        for t in described
    ):
        raise denied(settings, "Describe", topic)
    return sorted(
        TopicPartition(topic, p["partition"])
        for t in described
        if t.get("topic") == topic and not t.get("error_code")
        for p in t.get("partitions", [])
    )


async def ensure_watcher_topics(settings: KafkaSettings, partitions: int = 3) -> None:
    """Create the events (history), usage (history), state and resume (compacted) topics if missing."""
    await ensure_topic(settings, EVENTS_TOPIC, partitions)
    await ensure_topic(settings, USAGE_TOPIC, partitions)
    await ensure_topic(settings, STATE_TOPIC, partitions, dict(_COMPACTED))
    await ensure_topic(settings, RESUME_TOPIC, 1, dict(_COMPACTED))
