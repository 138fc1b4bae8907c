"""The small seams the watch stage is written against; io provides the real ones, tests fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from pipeline.io.kube_types import ApiResource
from pipeline.io.watch_types import ListResult, Record, ResourceVersion, WatchEvent
from pipeline.model.keys import GroupVersionKind


class Cluster(Protocol):
    """Read-only access to the watched cluster (:class:`pipeline.io.kube_watch.KubeCluster`)."""

    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None: ...

    async def list_objects(self, res: ApiResource) -> ListResult: ...

    async def get_object(
        self, res: ApiResource, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...

    def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]: ...


class Bus(Protocol):
    """Where record units go (:class:`pipeline.io.publisher.KafkaPublisher`); ``submit`` may block."""

    async def submit(self, unit: Sequence[Record]) -> None: ...
