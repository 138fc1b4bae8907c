"""The local stack: one Kafka broker (or a cluster of several: ``--brokers 3``), one S3 server (s3proxy)
and any number of named KWOK clusters, as plain processes.

State (ports, pids, cluster names) lives in ``<stack dir>/state.json`` so that ``kubetape stack
status|env|down`` work from any later process. ``up`` is idempotent: what is already running is kept.
The state's records are :mod:`.state`; how the Kafka nodes run as one cluster is :mod:`.kafka_nodes`.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from pipeline.model.errors import StackError
from pipeline.stack import kafka_security, karpenter, kwok, real_node, s3
from pipeline.stack.build import ensure_kafka, ensure_kube_binaries, ensure_kubelet, ensure_metrics_server
from pipeline.stack.kafka_nodes import KafkaNodes
from pipeline.stack.node_images import ensure_sandbox_archive
from pipeline.stack.processes import pid_alive, port_open
from pipeline.stack.progress import Reporter, silent_reporter
from pipeline.stack.state import StackInfo, StackState
from pipeline.stack.versions import StackVersions, cache_root

DEFAULT_CLUSTERS = ("source", "sim")
AUTOSCALERS = ("karpenter",)
"""Autoscalers the stack can run beside a cluster (Cluster Autoscaler is not on the module proxy)."""


def default_stack_dir() -> Path:
    configured = os.environ.get("KUBETAPE_STACK_DIR")
    return Path(configured).expanduser() if configured else cache_root() / "stack" / "default"


class _Process(Protocol):
    """The saved state of a component that runs as one process (the S3 server)."""

    pid: int | None


class LocalStack(KafkaNodes):
    """Builds (once), starts, inspects and stops the local stack kept in ``stack_dir``."""

    def __init__(
        self,
        stack_dir: Path | None = None,
        versions: StackVersions | None = None,
        report: Reporter = silent_reporter,
    ) -> None:
        self.stack_dir = (stack_dir or default_stack_dir()).resolve()
        self.versions = versions or StackVersions()
        self.report = report
        self.state_path = self.stack_dir / "state.json"

    # ---- paths -------------------------------------------------------------------------------
    @property
    def kwok_workdir(self) -> Path:
        return self.stack_dir / "kwok"

    def cluster(self, name: str, bin_dir: Path) -> kwok.KwokCluster:
        return kwok.KwokCluster(name=name, workdir=self.kwok_workdir, bin_dir=bin_dir)

    # ---- lifecycle ---------------------------------------------------------------------------
    def build(self) -> tuple[Path, Path]:
        """Make sure the stack's core (Kafka, the clusters) is built and cached; returns (kafka libs,
        kube bin dir). Karpenter is built by :meth:`build_autoscaler`, on first use or by
        ``kubetape stack build --autoscaler karpenter``."""
        # The jars come from Maven Central (network) while the cluster binaries compile (CPU): on a new
        # machine fetching them beside the Go build takes them off the first start's path.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="stack-jars") as jars:
            fetched = jars.submit(self._fetch_jars)
            fetched.add_done_callback(self._say_if_failed)
            bin_dir = ensure_kube_binaries(self.versions, self.report)
            return fetched.result(), bin_dir

    def _say_if_failed(self, fetched: Future[Path]) -> None:
        """Say at once that the jars failed, not only once the cluster build ends (it is not stopped)."""
        if (error := fetched.exception()) is not None:
            self.report(f"fetching the jars failed (reported again when the cluster build ends): {error}")

    def _fetch_jars(self) -> Path:
        """The broker's jars and the S3 server's jar; returns the broker's jar directory."""
        libs = ensure_kafka(self.versions, self.report)
        s3.ensure_s3proxy(self.versions, self.report)
        return libs

    def build_autoscaler(self) -> Path:
        """Build and cache Karpenter's KWOK provider; returns its directory (binary and CRDs)."""
        return karpenter.ensure_karpenter(self.versions, self.report)

    def build_real_node(self) -> dict[str, str]:
        """Build and cache what a real node runs that is not a Debian package: the kubelet and the
        sandbox image."""
        return {
            "kubelet": str(ensure_kubelet(self.versions, self.report)),
            "sandbox_image": str(ensure_sandbox_archive(self.report)),
        }

    def build_metrics_server(self) -> Path:
        """Build and cache metrics-server; returns its binary."""
        return ensure_metrics_server(self.versions, self.report)

    def up(
        self,
        clusters: Iterable[str] = DEFAULT_CLUSTERS,
        *,
        profile: str = "default",
        metrics: bool = False,
        autoscaled: Iterable[str] = (),
        autoscaler_settings: karpenter.KarpenterSettings | None = None,
        kafka_security_mode: str | None = None,
        brokers: int | None = None,
        real_node_cluster: str | None = None,
    ) -> StackInfo:
        """Start Kafka and ``clusters``; new clusters get the settings of ``profile`` (kwok.PROFILES);
        Karpenter runs beside each cluster named in ``autoscaled``; ``kafka_security_mode`` secures the
        broker (``sasl-ssl`` or ``mtls``: TLS, SCRAM, mutual TLS and ACLs per kubetape principal; None:
        as the running stack has it, plaintext for a new one); ``brokers``: how many Kafka nodes a new
        stack runs (None: as the running stack has it, 1 for a new one); ``metrics``: new clusters serve
        the Metrics API (metrics-server over KWOK's emulated kubelet metrics, docs/metrics.md);
        ``real_node_cluster``: that cluster also gets a node run by a real kubelet over containerd
        (:mod:`.real_node`; one per stack)."""
        chosen = kwok.profile_named(profile)
        clusters = list(clusters)
        autoscaled = list(autoscaled)
        if real_node_cluster is not None and real_node_cluster not in clusters:
            raise StackError(
                f"--real-node {real_node_cluster!r} is not one of the clusters started "
                f"({', '.join(clusters)})"
            )
        for name in autoscaled:
            if name not in clusters:
                raise StackError(
                    f"--autoscaler-cluster {name!r} is not one of the clusters started "
                    f"({', '.join(clusters)})"
                )
        libs, bin_dir = self.build()
        metrics_server = self.build_metrics_server() if metrics else None
        state = StackState.load(self.state_path)
        self._ensure_kafka_running(state, libs, kafka_security_mode, brokers)
        state.save(self.state_path)
        self.start_s3(state)
        for name in clusters:
            validate_cluster_name(name)
            cluster = kwok.KwokCluster(name, self.kwok_workdir, bin_dir, chosen, metrics_server)
            if kwok.cluster_exists(cluster):
                if (existing := kwok.created_profile(cluster)) != profile:
                    raise StackError(
                        f"cluster {name!r} was created with profile {existing!r}, not {profile!r}; "
                        f"`kubetape stack down` first to recreate it with another profile"
                    )
                if metrics and not kwok.created_with_metrics(cluster):
                    raise StackError(
                        f"cluster {name!r} was created without --metrics; `kubetape stack down` first "
                        f"to recreate it with metrics-server, or start another cluster with --metrics"
                    )
                if not _apiserver_healthy(cluster):
                    self.report(f"cluster {name!r}: restarting its stopped processes")
                    kwok.start_cluster(cluster)
            else:
                self.report(
                    f"cluster {name!r}: creating (etcd, apiserver, controller-manager, scheduler, kwok)"
                    + ("" if profile == "default" else f", profile {profile!r}")
                    + (", metrics-server" if metrics else "")
                )
                started = time.monotonic()
                kwok.create_cluster(cluster)
                self.report(f"cluster {name!r}: ready in {time.monotonic() - started:.1f}s")
            if name not in state.clusters:
                state.clusters.append(name)
            state.save(self.state_path)
        for name in autoscaled:
            self.start_karpenter(name, autoscaler_settings or karpenter.KarpenterSettings())
        if real_node_cluster is not None:
            self.start_real_node(real_node_cluster)
        return self.info(bin_dir, StackState.load(self.state_path))

    @property
    def real_node_dir(self) -> Path:
        return self.stack_dir / "real-node"

    def start_real_node(self, cluster_name: str) -> real_node.RealNodeState:
        """Give ``cluster_name`` a node run by a real kubelet (built on first use), or start again the
        processes of the one it has; one real node per stack."""
        state = StackState.load(self.state_path)
        existing = state.real_node
        if existing is not None and existing.cluster != cluster_name:
            raise StackError(
                f"the stack's real node belongs to cluster {existing.cluster!r}; `kubetape stack down` "
                f"first to give it to {cluster_name!r}"
            )
        cluster = self.cluster(cluster_name, self._existing_bin_dir())
        self.report(f"real node for cluster {cluster_name!r}: starting containerd and the kubelet")
        started = time.monotonic()
        node = real_node.start(
            cluster, self.real_node_dir, self.versions, self.report, existing, record=self._record_real_node
        )
        self.report(f"real node {node.node}: Ready in {time.monotonic() - started:.1f}s")
        return node

    def _record_real_node(self, node: real_node.RealNodeState) -> None:
        """Save the node's processes as each starts: a start that fails later still leaves them to down."""
        state = StackState.load(self.state_path)
        state.real_node = node
        state.save(self.state_path)

    def stop_real_node(self) -> None:
        """Stop the real node and remove everything it made on the machine (its files stay)."""
        state = StackState.load(self.state_path)
        if state.real_node is None:
            return
        real_node.stop(state.real_node)
        state.real_node = None
        state.save(self.state_path)
        self.report("real node stopped")

    def start_karpenter(self, cluster_name: str, settings: karpenter.KarpenterSettings) -> None:
        """Run Karpenter against ``cluster_name`` with ``settings``; one already running with other
        settings (a replay scales the batch windows with its speed) is restarted."""
        settings = replace(settings, instance_types=settings.instance_types.resolve())
        state = StackState.load(self.state_path)
        if cluster_name not in state.clusters:
            raise StackError(f"cluster {cluster_name!r} is not part of the stack in {self.stack_dir}")
        running = state.karpenter.get(cluster_name)
        if running is not None and karpenter.healthy(running) and running.settings() == settings:
            return
        if running is not None:
            karpenter.stop(running)
        build = self.build_autoscaler()
        cluster = self.cluster(cluster_name, self._existing_bin_dir())
        karpenter.install_crds(cluster, build)
        self.report(f"Karpenter {self.versions.karpenter}: starting against cluster {cluster_name!r}")
        started = time.monotonic()
        state.karpenter[cluster_name] = karpenter.start(cluster, build, settings)
        state.save(self.state_path)
        self.report(f"Karpenter {self.versions.karpenter}: ready in {time.monotonic() - started:.1f}s")

    def stop_karpenter(self, cluster_name: str) -> None:
        state = StackState.load(self.state_path)
        running = state.karpenter.pop(cluster_name, None)
        if running is not None:
            karpenter.stop(running)
            state.save(self.state_path)

    def cluster_for(self, kubeconfig: Path) -> kwok.KwokCluster | None:
        """The cluster of this stack whose kubeconfig is ``kubeconfig``; None when none is."""
        bin_dir = self._existing_bin_dir()
        for name in StackState.load(self.state_path).clusters:
            cluster = self.cluster(name, bin_dir)
            if cluster.kubeconfig.resolve() == kubeconfig.resolve():
                return cluster
        return None

    def karpenter_for(self, kubeconfig: Path) -> str | None:
        """The cluster of this stack whose kubeconfig is ``kubeconfig`` and that runs Karpenter."""
        state = StackState.load(self.state_path)
        bin_dir = self._existing_bin_dir()
        for name in state.karpenter:
            if self.cluster(name, bin_dir).kubeconfig.resolve() == kubeconfig.resolve():
                return name
        return None

    def stop_kafka(self) -> None:
        """Stop every broker but keep their data (a later ``start_kafka`` resumes on the same ports)."""
        state = StackState.load(self.state_path)
        if state.kafka is not None:
            self._stop_kafka_nodes(state.kafka)
            state.save(self.state_path)

    def start_kafka(self, security: str | None = None, brokers: int | None = None) -> StackInfo:
        """Start (or restart) only the brokers, any that do not run; ``security`` and ``brokers`` as in
        :meth:`up` (None: as it was)."""
        libs = ensure_kafka(self.versions, self.report)  # the broker alone: no cluster binaries needed
        state = StackState.load(self.state_path)
        self._ensure_kafka_running(state, libs, security, brokers)
        state.save(self.state_path)
        return self.info(state=state)

    def start_s3(self, state: StackState | None = None) -> str:
        """Start the S3 server unless it runs (same port and data as before); returns its endpoint."""
        state = state or StackState.load(self.state_path)
        state.s3 = s3.ensure_running(self.stack_dir / "s3", state.s3, self.versions, self.report)
        state.save(self.state_path)
        return state.s3.endpoint

    def stop_s3(self) -> None:
        """Stop the S3 server but keep its objects (``start_s3`` resumes on the same port)."""
        self._stop_keeping_data(lambda state: state.s3, s3.stop_server)

    def _stop_keeping_data(
        self, component: Callable[[StackState], _Process | None], stop: Callable[[int], None]
    ) -> None:
        """Stop one component's process and forget its pid; its ports and data stay for the restart."""
        state = StackState.load(self.state_path)
        running = component(state)
        if running is not None and running.pid:
            stop(running.pid)
            running.pid = None
            state.save(self.state_path)

    def down(self, *, keep_data: bool = False) -> None:
        """Stop every process of the stack; unless ``keep_data``, delete its data too."""
        state = StackState.load(self.state_path)
        bin_dir = self._existing_bin_dir()
        errors: list[str] = []
        # the real node first: its kubelet and pods would outlive their cluster's apiserver otherwise
        if state.real_node is not None:
            try:
                real_node.stop(state.real_node)
                state.real_node = None
                self.report("real node stopped")
            except StackError as exc:
                errors.append(str(exc))
        # autoscalers next: a Karpenter outliving its cluster's apiserver would only log errors
        for name, running in list(state.karpenter.items()):
            karpenter.stop(running)
            del state.karpenter[name]
            self.report(f"Karpenter for cluster {name!r} stopped")
        for name in list(state.clusters):
            cluster = self.cluster(name, bin_dir)
            try:
                if keep_data:
                    kwok.stop_cluster(cluster)
                else:
                    kwok.delete_cluster(cluster)
            except StackError as exc:
                errors.append(str(exc))
            self.report(f"cluster {name!r}: {'stopped' if keep_data else 'deleted'}")
        if state.kafka is not None:
            self._stop_kafka_nodes(state.kafka)
        if state.s3 and state.s3.pid:
            s3.stop_server(state.s3.pid)
            self.report("S3 server stopped")
            state.s3.pid = None
        if errors:
            state.save(self.state_path)
            raise StackError(
                "some components (clusters, the real node) did not stop cleanly (data kept for inspection):\n"
                + "\n".join(errors)
            )
        if keep_data:
            state.save(self.state_path)
        else:
            shutil.rmtree(self.stack_dir, ignore_errors=True)

    def delete_cluster(self, name: str) -> None:
        """Delete one cluster of the stack and forget it (a test's own cluster, say)."""
        state = StackState.load(self.state_path)
        cluster = self.cluster(name, self._existing_bin_dir())
        if state.real_node is not None and state.real_node.cluster == name:
            self.stop_real_node()
            state = StackState.load(self.state_path)
        if name in state.karpenter:
            self.stop_karpenter(name)
            state = StackState.load(self.state_path)
        kwok.delete_cluster(cluster)
        for leftover in (cluster.profile_path, cluster.metrics_marker):
            leftover.unlink(missing_ok=True)
        state.clusters = [n for n in state.clusters if n != name]
        state.save(self.state_path)
        self.report(f"cluster {name!r}: deleted")

    def add_nodes(
        self, cluster_name: str, skeleton: Path, count: int, prefix: str | None = None
    ) -> list[str]:
        cluster = self.cluster(cluster_name, self._existing_bin_dir())
        return kwok.add_nodes(cluster, skeleton, count, prefix, report=self.report)

    # ---- inspection --------------------------------------------------------------------------
    def _existing_bin_dir(self) -> Path:
        from pipeline.stack.versions import kube_bin_dir

        return kube_bin_dir(self.versions)

    def info(self, bin_dir: Path | None = None, state: StackState | None = None) -> StackInfo:
        state = state or StackState.load(self.state_path)
        if state.kafka is None:
            raise StackError(f"no stack is running in {self.stack_dir}; run `kubetape stack up` first")
        bin_dir = bin_dir or self._existing_bin_dir()
        kubeconfigs = {name: self.cluster(name, bin_dir).kubeconfig for name in state.clusters}
        s3_endpoint = state.s3.endpoint if state.s3 else None
        configs: dict[str, Path] = {}
        if state.kafka.secured:
            files = self._kafka_layouts(state.kafka)[0].security_files
            mode = "mtls" if state.kafka.security == "mtls" else "sasl-ssl"
            configs = {who: files.client_config(who, mode) for who in kafka_security.PRINCIPALS}
        return StackInfo(
            self.stack_dir, state.kafka.bootstrap, kubeconfigs, bin_dir, s3_endpoint, kafka_configs=configs
        )

    def status(self) -> dict[str, object]:
        state = StackState.load(self.state_path)
        bin_dir = self._existing_bin_dir()
        kafka_status: dict[str, object] = {"running": False}
        if state.kafka:
            brokers = [
                {
                    "node": index,
                    "running": node.running and port_open(node.broker_port),
                    "pid": node.pid,
                    "port": node.broker_port,
                }
                for index, node in enumerate(state.kafka.nodes, 1)
            ]
            kafka_status = {
                "running": all(broker["running"] for broker in brokers),
                "bootstrap": state.kafka.bootstrap,
                "security": state.kafka.security,
                "brokers": brokers,
            }
        clusters = {}
        for name in state.clusters:
            cluster = self.cluster(name, bin_dir)
            clusters[name] = {
                "healthy": _apiserver_healthy(cluster),
                "kubeconfig": str(cluster.kubeconfig),
                "metrics": kwok.created_with_metrics(cluster),
            }
        autoscalers = {
            name: {
                "autoscaler": "karpenter",
                "healthy": karpenter.healthy(running),
                "pid": running.pid,
                "log": str(karpenter.log_path(self.cluster(name, bin_dir))),
            }
            for name, running in state.karpenter.items()
        }
        s3_status: dict[str, object] = {"running": False}
        if state.s3:
            running = bool(state.s3.pid and pid_alive(state.s3.pid)) and port_open(state.s3.port)
            s3_status = {"running": running, "pid": state.s3.pid, **s3.describe(state.s3.endpoint)}
        node = state.real_node
        return {
            "stack_dir": str(self.stack_dir),
            "kafka": kafka_status,
            "s3": s3_status,
            "clusters": clusters,
            "autoscalers": autoscalers,
            "real_node": None
            if node is None
            else real_node.status(
                node, self.cluster(node.cluster, bin_dir) if node.cluster in state.clusters else None
            ),
        }


def validate_cluster_name(name: str) -> None:
    if not name or not all(c.isalnum() or c == "-" for c in name) or not name[0].isalpha():
        raise StackError(
            f"cluster name {name!r} is invalid: use letters, digits and '-', starting "
            f"with a letter (e.g. 'source', 'sim')"
        )


def _apiserver_healthy(cluster: kwok.KwokCluster) -> bool:
    if not cluster.kubeconfig.exists():
        return False
    try:
        return cluster.kubectl("get", "--raw", "/readyz", timeout_s=10.0).strip() == "ok"
    except (StackError, OSError, TimeoutError):
        return False
    except Exception:
        return False
