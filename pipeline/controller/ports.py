"""What the controller needs from the cluster: a subset of :class:`pipeline.io.kube.cluster.Cluster`
(:class:`pipeline.io.kube.client.KubeClient` from ``controller_client``; unit tests use the in-memory one).

Errors are those of :mod:`pipeline.model.errors`: ``NotFoundError``, ``ConflictError`` and other
``ObjectRejectedError`` s, ``ApiUnavailableError`` (retriable).
"""

from __future__ import annotations

from typing import Protocol

from pipeline.io.kube.cluster import ChangeFeed, ClusterUpdates

ControllerCluster = ClusterUpdates
"""The verbs a reconcile uses."""


class ControllerClient(ClusterUpdates, ChangeFeed, Protocol):
    """Both ports: what :class:`pipeline.controller.controller.Controller` runs on."""
