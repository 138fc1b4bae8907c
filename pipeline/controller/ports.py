"""What the controller needs from the cluster (:class:`pipeline.io.kube_controller.KubeControllerClient`).

Unit tests implement it in memory. Errors are those of :mod:`pipeline.model.errors`: ``NotFoundError``,
``ConflictError`` and other ``ObjectRejectedError`` s, ``ApiUnavailableError`` (retriable).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from pipeline.io.kube_types import ClusterObjects


class ControllerCluster(ClusterObjects, Protocol):
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
        """Yields something after every change of the listed objects, forever (a wake-up signal)."""
        ...


class ControllerClient(ControllerCluster, ChangeFeed, Protocol):
    """Both ports: what :class:`pipeline.controller.controller.Controller` runs on."""
