"""Small made-up manifests for autoscaled replays: a Deployment of identical pods and a Karpenter
NodePool on the KWOK provider.

Benchmarks and integration tests replay such workloads; they build them here so that a change to the
NodePool API (or to what the KWOK provider's node class is called) is made once. Pure logic, no I/O.
"""

from __future__ import annotations

from typing import Any

from pipeline.replay.autoscale.figures import INSTANCE_TYPE_LABEL
from pipeline.replay.autoscale.settings import NODEPOOL_API_VERSION

KWOK_NODE_CLASS_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
"""The node class Karpenter's KWOK provider installs (see :mod:`pipeline.stack.karpenter`)."""


def deployment(
    name: str,
    namespace: str,
    replicas: int,
    *,
    cpu: str,
    memory: str,
    container: str = "c",
    image: str = "x",
    labelled: bool = False,
) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods of one container requesting ``cpu`` and ``memory``, its pods
    labelled ``app: name`` (and the Deployment too if ``labelled``)."""
    labels = {"app": name}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labelled:
        metadata["labels"] = dict(labels)
    spec = {"name": container, "image": image, "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": {"containers": [spec]}},
        },
    }


def kwok_node_pool(
    name: str,
    instance_types: tuple[str, ...],
    *,
    consolidate_after: str = "30s",
    cpu_limit: str | None = None,
) -> dict[str, Any]:
    """A NodePool of the KWOK provider's ``instance_types`` that consolidates empty or underused nodes
    after ``consolidate_after``; ``cpu_limit`` caps the CPUs of its nodes (None: no limit)."""
    requirement = {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(instance_types)}
    spec: dict[str, Any] = {
        "template": {"spec": {"nodeClassRef": dict(KWOK_NODE_CLASS_REF), "requirements": [requirement]}},
        "disruption": {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": consolidate_after,
        },
    }
    if cpu_limit is not None:
        spec["limits"] = {"cpu": cpu_limit}
    return {"apiVersion": NODEPOOL_API_VERSION, "kind": "NodePool", "metadata": {"name": name}, "spec": spec}
