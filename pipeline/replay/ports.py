"""What the replay needs from the simulated cluster: the object verbs (:class:`ReplayCluster`, the
writer's subset of :class:`pipeline.io.kube.cluster.Cluster`, which
:class:`pipeline.io.kube.client.KubeClient` has) and, optionally, a pod watch (:class:`PodEvents`,
which :class:`pipeline.io.kube.pod_watch.PodWatch` has). Unit tests give in-memory versions of both."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from pipeline.io.kube.cluster import ClusterWrites
from pipeline.io.kube.types import ListResult, ResourceVersion, WatchEvent
from pipeline.replay.autoscale.settings import ScaledSetting

ReplayCluster = ClusterWrites
"""The object verbs the replay uses on the simulated cluster: resolving kinds, server-side apply, get,
list and delete."""


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


class AutoscalerProcess(Protocol):
    """The autoscaler's process beside the simulated cluster (the local stack's Karpenter): restarted
    with its timers divided by the replay's speed, and offering ``instance_types`` when given
    (``source``: where they came from, ``types``: the provider's JSON). Returns each setting as given
    and applied, for the report. The replay stage cannot manage processes (the stack layer does): the
    command line hands it one, :class:`services.local_karpenter.LocalKarpenter`."""

    def restart_at(self, speed: float, instance_types: Mapping[str, Any] | None) -> list[ScaledSetting]: ...


class PodAutoscalerProcess(Protocol):
    """The HPA's processes beside the simulated cluster (its kube-controller-manager, whose HPA
    controller's sync period and delays are flags, and metrics-server, whose resolution is one),
    restarted with those timers divided by the replay's speed. Returns each setting as given and
    applied, for the report."""

    def restart_at(self, speed: float) -> list[ScaledSetting]: ...
