"""k8s/local/prod (k8s/prod on the stack's real node) for the real node's tests: the overlay's per-stack
files written from the stack, kubetape's pods found and waited for, their containers' processes looked
at on the host, and the store's export read back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from pipeline.formats.trace import initial_events, read_trace
from pipeline.model.events import EventType
from pipeline.stack import real_node, s3
from pipeline.stack.kwok import KwokCluster
from pipeline.stack.state import StackInfo

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "kubetape"
CLUSTER_ID = "prod"  # k8s/prod's kustomization: the overlay keeps it
STORE = f"s3://{s3.BUCKET}/segments/local-prod"
KUBETAPE = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin" / "kubetape"


def write_overlay(info: StackInfo, cluster: KwokCluster, into: Path) -> Path:
    """A copy of the repository's k8s/ with the overlay's per-stack files written as docs/production.md
    says; returns the overlay's directory. A copy, so that the checkout stays untouched and the overlay
    still reaches ../../prod."""
    shutil.copytree(REPO_ROOT / "k8s", into / "k8s")
    overlay = into / "k8s" / "local" / "prod"
    assert info.s3_endpoint, "the stack runs no S3 server"
    (overlay / "kafka.env").write_text(f"KUBETAPE_BOOTSTRAP={info.bootstrap}\n")
    (overlay / "s3.env").write_text(
        "\n".join(
            [
                f"KUBETAPE_SEGMENT_STORE={STORE}",
                f"AWS_ENDPOINT_URL={info.s3_endpoint}",
                f"AWS_ACCESS_KEY_ID={s3.ACCESS_KEY}",
                f"AWS_SECRET_ACCESS_KEY={s3.SECRET_KEY}",
                f"AWS_REGION={s3.REGION}",
            ]
        )
        + "\n"
    )
    env = real_node.in_cluster_env(cluster)
    (overlay / "apiserver.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return overlay


def pods(cluster: KwokCluster, app: str) -> list[dict[str, Any]]:
    listed = json.loads(
        cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={app}", "-o", "json")
    )
    return list(listed["items"])


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def container_log(node_state: real_node.RealNodeState, pod: dict[str, Any]) -> str:
    """The last lines the pod's containers wrote (the kubelet's files: `kubectl logs` is refused here)."""
    meta = pod["metadata"]
    logs = sorted(node_state.layout.pod_logs.glob(f"{NAMESPACE}_{meta['name']}_{meta['uid']}/*/*.log"))
    return "\n".join(line.split(" ", 3)[-1] for log in logs for line in log.read_text().splitlines()[-15:])


def wait_ready(
    cluster: KwokCluster,
    node_state: real_node.RealNodeState,
    app: str,
    *,
    not_named: str | None = None,
    restarted: bool = False,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    """The one Ready pod of ``app`` (other than the deleted ``not_named``; with ``restarted``, one whose
    container restarted); the last state seen and its container's log in the error otherwise."""
    deadline = time.monotonic() + timeout_s
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen = [p for p in pods(cluster, app) if p["metadata"]["name"] != not_named]
        candidates = [p for p in seen if _ready(p) and "deletionTimestamp" not in p["metadata"]]
        if restarted:
            candidates = [p for p in candidates if restart_count(p) > 0]
        if len(candidates) == 1 and len(seen) == 1:
            return candidates[0]
        time.sleep(2.0)
    detail = [(p["metadata"]["name"], p.get("status"), container_log(node_state, p)) for p in seen]
    raise AssertionError(f"no single Ready {app} pod within {timeout_s:.0f}s; pods seen: {detail}")


def restart_count(pod: dict[str, Any]) -> int:
    return sum(int(c.get("restartCount", 0)) for c in pod.get("status", {}).get("containerStatuses", []))


def container_pid(node_state: real_node.RealNodeState, pod: dict[str, Any]) -> int:
    """The host PID of the pod's one container's main process, from the node's containerd."""
    (status,) = pod["status"]["containerStatuses"]
    container_id = status["containerID"].removeprefix("containerd://")
    layout = node_state.layout
    argv = ["ctr", "--address", str(layout.socket), "--namespace", real_node.CONTAINERD_NAMESPACE]
    done = subprocess.run([*argv, "tasks", "ls"], capture_output=True, text=True, check=True, timeout=60)
    for line in done.stdout.splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"containerd runs no task {container_id}: {done.stdout}")


def process_identity(pid: int) -> tuple[int, bool]:
    """The process's real user id, and whether its root filesystem is mounted read-only."""
    uid = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    # mountinfo: id parent major:minor root mount-point options ...
    (root,) = [
        line.split()
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        if line.split()[4] == "/"
    ]
    return uid, "ro" in root[5].split(",")


def exported_replicas(info: StackInfo, out: Path, owner_key: str) -> tuple[list[int], str]:
    """``kubetape export`` of the overlay's store, read from the host as a user would: the recorded
    ``spec.replicas`` of the owner's writes in order, repeats of one value (a relist) counted once; and
    the export's error, if it failed (nothing written yet)."""
    env = {
        **os.environ,
        **dict(line.removeprefix("export ").split("=", 1) for line in s3.env_lines(info.s3_endpoint or "")),
    }
    done = subprocess.run(
        [
            str(KUBETAPE),
            "export",
            "--segment-store",
            STORE,
            "--cluster",
            CLUSTER_ID,
            "--from",
            "-1h",
            "--to",
            "now",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        return [], done.stderr.strip()[-500:]
    steps: list[int] = []
    for event in initial_events(read_trace(out), time_ordered=True):
        if event.type is EventType.APPLIED and str(event.key) == owner_key and event.obj is not None:
            replicas = int(event.obj.get("spec", {}).get("replicas", 1))
            if not steps or steps[-1] != replicas:
                steps.append(replicas)
    return steps, ""
