"""Fake nodes: created from a Node skeleton in batches, each with the path KWOK serves its metrics at."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.kwok.cluster import KwokCluster

RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"
"""Where metrics-server (>= 0.7) scrapes a node instead of the kubelet's /metrics/resource."""


def resource_metrics_path(node_name: str) -> str:
    """The path KWOK serves ``node_name``'s resource metrics at (metrics-resource.yaml's spec.path)."""
    return f"/metrics/nodes/{node_name}/metrics/resource"


NODES_PER_REQUEST = 250
"""Nodes per ``kubectl create``: one request for 5,000 nodes ran past kubectl's timeout while KWOK
initialised the first ones, and a batch at a time also reports progress."""


def add_nodes(
    cluster: KwokCluster,
    skeleton: Path,
    count: int,
    prefix: str | None = None,
    report: Callable[[str], None] | None = None,
) -> list[str]:
    """Create ``count`` fake nodes from a Node YAML skeleton; returns their names.

    kubectl itself turns the YAML into JSON (client-side dry run), so this layer needs no YAML parser.
    """
    if count < 1:
        raise StackError(f"node count must be at least 1, got {count}")
    if not skeleton.exists():
        raise StackError(f"node skeleton {skeleton} does not exist")
    rendered = cluster.kubectl("create", "--dry-run=client", "-o", "json", "-f", str(skeleton))
    node = json.loads(rendered)
    if node.get("kind") != "Node":
        raise StackError(f"node skeleton {skeleton} holds a {node.get('kind')!r}, expected kind: Node")
    base = prefix or node.get("metadata", {}).get("name") or "kwok-node"
    names = []
    items = []
    for index in range(count):
        name = f"{base}-{index}"
        copy = json.loads(rendered)
        copy["metadata"]["name"] = name
        copy["metadata"].setdefault("labels", {})["kubernetes.io/hostname"] = name
        # KWOK serves every node's emulated kubelet metrics on one port, under a path per node;
        # metrics-server finds it here (without, it asks the node's address for the kubelet's path)
        copy["metadata"].setdefault("annotations", {})[RESOURCE_METRICS_PATH_ANNOTATION] = (
            resource_metrics_path(name)
        )
        items.append(copy)
        names.append(name)
    # Nodes keep the status they are created with (as a kubelet's registration does), so capacity,
    # allocatable and taints arrive in one request; kwok's node-initialize stage then marks them Ready.
    for start in range(0, count, NODES_PER_REQUEST):
        batch = items[start : start + NODES_PER_REQUEST]
        cluster.kubectl(
            "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": batch})
        )
        if report is not None and count > NODES_PER_REQUEST:
            report(f"cluster {cluster.name!r}: {start + len(batch)} of {count} nodes created")
    return names
