"""The KWOK clusters of the local stack behave like real clusters with fake nodes."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from kubernetes_asyncio import client

from pipeline.io.kube.connect import body, kube_api
from pipeline.stack.kwok import cluster_processes
from pipeline.stack.processes import pid_alive
from pipeline.stack.stack import LocalStack

SKELETON = """\
apiVersion: v1
kind: Node
metadata:
  name: pool-big
  labels: {pool: big, kubernetes.io/os: linux}
spec:
  taints: [{key: dedicated, value: big, effect: NoSchedule}]
status:
  allocatable: {cpu: "16", memory: 64Gi, pods: "50"}
  capacity: {cpu: "16", memory: 64Gi, pods: "50"}
"""


def _deployment(name: str, replicas: int) -> dict[str, object]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"pool": "big"},
                    "tolerations": [
                        {"key": "dedicated", "operator": "Equal", "value": "big", "effect": "NoSchedule"}
                    ],
                    "containers": [
                        {"name": "c", "image": "example/app:1", "resources": {"requests": {"cpu": "1"}}}
                    ],
                },
            },
        },
    }


async def test_deployment_runs_on_nodes_made_from_a_skeleton(
    local_stack: LocalStack, source_kubeconfig: Path, tmp_path: Path
) -> None:
    skeleton = tmp_path / "node.yaml"
    skeleton.write_text(SKELETON)
    names = local_stack.add_nodes("source", skeleton, 3)
    assert names == ["pool-big-0", "pool-big-1", "pool-big-2"]

    async with kube_api(source_kubeconfig) as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        for name in names:
            node = await core.read_node(name)
            assert node.metadata.labels["pool"] == "big"
            assert node.status.allocatable["cpu"] == "16"
            # The node controller may add node.kubernetes.io/not-ready until KWOK marks the node Ready.
            assert "dedicated" in [t.key for t in node.spec.taints or []]

        await apps.create_namespaced_deployment("default", body(_deployment("web", 5)))
        deadline = time.monotonic() + 90
        running: list[client.V1Pod] = []
        while time.monotonic() < deadline:
            pods = (await core.list_namespaced_pod("default", label_selector="app=web")).items
            running = [p for p in pods if p.status.phase == "Running"]
            if len(running) == 5:
                break
            await asyncio.sleep(0.5)
        assert len(running) == 5, f"only {len(running)} of 5 pods Running"
        assert {p.spec.node_name for p in running} <= set(names)
        # Every node reports Ready through KWOK's node stages.
        for name in names:
            node = await core.read_node(name)
            ready = [c.status for c in node.status.conditions if c.type == "Ready"]
            assert ready == ["True"]


def test_two_clusters_are_independent_and_on_loopback(local_stack: LocalStack) -> None:
    # the session's two clusters; modules that ran earlier on this worker may have added theirs
    # (``source-b``) to the same stack or added and deleted one (``metrics``), so the stack is read
    # now rather than from the session's ``stack_info``, taken once; each cluster needs an address of its own
    stack_info = local_stack.info()
    assert {"source", "sim"} <= set(stack_info.kubeconfigs)
    servers = set()
    for kubeconfig in stack_info.kubeconfigs.values():
        text = kubeconfig.read_text()
        server = next(line.split("server:")[1].strip() for line in text.splitlines() if "server:" in line)
        assert server.startswith("https://127.0.0.1:")
        servers.add(server)
    assert len(servers) == len(stack_info.kubeconfigs), stack_info.kubeconfigs
    assert stack_info.bootstrap.startswith("127.0.0.1:")


def test_down_leaves_no_process_behind(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path / "solo")
    stack.up(["solo"])
    try:
        cluster = stack.cluster("solo", stack.info().bin_dir)
        pids = cluster_processes(cluster)
        # etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok-controller, plus Kafka.
        assert len(pids) >= 5, f"expected the control plane's processes, found pids {pids}"
        kafka_pid = json.loads(stack.state_path.read_text())["kafka"]["nodes"][0]["pid"]
        pids.append(kafka_pid)
        assert pid_alive(kafka_pid)
    except BaseException:
        stack.down()  # a failed precondition must not leak a running control plane
        raise

    stack.down()

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in pids):
        time.sleep(0.2)
    assert [pid for pid in pids if pid_alive(pid)] == []
    assert cluster_processes(cluster) == []
    assert not stack.stack_dir.exists()
