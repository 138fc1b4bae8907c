"""Plain value types shared by the watcher's io adapters and the watch stage (no third-party imports).

They live in ``pipeline.io`` so that the Kubernetes and Kafka adapters can produce them and
``pipeline.watch`` (which may import io, not the other way round) can consume them and fake them in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NewType

ResourceVersion = NewType("ResourceVersion", str)

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One decoded watch line; ``obj`` is the plain dict the API server sent (TypeMeta filled in)."""

    type: WatchEventType
    obj: dict[str, Any]
    resource_version: ResourceVersion


@dataclass(frozen=True, slots=True)
class ListResult:
    """A complete (all pages) list of one kind, consistent at ``resource_version``."""

    items: list[dict[str, Any]]
    resource_version: ResourceVersion


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka message to publish: ``value`` None is a tombstone; ``ts_ms`` the message timestamp."""

    topic: str
    key: str
    value: bytes | None
    ts_ms: int
