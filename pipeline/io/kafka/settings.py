"""How kubetape reaches its Kafka broker, and the names of its topics and consumer groups, in one place
(a deployment may rename the events topic with ``--topic``; the others follow the watcher's and the
sink's defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.io.kafka.security import PLAINTEXT, KafkaSecurity

EVENTS_TOPIC = "kubetape.events"
"""Every published change, in order per object key: what the sink records and consumers read."""
STATE_TOPIC = "kubetape.state"
"""Compacted: the latest published version of each object (the watcher's memory across restarts)."""
RESUME_TOPIC = "kubetape.watch-resume"
"""Compacted: resume points (resourceVersions) and the last lifecycle of each pod."""
USAGE_TOPIC = "kubetape.usage"
"""The recorded load: usage samples of tracked owners' pods from the Metrics API, keyed by owner."""
DEADLETTER_TOPIC = "kubetape.deadletter"
"""Messages set aside: the sink's undecodable input, the watcher's records the broker refuses."""

DEFAULT_SINK_GROUP = "kubetape-sink"
"""The sink's consumer group (a fleet's sinks take one each, see :mod:`pipeline.sink.service`)."""


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """How to reach the broker and how hard to try.

    Defaults favour no loss over latency: idempotent producer, acks from all in-sync replicas. Built
    from flags and the environment once, in :func:`services.flags.kafka_settings`.
    """

    bootstrap: str
    client_id: str = "kubetape"
    compression: str | None = "zstd"
    linger_ms: int = 20
    max_batch_bytes: int = 1_048_576
    request_timeout_ms: int = 30_000
    security: KafkaSecurity = PLAINTEXT
    """TLS and SASL of every client built from these settings (:mod:`.security`)."""

    def describe(self) -> str:
        """Where and how, for messages: ``127.0.0.1:9092 (SASL_SSL, SCRAM-SHA-512 as watcher)``."""
        return f"{self.bootstrap} ({self.security.describe()})"
