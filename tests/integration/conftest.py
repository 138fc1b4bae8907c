"""Everything under tests/integration talks to the real local stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.stack.stack import LocalStack

WATCH_TEST_NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: wt-node
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/os: linux, type: kwok}
status:
  allocatable: {cpu: "32", memory: 128Gi, pods: "110"}
  capacity: {cpu: "32", memory: 128Gi, pods: "110"}
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def source_nodes(local_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two KWOK nodes on the ``source`` cluster for the watcher tests' workloads. Session-scoped and
    defined here, once: several modules use it, and a per-module fixture created the same node names
    twice on the one shared stack (AlreadyExists)."""
    skeleton: Path = tmp_path_factory.mktemp("nodes") / "node.yaml"
    skeleton.write_text(WATCH_TEST_NODE)
    return local_stack.add_nodes("source", skeleton, 2)


@pytest.fixture(scope="session")
def second_source(local_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second recorded cluster, ``source-b``, with two KWOK nodes: the other member of a fleet. Started
    the stack's own way (``LocalStack.up`` adds a named cluster to the running stack); returns its
    kubeconfig."""
    info = local_stack.up(["source-b"])
    skeleton: Path = tmp_path_factory.mktemp("nodes-b") / "node.yaml"
    skeleton.write_text(WATCH_TEST_NODE)
    local_stack.add_nodes("source-b", skeleton, 2)
    return info.kubeconfigs["source-b"]
