"""Karpenter with its KWOK cloud provider, as a plain process beside a KWOK cluster of the stack.

Built once per version, on first use, from the stack's Go module (``sigs.k8s.io/karpenter``, package
``kwok``; :mod:`pipeline.stack.go_module`) into ``<cache>/bin/karpenter-<version>…/`` with the CRDs of
the same version. Upstream binds its metrics and health endpoints to every interface
(``fmt.Sprintf(":%d", …)``) with no flag to change the address; the stack binds everything to
127.0.0.1, so the build patches those two lines in a private copy of the module's source and fails if
the patch no longer applies (a new version must be looked at, not run open to the network). The same
copy turns two consolidation timers that are constants upstream (the disruption polling period, the
validation delay of a consolidation command) into environment variables, so that a replay can divide
them by its speed like every other timer.

Karpenter runs outside the cluster: the cluster's kubeconfig, no leader election (v1.15 has no webhooks), its
instance types from a small file (the embedded list has 144 types, which costs a 2-core machine seconds
per scheduling simulation), and its batch windows as flags (the replay divides them by its speed).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.go_module import (
    KARPENTER_DIR,
    KARPENTER_PACKAGE,
    POLLING_PERIOD_ENV,
    VALIDATION_DELAY_ENV,
    build_go_programs,
    ensure_go_module,
)
from pipeline.stack.kwok import RESOURCES, KwokCluster
from pipeline.stack.machine_locks import build_once
from pipeline.stack.ports import free_port
from pipeline.stack.processes import (
    http_probe,
    pid_alive,
    spawn_detached,
    terminate_process_group,
    wait_until_ready,
)
from pipeline.stack.progress import Reporter
from pipeline.stack.versions import StackVersions, karpenter_dir

BINARY = "karpenter-kwok"
DEFAULT_INSTANCE_TYPES = RESOURCES / "karpenter-instance-types.json"
DEFAULT_NODE_CLASS = RESOURCES / "karpenter-nodeclass.yaml"
SYSTEM_NAMESPACE = "kube-system"
# The provider's CRDs live in two places of the module; NodeOverlays and CapacityBuffers are watched
# by Karpenter at start, so every chart CRD is installed, not only NodePool and NodeClaim.
_CRD_DIRS = ("kwok/charts/crds", "kwok/apis/crds")
READY_TIMEOUT_S = 180.0


def ensure_karpenter(versions: StackVersions, report: Reporter) -> Path:
    """Return the directory holding ``karpenter-kwok`` and ``crds/``, building them on first use (about
    25 s once the cluster's binaries are built: it shares their libraries)."""
    out = karpenter_dir(versions)
    build = functools.partial(_build_karpenter, versions, report)
    return build_once(versions.karpenter_key, out / ".complete", build, report, result=out)


def _build_karpenter(versions: StackVersions, report: Reporter) -> Path:
    out = karpenter_dir(versions)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    build_go_programs(
        versions,
        report,
        [KARPENTER_PACKAGE],
        partial,
        step=f"Karpenter {versions.karpenter} (KWOK provider): compiling",
    )
    # go names the binary after the package: kwok
    (partial / "kwok").replace(partial / BINARY)
    source = ensure_go_module(versions, report) / KARPENTER_DIR
    (partial / "crds").mkdir()
    for crd_dir in _CRD_DIRS:
        for crd in sorted((source / crd_dir).glob("*.yaml")):
            shutil.copy(crd, partial / "crds" / crd.name)
    if not (partial / "crds" / "karpenter.sh_nodepools.yaml").exists():
        raise StackError(f"Karpenter {versions.karpenter}'s module holds no NodePool CRD in {_CRD_DIRS}")
    (partial / ".complete").write_text(json.dumps({"built": time.time()}))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    report(f"Karpenter {versions.karpenter} cached in {out}")
    return out


@dataclass(frozen=True, slots=True)
class KarpenterSettings:
    """How Karpenter is started. Its timers are Karpenter's defaults unless a replay scales them."""

    batch_idle_s: float = 1.0
    batch_max_s: float = 10.0
    instance_types: Path = DEFAULT_INSTANCE_TYPES
    log_level: str = "info"
    polling_period_s: float = 10.0
    """How often the disruption controller looks for nodes to consolidate (patched in: KARPENTER_PATCHES)."""
    validation_delay_s: float = 15.0
    """How long a consolidation command waits before it is validated and acts (patched in)."""


@dataclass(slots=True)
class KarpenterState:
    """One running Karpenter, as the stack's state file keeps it."""

    cluster: str
    pid: int
    metrics_port: int
    health_port: int
    batch_idle_s: float
    batch_max_s: float
    instance_types: str
    polling_period_s: float = 10.0
    validation_delay_s: float = 15.0

    def settings(self) -> KarpenterSettings:
        return KarpenterSettings(
            self.batch_idle_s,
            self.batch_max_s,
            Path(self.instance_types),
            polling_period_s=self.polling_period_s,
            validation_delay_s=self.validation_delay_s,
        )


def log_path(cluster: KwokCluster) -> Path:
    """Beside the cluster's own component logs (kwokctl writes those to ``<cluster dir>/logs``)."""
    return cluster.cluster_dir / "logs" / "karpenter.log"


def install_crds(cluster: KwokCluster, build: Path) -> None:
    """Apply Karpenter's CRDs and the default KWOKNodeClass, waiting until the CRDs are served."""
    crds = build / "crds"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds), timeout_s=180.0)
    names = [
        json.loads(cluster.kubectl("create", "--dry-run=client", "-o", "json", "-f", str(f)))["metadata"][
            "name"
        ]
        for f in sorted(crds.glob("*.yaml"))
    ]
    cluster.kubectl(
        "wait", "--for", "condition=Established", "--timeout", "120s",
        *[f"crd/{n}" for n in names], timeout_s=150.0,
    )  # fmt: skip
    cluster.kubectl("apply", "--server-side", "-f", str(DEFAULT_NODE_CLASS), timeout_s=60.0)


def start(cluster: KwokCluster, build: Path, settings: KarpenterSettings) -> KarpenterState:
    """Start Karpenter against ``cluster`` and wait until its readiness probe passes."""
    if not settings.instance_types.is_file():
        raise StackError(f"Karpenter instance types file {settings.instance_types} does not exist")
    state = KarpenterState(
        cluster=cluster.name,
        pid=0,
        metrics_port=free_port(),
        health_port=free_port(),
        batch_idle_s=settings.batch_idle_s,
        batch_max_s=settings.batch_max_s,
        instance_types=str(settings.instance_types.resolve()),
        polling_period_s=settings.polling_period_s,
        validation_delay_s=settings.validation_delay_s,
    )
    env = {
        "KUBECONFIG": str(cluster.kubeconfig),
        POLLING_PERIOD_ENV: _go_duration(settings.polling_period_s),
        VALIDATION_DELAY_ENV: _go_duration(settings.validation_delay_s),
        "SYSTEM_NAMESPACE": SYSTEM_NAMESPACE,
        "INSTANCE_TYPES_FILE_PATH": state.instance_types,
        "LOG_LEVEL": settings.log_level,
        "HOME": os.environ.get("HOME", "/tmp"),
        "PATH": os.environ.get("PATH", ""),
    }
    argv = [
        str(build / BINARY),
        "--disable-leader-election",
        f"--metrics-port={state.metrics_port}",
        f"--health-probe-port={state.health_port}",
        f"--batch-idle-duration={_go_duration(settings.batch_idle_s)}",
        f"--batch-max-duration={_go_duration(settings.batch_max_s)}",
    ]
    state.pid = spawn_detached(argv, log_file=log_path(cluster), env=env)
    wait_ready(state, log_path(cluster))
    return state


def wait_ready(state: KarpenterState, log_file: Path, timeout_s: float = READY_TIMEOUT_S) -> None:
    wait_until_ready(
        f"Karpenter for cluster {state.cluster!r}",
        state.pid,
        http_probe(f"http://127.0.0.1:{state.health_port}/readyz"),
        log_file=log_file,
        timeout_s=timeout_s,
        interval_s=0.5,
    )


def healthy(state: KarpenterState) -> bool:
    if not pid_alive(state.pid):
        return False
    return http_probe(f"http://127.0.0.1:{state.health_port}/healthz")() is None


def stop(state: KarpenterState) -> None:
    terminate_process_group(state.pid, grace_s=10.0)


def _go_duration(seconds: float) -> str:
    """A Go ``time.ParseDuration`` string, to the millisecond (Karpenter's flags accept any)."""
    return f"{max(round(seconds * 1000), 1)}ms"
