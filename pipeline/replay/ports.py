"""What the replay needs from the simulated cluster: the object verbs (:class:`ReplayCluster`, which
:class:`pipeline.io.kube_apply.KubeApplier` has) and, optionally, a pod watch (:class:`PodEvents`,
which :class:`pipeline.io.pod_watch.PodWatch` has). Unit tests give in-memory versions of both."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from pipeline.io.kube_types import ApiResource, ClusterObjects
from pipeline.io.watch_types import ListResult, ResourceVersion, WatchEvent


class ReplayCluster(ClusterObjects, Protocol):
    """The object verbs the replay uses on the simulated cluster."""

    async def resource_for(self, api_version: str, kind: str) -> ApiResource: ...

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]: ...


class PodEvents(Protocol):
    """The replay's pods as a list and, from its resourceVersion on, as a stream of changes.

    ``watch_pods`` raises :class:`~pipeline.model.errors.GoneError` when ``since`` is too old (list
    again) and :class:`~pipeline.model.errors.WatchBrokenError` when the stream drops (watch again from
    the last version seen); it ends when the server ends the watch."""

    async def list_pods(self) -> ListResult: ...

    def watch_pods(self, since: ResourceVersion) -> AsyncIterator[WatchEvent]: ...


PodWatchFactory = Callable[[str, str], PodEvents]
"""Makes the :class:`PodEvents` of the pods labelled (label, value): the replay's label is known only
once the replay is named."""
