"""The small seams the watch stage is written against; io provides the real ones, tests fakes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pipeline.io.kafka.message import Record
from pipeline.io.kube.cluster import ClusterReads

Cluster = ClusterReads
"""Read-only access to the watched cluster: the reads of :class:`pipeline.io.kube.cluster.Cluster`."""


class Bus(Protocol):
    """Where record units go (:class:`pipeline.io.kafka.publisher.KafkaPublisher`); ``submit`` may block."""

    async def submit(self, unit: Sequence[Record]) -> None: ...


class PodMetricsSource(Protocol):
    """The Metrics API's PodMetrics (``metrics.k8s.io/v1beta1``) of every namespace, as plain dicts.

    Raises whatever the API server answers when the API is not served (404) or not available (503):
    the usage sampler turns any failure into a gap, it never stops the watch."""

    async def pod_metrics(self) -> list[dict[str, Any]]: ...
