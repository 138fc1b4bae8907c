"""The ``Cluster`` protocol: everything kubetape asks of a Kubernetes apiserver, in the pieces the stages
need. Each stage's port is a subset of it (the replayer's ``ReplayCluster``, the controller's
``ControllerClient``, the watcher's ``pipeline.watch.ports.Cluster``);
:class:`pipeline.io.kube.client.KubeClient` implements all of it, and one in-memory cluster does for
unit tests. No third-party imports, so stages and fakes use it freely.

Errors are those of :mod:`pipeline.model.errors`, as :mod:`pipeline.io.kube.status` maps them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from pipeline.io.kube.types import ApiResource, ListPage, ResourceVersion, WatchEvent
from pipeline.model.keys import GroupVersionKind


class ClusterObjects(Protocol):
    """The object verbs every stage that works on a cluster uses (``NotFoundError``, ``ConflictError``,
    ``ApiUnavailableError``…)."""

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]: ...

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
    ) -> bool:
        """False when the object did not exist."""
        ...


class ClusterWrites(ClusterObjects, Protocol):
    """What a writer (the replayer) adds: resolving kinds, server-side apply."""

    async def resource_for(self, api_version: str, kind: str) -> ApiResource:
        """Raises ``UnknownKindError`` when the apiserver serves no such kind."""
        ...

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]: ...


class ClusterUpdates(ClusterObjects, Protocol):
    """What a controller adds: create, optimistic updates, patches, status, Events."""

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Raises ConflictError when the object exists."""
        ...

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT with ``metadata.resourceVersion``: ConflictError if someone changed it since."""
        ...

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]: ...

    async def patch_status(
        self, api_version: str, kind: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch the status subresource of a cluster-scoped object."""
        ...

    async def record_event(
        self, involved: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        """A Kubernetes Event about ``involved`` (best effort: an Event that cannot be written is logged)."""
        ...


class ChangeFeed(Protocol):
    def watch_changes(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str = ""
    ) -> AsyncIterator[str]:
        """Yields ``"RELIST"`` after each (re-)list and the type of every change after it, forever (a
        wake-up signal)."""
        ...


class ClusterReads(Protocol):
    """Read-only access as the watcher needs it: a stream that cannot go on raises ``WatchBrokenError``
    (re-list), an expired version ``GoneError``, refused credentials ``ConfigError``."""

    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        """The listable resource serving ``gvk``, or None if there is none."""
        ...

    def list_pages(self, res: ApiResource) -> AsyncIterator[ListPage]:
        """Every object of ``res`` cluster-wide, page by page as the server answers, with apiVersion/kind
        filled in; the last page's resourceVersion is the list's."""
        ...

    async def get_object(
        self, res: ApiResource, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...

    def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]: ...


class Cluster(ClusterWrites, ClusterUpdates, ChangeFeed, ClusterReads, Protocol):
    """All of it: what :class:`pipeline.io.kube.client.KubeClient` and the in-memory cluster provide."""
