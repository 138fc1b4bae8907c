"""kubetape's topic set made right for production, and checked: replication factor, ``min.insync.replicas``,
retention of the history, compaction of the state and resume topics (``kubetape topics create|describe``;
each component checks its own topics at start with :func:`check_topics`)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError, for_code
from aiokafka.protocol.metadata import MetadataRequest

from pipeline.io.kafka.access import denied
from pipeline.io.kafka.admin import admin_client
from pipeline.io.kafka.settings import (
    DEADLETTER_TOPIC,
    EVENTS_TOPIC,
    RESUME_TOPIC,
    STATE_TOPIC,
    USAGE_TOPIC,
    KafkaSettings,
)
from pipeline.model.errors import ConfigError

COMPACTED_TOPICS = (STATE_TOPIC, RESUME_TOPIC)
_SHOWN_CONFIGS = ("cleanup.policy", "min.insync.replicas", "retention.ms", "min.compaction.lag.ms")


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def compacted(self) -> bool:
        return self.configs.get("cleanup.policy") == "compact"


def topic_set(
    *,
    partitions: int = 6,
    replication_factor: int = 1,
    min_insync_replicas: int | None = None,
    retention_ms: int | None = None,
    events_topic: str = EVENTS_TOPIC,
) -> list[TopicSpec]:
    """The five topics: the history and the recorded load (``retention_ms``, None: the broker's default),
    the compacted state (as many partitions, keyed alike) and resume points (one partition), and the dead
    letters."""
    if replication_factor < 1 or partitions < 1:
        raise ConfigError("--partitions and --replication-factor must be at least 1")
    if min_insync_replicas is not None and not 1 <= min_insync_replicas <= replication_factor:
        raise ConfigError(
            f"--min-insync-replicas {min_insync_replicas} must be between 1 and the replication factor "
            f"{replication_factor} (with acks=all, more than the replicas would refuse every write)"
        )
    common = {"min.insync.replicas": str(min_insync_replicas)} if min_insync_replicas else {}
    compacted = {**common, "cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
    history = {**common, **({"retention.ms": str(retention_ms)} if retention_ms is not None else {})}
    return [
        TopicSpec(events_topic, partitions, replication_factor, history),
        TopicSpec(USAGE_TOPIC, partitions, replication_factor, dict(history)),
        TopicSpec(STATE_TOPIC, partitions, replication_factor, compacted),
        TopicSpec(RESUME_TOPIC, 1, replication_factor, dict(compacted)),
        TopicSpec(DEADLETTER_TOPIC, 1, replication_factor, dict(common)),
    ]


async def create_topics(settings: KafkaSettings, specs: list[TopicSpec]) -> dict[str, str]:
    """Create what is missing; per topic ``created`` or ``exists`` (an existing topic is left as it is:
    :func:`describe_topics` shows whether it matches)."""
    async with admin_client(settings) as admin:
        news = [NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.configs) for s in specs]
        response = await admin.create_topics(news)
    outcome: dict[str, str] = {}
    for name, code, *rest in response.topic_errors:
        if code == 0:
            outcome[name] = "created"
        elif code == TopicAlreadyExistsError.errno:
            outcome[name] = "exists"
        else:
            message = rest[0] if rest and rest[0] else for_code(code).__name__
            raise ConfigError(f"creating topic {name!r} on {settings.describe()} failed: {message}")
    return outcome


async def describe_topics(settings: KafkaSettings, names: list[str]) -> dict[str, dict[str, Any]]:
    """Per topic: whether it exists, its partitions, replication factor and the configs that matter."""
    async with admin_client(settings) as admin:
        # describe_topics would ask the broker to auto-create a missing topic (its metadata request allows
        # it): this one must only look
        metadata = await admin._send_request(MetadataRequest(names, allow_auto_topic_creation=False))
        described: list[dict[str, Any]] = metadata.to_object()["topics"]
        present = [t["topic"] for t in described if not t.get("error_code")]
        responses = (
            await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in present])
            if present
            else []
        )
    configs: dict[str, dict[str, str]] = {}
    for response in responses:
        for _code, _message, _type, name, entries, *_ in response.resources:
            configs[name] = {e[0]: e[1] for e in entries if e[0] in _SHOWN_CONFIGS}
    out: dict[str, dict[str, Any]] = {}
    for t in described:
        name, code = t["topic"], t.get("error_code")
        if code == 29:  # TOPIC_AUTHORIZATION_FAILED
            raise denied(settings, "Describe", name)
        if code:
            out[name] = {"exists": False}
            continue
        partitions = t.get("partitions", [])
        out[name] = {
            "exists": True,
            "partitions": len(partitions),
            "replication_factor": min((len(p.get("replicas", [])) for p in partitions), default=0),
            "configs": configs.get(name, {}),
        }
    return out


async def check_topics(
    settings: KafkaSettings,
    names: list[str],
    *,
    compacted: tuple[str, ...] = (),
    settle_s: float = 0.0,
) -> None:
    """Refuse to start on a topic set that would lose or corrupt data: a missing topic, or a state or
    resume topic that is not compacted (its old versions would be deleted by time instead of by key).
    ``settle_s``: how long a topic just created may take to show in the broker's metadata."""
    deadline = time.monotonic() + settle_s
    while True:
        found = await describe_topics(settings, names)
        missing = [n for n in names if not found.get(n, {}).get("exists")]
        if not missing or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.2)
    problems = [f"topic {n!r} does not exist" for n in missing]
    problems += [
        f"topic {n!r} has cleanup.policy {found[n]['configs'].get('cleanup.policy', '?')!r}, not compact"
        for n in compacted
        if found.get(n, {}).get("exists") and "compact" not in found[n]["configs"].get("cleanup.policy", "")
    ]
    if problems:
        raise ConfigError(
            f"Kafka at {settings.describe()}: {'; '.join(problems)}; create the topic set with "
            "`kubetape topics create` (docs/production-kafka.md)"
        )
