"""The watcher's Kafka record (no third-party imports); the Kubernetes values it reads (watch events,
lists, resource versions) are in :mod:`pipeline.io.kube.types`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka message to publish: ``value`` None is a tombstone; ``ts_ms`` the message timestamp."""

    topic: str
    key: str
    value: bytes | None
    ts_ms: int
