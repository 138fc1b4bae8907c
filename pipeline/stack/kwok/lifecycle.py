"""A KWOK cluster's life: created (serialised across the machine's stacks, retried while its
controller does not serve), stopped and started again with its node leases released, deleted with
no process left behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from datetime import datetime
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.kwok.cluster import KwokCluster
from pipeline.stack.kwok.components import component_pid, start_stopped_components, wait_serving
from pipeline.stack.kwok.kwokctl_config import KWOK_METRICS_RESOURCES, write_kwokctl_config
from pipeline.stack.kwok.profiles import profile_configmap
from pipeline.stack.machine_locks import machine_lock
from pipeline.stack.processes import log_tail, pid_alive, port_open, terminate_process_group

CREATE_ATTEMPTS = 3
METRICS_SERVER = "metrics-server"
SERVING_TIMEOUT_S = 60.0
"""How long kwok-controller may take to serve after kwokctl returns: it first waits for the apiserver."""


def create_cluster(cluster: KwokCluster) -> None:
    """Create ``cluster`` and make sure its KWOK controller (and metrics-server, if any) is running.

    kwokctl picks each component's port when it creates a cluster, and the component binds it seconds
    later. Two stacks creating clusters at the same time (two checkouts' test runs, say) can pick the
    same free port: the loser's kwok-controller exits with "address already in use", kwokctl still
    reports success, and the cluster's pods then stay Pending forever. So creation is serialised across
    the machine's stacks, and a cluster whose controller is not serving is deleted and created again.
    """
    problem = ""
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        with machine_lock("kwokctl-create"):
            config = write_kwokctl_config(cluster)
            cluster.kwokctl(
                "create",
                "cluster",
                "--config",
                str(config),
                "--kubeconfig",
                "",
                "--wait",
                "3m",
                timeout_s=420.0,
            )
            problem = kwok_controller_problem(cluster, SERVING_TIMEOUT_S)
            if not problem and cluster.metrics_server is not None:
                problem = _metrics_server_problem(cluster)
        if not problem:
            break
        delete_cluster(cluster)
        if attempt == CREATE_ATTEMPTS:
            raise StackError(
                f"cluster {cluster.name!r}: a component did not stay up in {CREATE_ATTEMPTS} attempts "
                f"({problem}); is another program taking ports in 32000-32767 (kwokctl's range)?"
            )
    if not cluster.kubeconfig.exists():
        raise StackError(
            f"kwokctl created cluster {cluster.name!r} but wrote no kubeconfig at {cluster.kubeconfig}"
        )
    cluster.profile_path.write_text(cluster.profile.name + "\n")
    if cluster.metrics_server is not None:
        for resource in KWOK_METRICS_RESOURCES:
            _apply_when_served(cluster, resource)
        cluster.metrics_marker.write_text(str(cluster.metrics_server) + "\n")
    else:
        cluster.metrics_marker.unlink(missing_ok=True)
    if cluster.profile.name != "default":
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(profile_configmap(cluster.profile)))


def _metrics_server_problem(cluster: KwokCluster) -> str:
    """Why the cluster's metrics-server does not serve, after starting it again if it died starting
    up; empty when it serves. kwokctl starts it beside the apiserver, and it exits at once when the
    apiserver does not answer its first read in time ("TLS handshake timeout", seen under a load
    average of 14): nothing restarts it, the Metrics API stays unavailable for the cluster's life,
    and its port is free for another cluster to take."""
    if component_pid(cluster, METRICS_SERVER) is None:
        start_stopped_components(cluster)
    try:
        wait_serving(cluster, METRICS_SERVER)
    except StackError as exc:
        return str(exc)
    return ""


CRD_SERVED_TIMEOUT_S = 60.0


def _apply_when_served(cluster: KwokCluster, resource: Path) -> None:
    """``kubectl apply`` a KWOK custom resource, retrying while the apiserver does not serve its kind
    yet (kwokctl installs the CRDs as the cluster starts; a busy apiserver establishes them later)."""
    deadline = time.monotonic() + CRD_SERVED_TIMEOUT_S
    while True:
        try:
            cluster.kubectl("apply", "-f", str(resource))
            return
        except StackError as exc:
            if "no matches for kind" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(1.0)


def kwok_controller_problem(cluster: KwokCluster, timeout_s: float) -> str:
    """Why the cluster's kwok-controller is not serving (it exited, or its port stays closed within
    ``timeout_s``); empty when it serves."""
    pid_files = sorted((cluster.cluster_dir / "pids").glob("kwok-controller*.pid"))
    log_file = cluster.cluster_dir / "logs" / "kwok-controller.log"
    if not pid_files:
        return f"no kwok-controller pid file in {cluster.cluster_dir / 'pids'}"
    port = _configured_port(cluster, "kwokControllerPort")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pid = int(pid_files[0].read_text().strip())
        except (OSError, ValueError):
            return f"unreadable {pid_files[0]}"
        if not pid_alive(pid):
            return f"kwok-controller exited; last lines of {log_file}:\n{log_tail(log_file, 5)}"
        if port is None or port_open(port):
            return ""
        if time.monotonic() > deadline:
            return f"kwok-controller not serving on 127.0.0.1:{port} after {timeout_s:.0f}s (log: {log_file})"
        time.sleep(0.25)


def _configured_port(cluster: KwokCluster, option: str) -> int | None:
    """A port kwokctl chose for the cluster, from the configuration it saved (``kwok.yaml``)."""
    try:
        saved = (cluster.cluster_dir / "kwok.yaml").read_text()
    except OSError:
        return None
    found = re.search(rf"^\s*{option}:\s*(\d+)\s*$", saved, re.MULTILINE)
    return int(found.group(1)) if found else None


def created_with_metrics(cluster: KwokCluster) -> bool:
    """Whether an existing cluster was created with metrics-server."""
    return cluster.metrics_marker.exists()


def created_profile(cluster: KwokCluster) -> str:
    """The profile an existing cluster was created with ("default" for clusters older than profiles)."""
    try:
        return cluster.profile_path.read_text().strip() or "default"
    except FileNotFoundError:
        return "default"


def cluster_exists(cluster: KwokCluster) -> bool:
    return (cluster.cluster_dir / "kwok.yaml").exists() or cluster.kubeconfig.exists()


def start_cluster(cluster: KwokCluster) -> None:
    """Restart a stopped cluster's processes (its etcd data, and so its objects, are kept); returns once
    KWOK manages every node again, so pods bound to them run."""
    started = time.time()
    cluster.kwokctl("start", "cluster", "--wait", "3m", timeout_s=420.0)
    # A controller that did not stop through stop_cluster (killed, crashed) left its node leases taken;
    # KWOK takes a node only once its lease is free or expired (200 s), and retries every 50 s.
    _release_node_leases(cluster, renewed_before=started)
    _wait_nodes_managed(cluster, since=started)
    if created_with_metrics(cluster) and (problem := _metrics_server_problem(cluster)):
        raise StackError(problem)


def stop_cluster(cluster: KwokCluster) -> None:
    """Stop the cluster's processes. KWOK's controller goes first, and its node leases with it: a
    controller started later manages a node only once its lease is free, so a lease left behind would
    keep the restarted cluster's pods Pending for the lease's whole duration."""
    for pid in cluster_processes(cluster):
        if _executable(pid).endswith(os.sep + "kwok-controller"):
            terminate_process_group(pid, grace_s=10.0)
    with contextlib.suppress(StackError):  # an apiserver already down: start_cluster releases them
        _release_node_leases(cluster, renewed_before=time.time())
    cluster.kwokctl("stop", "cluster", timeout_s=120.0)
    for pid in cluster_processes(cluster):
        terminate_process_group(pid, grace_s=10.0)


NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_MANAGED_TIMEOUT_S = 150.0
"""Two of KWOK's lease renewal intervals (a quarter of its 200 s lease) and a margin."""


def _node_leases(cluster: KwokCluster) -> dict[str, float]:
    """Node name → when its lease was last renewed (epoch seconds; 0 when never)."""
    listed = json.loads(cluster.kubectl("get", "leases", "-n", NODE_LEASE_NAMESPACE, "-o", "json"))
    renewed = {}
    for lease in listed["items"]:
        stamp = (lease.get("spec") or {}).get("renewTime")
        renewed[lease["metadata"]["name"]] = (
            datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else 0.0
        )
    return renewed


def _release_node_leases(cluster: KwokCluster, *, renewed_before: float) -> None:
    stale = [name for name, renewed in _node_leases(cluster).items() if renewed < renewed_before]
    if stale:
        cluster.kubectl("delete", "leases", "-n", NODE_LEASE_NAMESPACE, "--ignore-not-found", *stale)


def _wait_nodes_managed(cluster: KwokCluster, *, since: float) -> None:
    deadline = time.monotonic() + NODE_MANAGED_TIMEOUT_S
    while True:
        nodes = cluster.kubectl("get", "nodes", "-o", "name").split()
        leases = _node_leases(cluster)
        unmanaged = sorted(name for node in nodes if leases.get(name := node.split("/", 1)[1], 0.0) < since)
        if not unmanaged:
            return
        if time.monotonic() > deadline:
            raise StackError(
                f"cluster {cluster.name!r}: KWOK took no fresh lease for {len(unmanaged)} node(s) "
                f"({', '.join(unmanaged[:5])}) within {NODE_MANAGED_TIMEOUT_S:.0f}s of starting, so their "
                f"pods stay Pending; see {cluster.cluster_dir / 'logs' / 'kwok-controller.log'}"
            )
        time.sleep(1.0)


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
        if (
            entry.name.isdigit()
            and _executable(int(entry.name)).startswith(prefix)
            and pid_alive(int(entry.name))
        ):
            pids.append(int(entry.name))
    return pids


def _executable(pid: int) -> str:
    """The process's argv[0]; empty once it is gone."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return ""
    return argv0.decode(errors="replace")
