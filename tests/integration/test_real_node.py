"""kubetape's own image on a real node of a stack cluster: a kubelet built from the stack's Go module, over
containerd and runc, registered beside the cluster's KWOK nodes. A pod of the image built from the
repository's Dockerfile runs there, and takes the in-cluster credentials path; k8s/prod runs there as
k8s/local/prod applies it and records a workload through deleted and killed pods; ``stack down`` then
leaves no process, mount or cgroup of the node behind.

The module starts a stack of its own (one cluster): the check that nothing is left is about that
stack's node alone."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.model.errors import StackError
from pipeline.replay.workload_manifests import deployment
from pipeline.stack import real_node
from pipeline.stack.kwok import KwokCluster
from pipeline.stack.node_images import KUBETAPE_IMAGE, SANDBOX_IMAGE, ensure_kubetape_archive
from pipeline.stack.processes import pid_alive
from pipeline.stack.progress import stderr_reporter
from pipeline.stack.stack import LocalStack
from pipeline.stack.state import StackState
from tests.conftest import _in_ci
from tests.integration import local_prod as local_prod_overlay

# a new machine builds kubetape's image in this module (the Dockerfile's two stages, ~5 min on 2 busy
# cores); the kubelet and the sandbox image come built from bootstrap
pytestmark = pytest.mark.timeout(1800)

CLUSTER = "node"
NAMESPACE = "default"


@pytest.fixture(scope="module")
def node_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    stack = LocalStack(tmp_path_factory.mktemp("rn"), report=stderr_reporter)
    try:
        stack.up([CLUSTER], real_node_cluster=CLUSTER)
    except StackError as exc:
        with contextlib.suppress(StackError):
            stack.down()
        if _in_ci():
            pytest.fail(f"the stack with a real node could not start (CI=true, so this is a failure): {exc}")
        pytest.skip(f"the stack with a real node could not start: {exc}")
    try:
        yield stack
    finally:
        with contextlib.suppress(StackError):
            stack.down()


@pytest.fixture(scope="module")
def cluster(node_stack: LocalStack) -> KwokCluster:
    return node_stack.cluster(CLUSTER, node_stack.info().bin_dir)


@pytest.fixture(scope="module")
def node_state(node_stack: LocalStack) -> real_node.RealNodeState:
    state = StackState.load(node_stack.state_path).real_node
    assert state is not None, "stack up --real-node recorded no node"
    return state


@pytest.fixture(scope="module")
def kubetape_image(node_state: real_node.RealNodeState) -> str:
    """kubetape's image built from the repository's Dockerfile, loaded into the node's containerd."""
    real_node.import_image(ensure_kubetape_archive(stderr_reporter), node_state.layout)
    return KUBETAPE_IMAGE


def _pod(name: str, image: str, command: list[str], env: dict[str, str]) -> str:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "hostNetwork": True,
            "nodeSelector": {real_node.NODE_LABEL: "true"},
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "securityContext": {"readOnlyRootFilesystem": True, "runAsNonRoot": True},
                }
            ],
        },
    }
    return json.dumps(pod)


def _wait_finished(cluster: KwokCluster, name: str, timeout_s: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = json.loads(cluster.kubectl("get", "pod", name, "-n", NAMESPACE, "-o", "json"))
        phase = last.get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return last
        time.sleep(1.0)
    raise AssertionError(
        f"pod {name} did not finish within {timeout_s:.0f}s; last status: {last.get('status')}"
    )


def _container_log(node_state: real_node.RealNodeState, name: str) -> str:
    """The container's log as the kubelet wrote it (CRI format: time, stream, tag, text per line)."""
    logs = sorted(node_state.layout.pod_logs.glob(f"{NAMESPACE}_{name}_*/main/*.log"))
    assert logs, f"no log of pod {name} under {node_state.layout.pod_logs}"
    return "\n".join(line.split(" ", 3)[-1] for line in logs[-1].read_text().splitlines())


def test_the_node_runs_a_real_kubelet_of_the_control_planes_version(
    cluster: KwokCluster, node_state: real_node.RealNodeState
) -> None:
    node = json.loads(cluster.kubectl("get", "node", node_state.node, "-o", "json"))
    assert node["metadata"]["labels"][real_node.NODE_LABEL] == "true"
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.36.3"
    assert info["containerRuntimeVersion"].startswith("containerd://")
    assert real_node.node_ready(cluster, node_state.node) is None
    # loopback, and no Hostname the apiserver would look up in DNS
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]


def test_kubetapes_image_runs_as_a_pod_and_takes_the_in_cluster_credentials(
    cluster: KwokCluster, node_state: real_node.RealNodeState, kubetape_image: str
) -> None:
    cluster.kubectl(
        "apply", "-f", "-", stdin=_pod("kubetape-help", kubetape_image, ["kubetape", "--help"], {})
    )
    # the in-cluster path of the Kubernetes client kubetape uses: the service account's token and CA,
    # the apiserver named by KUBERNETES_SERVICE_HOST/PORT (loopback here: no kube-proxy)
    probe = (
        "import asyncio\n"
        "from kubernetes_asyncio import client, config\n"
        "async def main():\n"
        "    config.load_incluster_config()\n"
        "    async with client.ApiClient() as api:\n"
        "        version = await client.VersionApi(api).get_code()\n"
        "    print('in-cluster', version.git_version)\n"
        "asyncio.run(main())\n"
    )
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        stdin=_pod(
            "kubetape-incluster", kubetape_image, ["python", "-c", probe], real_node.in_cluster_env(cluster)
        ),
    )
    helped = _wait_finished(cluster, "kubetape-help")
    assert helped["status"]["phase"] == "Succeeded", helped["status"]
    assert "usage: kubetape" in _container_log(node_state, "kubetape-help")
    reached = _wait_finished(cluster, "kubetape-incluster")
    log = _container_log(node_state, "kubetape-incluster")
    assert reached["status"]["phase"] == "Succeeded", (reached["status"], log)
    assert "in-cluster v1.36.3" in log


def test_a_pod_that_needs_pod_networking_never_runs_and_kwok_does_not_pretend_it_does(
    cluster: KwokCluster,
) -> None:
    # the node's one network is a loopback interface with no route: containerd refuses such a pod's
    # sandbox, so it stays Pending with no address. KWOK, were it managing the node as kwokctl starts
    # it (--manage-all-nodes), would report it Running with an address of its own.
    pod = json.loads(_pod("no-route", SANDBOX_IMAGE, ["/pause"], {}))
    del pod["spec"]["hostNetwork"]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    deadline = time.monotonic() + 120.0
    refused = ""
    while time.monotonic() < deadline and not refused:
        refused = cluster.kubectl(
            "get",
            "events",
            "-n",
            NAMESPACE,
            "--field-selector",
            "involvedObject.name=no-route,reason=FailedCreatePodSandBox",
            "-o",
            "name",
        ).strip()
        time.sleep(1.0)
    status = json.loads(cluster.kubectl("get", "pod", "no-route", "-n", NAMESPACE, "-o", "json"))["status"]
    assert refused, f"the kubelet never reported the sandbox refused; pod status: {status}"
    assert status["phase"] == "Pending", status
    assert not status.get("podIP"), status
    cluster.kubectl("delete", "pod", "no-route", "-n", NAMESPACE, "--wait=false")


KWOK_NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: rn-kwok
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/os: linux, type: kwok}
status:
  allocatable: {cpu: "32", memory: 128Gi, pods: "110"}
  capacity: {cpu: "32", memory: 128Gi, pods: "110"}
"""
SHOP = "shop"
WEB = f"apps/Deployment/{SHOP}/web"


@pytest.fixture(scope="module")
def local_prod(
    node_stack: LocalStack,
    cluster: KwokCluster,
    node_state: real_node.RealNodeState,
    kubetape_image: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """k8s/local/prod applied as docs/production.md says, its watcher and sink Ready; two KWOK nodes
    for the recorded workload. Returns the overlay's directory (in a copy of k8s/)."""
    overlay = local_prod_overlay.write_overlay(node_stack.info(), cluster, tmp_path_factory.mktemp("k8s"))
    cluster.kubectl("apply", "-k", str(overlay))
    skeleton = tmp_path_factory.mktemp("kwok-nodes") / "node.yaml"
    skeleton.write_text(KWOK_NODE)
    node_stack.add_nodes(CLUSTER, skeleton, 2)
    for app in ("kubetape-watcher", "kubetape-sink"):
        local_prod_overlay.wait_ready(cluster, node_state, app)
    return overlay


def _scale(cluster: KwokCluster, replicas: int) -> None:
    made = deployment("web", SHOP, replicas, cpu="100m", memory="64Mi")
    made["spec"]["template"]["spec"]["nodeSelector"] = {"type": "kwok"}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(made))


def test_k8s_prod_runs_on_the_real_node_as_it_would_in_production(
    cluster: KwokCluster, node_state: real_node.RealNodeState, local_prod: Path
) -> None:
    rbac = [
        d for d in yaml.safe_load_all((local_prod_overlay.REPO_ROOT / "k8s/prod/rbac.yaml").read_text()) if d
    ]
    (role,) = [d for d in rbac if d["kind"] == "ClusterRole"]
    applied = json.loads(cluster.kubectl("get", "clusterrole", role["metadata"]["name"], "-o", "json"))
    assert applied["rules"] == role["rules"], "the overlay must grant exactly k8s/prod's RBAC"
    watcher_sa = f"system:serviceaccount:{local_prod_overlay.NAMESPACE}:kubetape-watcher"
    for verb, resource, allowed in (
        ("watch", "deployments.apps", "yes"),
        ("list", "secrets", "no"),
        ("create", "pods", "no"),
    ):
        answer = subprocess.run(
            [
                str(cluster.bin_dir / "kubectl"),
                "--kubeconfig",
                str(cluster.kubeconfig),
                "auth",
                "can-i",
                verb,
                resource,
                "--all-namespaces",
                "--as",
                watcher_sa,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        ).stdout.strip()
        assert answer == allowed, (
            f"kubetape-watcher may {verb} {resource}: {answer!r}, k8s/prod says {allowed}"
        )
    for app, account in (("kubetape-watcher", "kubetape-watcher"), ("kubetape-sink", "kubetape-sink")):
        (pod,) = local_prod_overlay.pods(cluster, app)
        assert pod["spec"]["serviceAccountName"] == account
        assert pod["spec"]["nodeName"] == node_state.node
        assert pod["status"]["podIP"] == "127.0.0.1"
        # what the container's process really is on the host, not only what its spec asks
        uid, read_only_root = local_prod_overlay.process_identity(
            local_prod_overlay.container_pid(node_state, pod)
        )
        assert uid == 10001, f"{app} runs as uid {uid}, not the image's non-root user"
        assert read_only_root, f"{app}'s root filesystem is writable"
    (sink,) = local_prod_overlay.pods(cluster, "kubetape-sink")
    mounts = sink["spec"]["containers"][0].get("volumeMounts", [])
    assert not [m for m in mounts if "serviceaccount" in m["mountPath"]], "the sink needs no API token"


def test_the_recording_keeps_every_step_across_deleted_and_killed_pods(
    node_stack: LocalStack,
    cluster: KwokCluster,
    node_state: real_node.RealNodeState,
    local_prod: Path,
    tmp_path: Path,
) -> None:
    cluster.kubectl("create", "namespace", SHOP)
    applied = [1, 3]
    for replicas in applied:
        _scale(cluster, replicas)
    # the watcher's pod deleted (Recreate: its replacement relists)
    (old,) = local_prod_overlay.pods(cluster, "kubetape-watcher")
    cluster.kubectl("delete", "pod", "-n", local_prod_overlay.NAMESPACE, old["metadata"]["name"])
    local_prod_overlay.wait_ready(cluster, node_state, "kubetape-watcher", not_named=old["metadata"]["name"])
    applied.append(2)
    _scale(cluster, 2)
    # the sink's pod deleted (SIGTERM flushes its open segments), then its replacement's process killed
    (old,) = local_prod_overlay.pods(cluster, "kubetape-sink")
    cluster.kubectl("delete", "pod", "-n", local_prod_overlay.NAMESPACE, old["metadata"]["name"])
    sink = local_prod_overlay.wait_ready(
        cluster, node_state, "kubetape-sink", not_named=old["metadata"]["name"]
    )
    applied.append(4)
    _scale(cluster, 4)
    os.kill(local_prod_overlay.container_pid(node_state, sink), signal.SIGKILL)
    local_prod_overlay.wait_ready(cluster, node_state, "kubetape-sink", restarted=True)
    applied.append(5)
    _scale(cluster, 5)
    deadline = time.monotonic() + 240.0
    steps: list[int] = []
    error = ""
    while time.monotonic() < deadline and steps != applied:
        steps, error = local_prod_overlay.exported_replicas(node_stack.info(), tmp_path / "export.kts", WEB)
        time.sleep(3.0)
    assert steps == applied, f"the store's export recorded {WEB} at {steps}, applied {applied} ({error})"


def test_stack_down_leaves_nothing_of_the_node(
    node_stack: LocalStack, node_state: real_node.RealNodeState, kubetape_image: str
) -> None:
    # a pod still running when the stack goes down: its processes, mounts and cgroups must go too
    cluster = node_stack.cluster(CLUSTER, node_stack.info().bin_dir)
    # it serves HTTP on its pod IP and is Ready once the kubelet's probe reaches it there, as
    # k8s/prod's watcher and sink do
    serve = ["sh", "-c", 'exec python -m http.server --bind "$POD_IP" 18099']
    pod = json.loads(_pod("server", kubetape_image, serve, {}))
    container = pod["spec"]["containers"][0]
    container["env"] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    container["readinessProbe"] = {"httpGet": {"path": "/", "port": 18099}, "periodSeconds": 2}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    deadline = time.monotonic() + 120.0
    status: dict[str, Any] = {}
    ready = False
    while time.monotonic() < deadline and not ready:
        status = json.loads(cluster.kubectl("get", "pod", "server", "-o", "json"))["status"]
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
        time.sleep(1.0)
    assert ready, f"the pod did not become Ready: {status}"
    assert status["podIP"] == "127.0.0.1"
    running = StackState.load(node_stack.state_path).real_node
    assert running is not None
    assert real_node.leftovers(running), "a running node should be visible to the leftover check"
    node_stack.down()
    assert real_node.leftovers(running) == []
    for pid in (running.kubelet_pid, running.containerd_pid):
        assert pid is not None
        assert not pid_alive(pid)
    assert not Path(running.directory).exists()
