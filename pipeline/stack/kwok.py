"""KWOK clusters on loopback: a real control plane (etcd, apiserver, controller-manager, scheduler)
with fake nodes, created and deleted with ``kwokctl`` using only locally built binaries."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pipeline.model.errors import StackError
from pipeline.stack.processes import log_tail, pid_alive, port_open, terminate_process_group
from pipeline.stack.versions import cache_root

RESOURCES = Path(__file__).parent / "resources"
DEFAULT_NODE_SKELETON = RESOURCES / "node-skeleton.yaml"
KWOK_STAGES = RESOURCES / "kwok-stages.yaml"
METRICS_SERVER_MANIFESTS = RESOURCES / "metrics-server"
"""A kustomize directory of metrics-server's own manifests: kwokctl would fetch them from the internet."""
KWOK_METRICS_RESOURCES = (RESOURCES / "metrics-resource.yaml", RESOURCES / "usage-from-annotation.yaml")
"""KWOK's emulated kubelet ``/metrics/resource`` per node, and pod usage read from the annotations
``kwok.x-k8s.io/usage-cpu`` / ``kwok.x-k8s.io/usage-memory`` (1m and 1Mi without them)."""
KWOK_METRICS_CRDS = ("Metric", "ClusterResourceUsage", "ResourceUsage")
RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"
"""Where metrics-server (>= 0.7) scrapes a node instead of the kubelet's /metrics/resource."""


def resource_metrics_path(node_name: str) -> str:
    """The path KWOK serves ``node_name``'s resource metrics at (metrics-resource.yaml's spec.path)."""
    return f"/metrics/nodes/{node_name}/metrics/resource"


# Replayed and test pods carrying this annotation (a Go duration or RFC3339 time) complete when it elapses.
LIFETIME_ANNOTATION = "kubetape.dev/lifetime"
PROFILE_CONFIGMAP = ("kube-system", "kubetape-cluster-profile")
"""Where a cluster states the profile it was created with; the replayer reads it for its report (the
name is repeated in pipeline.replay.profile, which must not import the stack layer)."""


@dataclass(frozen=True, slots=True)
class ClusterProfile:
    """Control-plane and KWOK settings of a simulated cluster (``kubetape stack up --profile NAME``).

    ``changes_scheduling`` names the settings that can change where pods land (not only how fast):
    they stay out of every profile but the ones named for them, and the replay report lists them.
    ``changes_scheduling_on_zoned_nodes`` names the settings that place pods as Kubernetes' defaults
    do on nodes labelled with a hostname and no zone (every stack node), and differently elsewhere:
    the replay report lists them once the cluster has any other node."""

    name: str
    apiserver_args: dict[str, str] = field(default_factory=dict)
    controller_manager_args: dict[str, str] = field(default_factory=dict)
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    """Fields of a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1); empty: none."""
    kwok_options: dict[str, Any] = field(default_factory=dict)
    """Options of a KwokConfiguration (the kwok controller)."""
    etcd_args: dict[str, str] = field(default_factory=dict)
    changes_scheduling: tuple[str, ...] = ()
    changes_scheduling_on_zoned_nodes: tuple[str, ...] = ()

    def settings(self) -> dict[str, dict[str, Any]]:
        """Every setting, by component: what the profile ConfigMap and the report show."""
        parts = {
            "kube-apiserver": self.apiserver_args,
            "kube-controller-manager": self.controller_manager_args,
            "kube-scheduler": self.scheduler_config,
            "kwok": self.kwok_options,
            "etcd": self.etcd_args,
        }
        return {k: v for k, v in parts.items() if v}


# Throughput settings for 1k-5k fake nodes and tens of thousands of pods. None of them changes a
# scheduling decision: more controller workers, more KWOK workers, the scheduler filtering and scoring
# with more goroutines, a larger etcd quota. The apiserver's in-flight limits are not among them:
# kwokctl's disableQPSLimits (every profile) already starts it with --max-requests-inflight=0 and
# --max-mutating-requests-inflight=0 (no limit) and without priority and fairness, and client QPS of
# the controllers and the scheduler at 5000. Measured with bench/bench_scale.py.
#
# The feature gates turn off Kubernetes 1.36's stale-read guard in four workload controllers (beta, on by
# default): a sync whose informer has not yet seen the controller's own last write fails and is
# retried through the workqueue's rate limiter (per item 5 ms doubling to 1,000 s, and 10 per second
# overall). On a control plane this loaded the informers always trail, so the ReplicaSet syncs failed
# by the thousand, their retries were spread over minutes, and no pod was created meanwhile (measured:
# the 1,000-node case stood at 4,793 Running pods for 62 s with the scheduler's queue empty, after
# 1,112 such failures). Without the guard the controllers act as before 1.36, where expectations
# already keep a ReplicaSet from creating a pod twice; what they converge to is the same.
_STALE_READ_GUARDS = ("DaemonSet", "Job", "ReplicaSet", "StatefulSet")
#
# The scheduler spreads by hostname only. Kubernetes' system-default spreading is two soft constraints,
# by kubernetes.io/hostname (maxSkew 3) and by topology.kubernetes.io/zone (maxSkew 5), for every pod
# of a ReplicaSet, StatefulSet or Service. On nodes without a zone label the zone constraint never
# scores (PodTopologySpread.Score skips a node without the key), but its PreScore still counts the
# matching pods on every node of the cluster, for every pod it schedules: a scan of all pods per pod,
# so scheduling slows as the cluster fills. Measured at 1,000 nodes: 59 % of the scheduler's CPU at
# 9,000-12,000 pods, binding 17-22 pods/s with its queue full; restarted with hostname-only spreading,
# the same scheduler in the same run bound 37 pods/s and emptied its queue. On nodes with a hostname
# and no zone label (every node the stack makes) the scores, and so the placements, are the
# default's; on zoned nodes zone spreading is lost, and the report says so
# (changes_scheduling_on_zoned_nodes).
_HOSTNAME_SPREADING = {
    "name": "PodTopologySpread",
    "args": {
        "defaultingType": "List",
        "defaultConstraints": [
            {"maxSkew": 3, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
    },
}
_LARGE_SCHEDULER = {
    "parallelism": 32,
    "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [_HOSTNAME_SPREADING]}],
}
_ZONE_SPREADING_DROPPED = (
    "kube-scheduler default topology spreading by hostname only (the default also spreads by "
    "topology.kubernetes.io/zone)",
)
_LARGE = ClusterProfile(
    name="large",
    controller_manager_args={
        "feature-gates": ",".join(f"StaleControllerConsistency{kind}=false" for kind in _STALE_READ_GUARDS),
        "concurrent-deployment-syncs": "25",
        "concurrent-replicaset-syncs": "25",
        "concurrent-statefulset-syncs": "10",
        "concurrent-job-syncs": "25",
        "concurrent-gc-syncs": "50",
        "concurrent-namespace-syncs": "25",
    },
    scheduler_config=_LARGE_SCHEDULER,
    changes_scheduling_on_zoned_nodes=_ZONE_SPREADING_DROPPED,
    kwok_options={
        "podPlayStageParallelism": 16,
        "nodePlayStageParallelism": 8,
        "nodeLeaseParallelism": 8,
        "podsOnNodeSyncParallelism": 4,
    },
    etcd_args={"quota-backend-bytes": str(8 * 1024**3)},
)
PROFILES: dict[str, ClusterProfile] = {
    "default": ClusterProfile(name="default"),
    "large": _LARGE,
    # the scheduler scores 10% of the feasible nodes (at least 100) instead of its adaptive 50%..5%:
    # a different node may win, so this one is named for what it changes
    "large-sampled": ClusterProfile(
        name="large-sampled",
        apiserver_args=_LARGE.apiserver_args,
        controller_manager_args=_LARGE.controller_manager_args,
        scheduler_config={**_LARGE.scheduler_config, "percentageOfNodesToScore": 10},
        kwok_options=_LARGE.kwok_options,
        etcd_args=_LARGE.etcd_args,
        changes_scheduling=("kube-scheduler percentageOfNodesToScore=10",),
        changes_scheduling_on_zoned_nodes=_LARGE.changes_scheduling_on_zoned_nodes,
    ),
}


def profile_named(name: str) -> ClusterProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise StackError(
            f"unknown stack profile {name!r}: choose one of {', '.join(PROFILES)} (see docs/stack.md, "
            f"'A simulated cluster sized for scale')"
        ) from None


@dataclass(frozen=True, slots=True)
class KwokCluster:
    """One named KWOK cluster of a stack."""

    name: str
    workdir: Path  # the stack's KWOK_WORKDIR
    bin_dir: Path
    profile: ClusterProfile = PROFILES["default"]
    metrics_server: Path | None = None
    """The metrics-server binary, for a cluster that serves the Metrics API over KWOK's emulated
    kubelet metrics (created with it; a restart keeps it)."""

    @property
    def cluster_dir(self) -> Path:
        return self.workdir / "clusters" / self.name

    @property
    def kubeconfig(self) -> Path:
        return self.cluster_dir / "kubeconfig.yaml"

    @property
    def profile_path(self) -> Path:
        """The name of the profile the cluster was created with (beside kwokctl's files, which a
        restart of the cluster keeps)."""
        return self.workdir / f"profile-{self.name}.txt"

    @property
    def metrics_marker(self) -> Path:
        """Present when the cluster was created with metrics-server."""
        return self.workdir / f"metrics-{self.name}.txt"

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
        try:
            result = subprocess.run(
                argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(
                f"`kubectl {' '.join(args)}` on cluster {self.name!r} timed out after {timeout_s:.0f}s: "
                "its apiserver is overloaded or down (its log: "
                f"{self.cluster_dir / 'logs' / 'kube-apiserver.log'})"
            ) from exc
        if result.returncode != 0:
            raise StackError(
                f"`kubectl {' '.join(args)}` on cluster {self.name!r} failed: {result.stderr.strip()[-1500:]}"
            )
        return result.stdout


def _args(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"key": k, "value": v} for k, v in values.items()]


def write_kwokctl_config(cluster: KwokCluster) -> Path:
    """A kwokctl configuration that uses only our binaries, binds everything to 127.0.0.1, and applies
    the cluster's profile."""
    b = cluster.bin_dir
    profile = cluster.profile
    options: dict[str, Any] = {
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
    }
    if cluster.metrics_server is not None:
        options.update(
            {
                "enable": ["metrics-server"],
                "metricsServerBinary": str(cluster.metrics_server),
                # a kustomize directory in the repo: offline, and no path into a Go module cache
                "metricsServerManifests": [str(METRICS_SERVER_MANIFESTS)],
                "enableCRDs": list(KWOK_METRICS_CRDS),
            }
        )
    path = cluster.workdir / f"kwokctl-{cluster.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if profile.scheduler_config:
        scheduler = cluster.workdir / f"kube-scheduler-{cluster.name}.yaml"
        scheduler.write_text(json.dumps(scheduler_configuration(profile), indent=2) + "\n")
        options["kubeSchedulerConfig"] = str(scheduler)
    patches: list[dict[str, Any]] = [
        # Test clusters: durability is not the point, and fsync dominates etcd on small disks.
        {"name": "etcd", "extraArgs": _args({"unsafe-no-fsync": "true", **profile.etcd_args})},
        # The default /24 allows ~253 Services; replays of real clusters need more.
        {
            "name": "kube-apiserver",
            "extraArgs": _args({"service-cluster-ip-range": "10.96.0.0/16", **profile.apiserver_args}),
        },
    ]
    if profile.controller_manager_args:
        patches.append(
            {"name": "kube-controller-manager", "extraArgs": _args(profile.controller_manager_args)}
        )
    documents: list[dict[str, Any]] = [
        {
            "kind": "KwokctlConfiguration",
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "options": options,
            "componentsPatches": patches,
        }
    ]
    if profile.kwok_options:
        # kwokctl hands KwokConfiguration documents of its config file to the kwok controller
        documents.append(
            {
                "kind": "KwokConfiguration",
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "options": profile.kwok_options,
            }
        )
    # JSON is valid YAML, so these documents need no YAML library here; the Stage documents follow.
    text = "".join(json.dumps(d, indent=2) + "\n---\n" for d in documents)
    path.write_text(text + KWOK_STAGES.read_text())
    return path


SCHEDULER_CLIENT = {"qps": 5000, "burst": 10000}
"""The scheduler's client limits with a configuration file: kwokctl's disableQPSLimits, restated.

kube-scheduler ignores ``--kube-api-qps`` and ``--kube-api-burst`` once it has a ``--config``, so
kwokctl's flags stop applying to a profile's scheduler and it falls back to the configuration's
default of 50 requests per second, one per pod bound. Measured at 1,000 nodes in profile large
before this was set: the scheduler's bindings waited up to 33 s on client-side throttling, and its
ceiling was 51 pods per second, its request limit."""


def scheduler_configuration(profile: ClusterProfile) -> dict[str, Any]:
    """The profile's KubeSchedulerConfiguration (kwokctl fills in clientConnection.kubeconfig)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": dict(SCHEDULER_CLIENT),
        **profile.scheduler_config,
    }


def profile_configmap(profile: ClusterProfile) -> dict[str, Any]:
    """The ConfigMap stating the cluster's profile, for the replay report (k8s/sim ships the same)."""
    namespace, name = PROFILE_CONFIGMAP
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "kubetape"},
        },
        "data": {
            "profile": profile.name,
            "settings": json.dumps(profile.settings(), sort_keys=True),
            "changesScheduling": json.dumps(list(profile.changes_scheduling)),
            "changesSchedulingOnZonedNodes": json.dumps(list(profile.changes_scheduling_on_zoned_nodes)),
        },
    }


CREATE_ATTEMPTS = 3
SERVING_TIMEOUT_S = 60.0
"""How long kwok-controller may take to serve after kwokctl returns: it first waits for the apiserver."""


def create_cluster(cluster: KwokCluster) -> None:
    """Create ``cluster`` and make sure its KWOK controller is running.

    kwokctl picks each component's port when it creates a cluster, and the component binds it seconds
    later. Two stacks creating clusters at the same time (two checkouts' test runs, say) can pick the
    same free port: the loser's kwok-controller exits with "address already in use", kwokctl still
    reports success, and the cluster's pods then stay Pending forever. So creation is serialised across
    the machine's stacks, and a cluster whose controller is not serving is deleted and created again.
    """
    problem = ""
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        with _machine_lock("kwokctl-create"):
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
        if not problem:
            break
        delete_cluster(cluster)
        if attempt == CREATE_ATTEMPTS:
            raise StackError(
                f"cluster {cluster.name!r}: kwok-controller did not stay up in {CREATE_ATTEMPTS} attempts "
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


@contextlib.contextmanager
def _machine_lock(name: str) -> Iterator[None]:
    """An exclusive lock shared by every stack of this machine (in the build cache, which they share)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


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
