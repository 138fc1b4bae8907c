"""KWOK clusters on loopback: a real control plane (etcd, apiserver, controller-manager, scheduler)
with fake nodes, created and deleted with ``kwokctl`` using only locally built binaries."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.processes import pid_alive, terminate_process_group

RESOURCES = Path(__file__).parent / "resources"
DEFAULT_NODE_SKELETON = RESOURCES / "node-skeleton.yaml"
KWOK_STAGES = RESOURCES / "kwok-stages.yaml"
# Replayed and test pods carrying this annotation (a Go duration or RFC3339 time) complete when it elapses.
LIFETIME_ANNOTATION = "kubetape.dev/lifetime"


@dataclass(frozen=True, slots=True)
class KwokCluster:
    """One named KWOK cluster of a stack."""

    name: str
    workdir: Path  # the stack's KWOK_WORKDIR
    bin_dir: Path

    @property
    def cluster_dir(self) -> Path:
        return self.workdir / "clusters" / self.name

    @property
    def kubeconfig(self) -> Path:
        return self.cluster_dir / "kubeconfig.yaml"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # kwokctl finds kubectl with LookPath and would otherwise download it: keep ours first on PATH.
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["KWOK_WORKDIR"] = str(self.workdir)
        return env

    def kwokctl(self, *args: str, timeout_s: float = 300.0) -> str:
        argv = [str(self.bin_dir / "kwokctl"), "--name", self.name, *args]
        try:
            result = subprocess.run(
                argv, env=self.env(), capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(
                f"`kwokctl {' '.join(args)}` for cluster {self.name!r} timed out after {timeout_s:.0f}s"
            ) from exc
        if result.returncode != 0:
            raise StackError(
                f"`kwokctl {' '.join(args)}` for cluster {self.name!r} failed "
                f"(exit {result.returncode}): {(result.stderr or result.stdout).strip()[-1500:]}"
            )
        return result.stdout

    def kubectl(self, *args: str, stdin: str | None = None, timeout_s: float = 120.0) -> str:
        argv = [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if result.returncode != 0:
            raise StackError(
                f"`kubectl {' '.join(args)}` on cluster {self.name!r} failed: {result.stderr.strip()[-1500:]}"
            )
        return result.stdout


def write_kwokctl_config(cluster: KwokCluster) -> Path:
    """A kwokctl configuration that uses only our binaries and binds everything to 127.0.0.1."""
    b = cluster.bin_dir
    config = {
        "kind": "KwokctlConfiguration",
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "options": {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "kubeApiserverBinary": str(b / "kube-apiserver"),
            "kubeControllerManagerBinary": str(b / "kube-controller-manager"),
            "kubeSchedulerBinary": str(b / "kube-scheduler"),
            "kubectlBinary": str(b / "kubectl"),
            "etcdBinary": str(b / "etcd"),
            "kwokControllerBinary": str(b / "kwok"),
            # Replays push far more than client-go's default 5 QPS through the controllers.
            "disableQPSLimits": True,
        },
        "componentsPatches": [
            # Test clusters: durability is not the point, and fsync dominates etcd on small disks.
            {"name": "etcd", "extraArgs": [{"key": "unsafe-no-fsync", "value": "true"}]},
            # The default /24 allows ~253 Services; replays of real clusters need more.
            {
                "name": "kube-apiserver",
                "extraArgs": [{"key": "service-cluster-ip-range", "value": "10.96.0.0/16"}],
            },
        ],
    }
    path = cluster.workdir / f"kwokctl-{cluster.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    # JSON is valid YAML, so the first document needs no YAML library here; the Stage documents follow.
    path.write_text(json.dumps(config, indent=2) + "\n---\n" + KWOK_STAGES.read_text())
    return path


def create_cluster(cluster: KwokCluster) -> None:
    config = write_kwokctl_config(cluster)
    cluster.kwokctl(
        "create", "cluster", "--config", str(config), "--kubeconfig", "", "--wait", "3m", timeout_s=420.0
    )
    if not cluster.kubeconfig.exists():
        raise StackError(
            f"kwokctl created cluster {cluster.name!r} but wrote no kubeconfig at {cluster.kubeconfig}"
        )


def cluster_exists(cluster: KwokCluster) -> bool:
    return (cluster.cluster_dir / "kwok.yaml").exists() or cluster.kubeconfig.exists()


def start_cluster(cluster: KwokCluster) -> None:
    """Restart a stopped cluster's processes (its etcd data, and so its objects, are kept)."""
    cluster.kwokctl("start", "cluster", "--wait", "3m", timeout_s=420.0)


def stop_cluster(cluster: KwokCluster) -> None:
    cluster.kwokctl("stop", "cluster", timeout_s=120.0)
    for pid in cluster_processes(cluster):
        terminate_process_group(pid, grace_s=10.0)


def delete_cluster(cluster: KwokCluster) -> None:
    """Delete the cluster and make sure none of its processes survives, even if kwokctl fails."""
    failure: StackError | None = None
    try:
        # kwokctl would edit ~/.kube/config on delete; point it at a private file instead.
        cluster.kwokctl(
            "delete",
            "cluster",
            "--kubeconfig",
            str(cluster.workdir / "kubeconfig-unused.yaml"),
            timeout_s=180.0,
        )
    except StackError as exc:
        failure = exc
    survivors = cluster_processes(cluster)
    for pid in survivors:
        terminate_process_group(pid, grace_s=10.0)
    if failure is not None and cluster_processes(cluster):
        raise failure


def cluster_processes(cluster: KwokCluster) -> list[int]:
    """Pids of processes whose executable lives in this cluster's directory (kwokctl links them there)."""
    prefix = str(cluster.cluster_dir) + os.sep
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if argv0.startswith(prefix) and pid_alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def add_nodes(cluster: KwokCluster, skeleton: Path, count: int, prefix: str | None = None) -> list[str]:
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
        items.append(copy)
        names.append(name)
    node_list = {"apiVersion": "v1", "kind": "List", "items": items}
    # Nodes keep the status they are created with (as a kubelet's registration does), so capacity,
    # allocatable and taints arrive in one request; kwok's node-initialize stage then marks them Ready.
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(node_list))
    return names
