"""The small seams the watch stage is written against; io provides the real ones, tests fakes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pipeline.io.kafka.message import Record
from pipeline.io.kube.cluster import ClusterReads

Cluster = ClusterReads
"""Read-only access to the watched cluster: the reads of :class:`pipeline.io.kube.cluster.Cluster`."""


class Bus(Protocol):
    """Where record units go (:class:`pipeline.io.kafka.publisher.KafkaPublisher`); ``submit`` may block."""

    async def submit(self, unit: Sequence[Record]) -> None: ...
