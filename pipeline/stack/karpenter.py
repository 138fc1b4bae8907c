"""Karpenter with its KWOK cloud provider, as a plain process beside a KWOK cluster of the stack.

Built once per version from the Go module proxy (``sigs.k8s.io/karpenter``, package ``kwok``) into
``<cache>/bin/karpenter-<version>/`` with the CRDs of the same version. Upstream binds its metrics and
health endpoints to every interface (``fmt.Sprintf(":%d", …)``) with no flag to change the address;
the stack binds everything to 127.0.0.1, so the build patches those two lines in a private copy of the
module's source and fails if the patch no longer applies (a new version must be looked at, not run
open to the network). The same copy turns two consolidation timers that are constants upstream (the
disruption polling period, the validation delay of a consolidation command) into environment variables,
so that a replay can divide them by its speed like every other timer.

Karpenter runs outside the cluster: the cluster's kubeconfig, no leader election (v1.15 has no webhooks), its
instance types from a small file (the embedded list has 144 types, which costs a 2-core machine seconds
per scheduling simulation), and its batch windows as flags (the replay divides them by its speed).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.build import GoWork
from pipeline.stack.build_lock import build_once
from pipeline.stack.kwok import RESOURCES, KwokCluster
from pipeline.stack.processes import (
    free_port,
    http_probe,
    pid_alive,
    require_tool,
    spawn_detached,
    terminate_process_group,
    wait_until_ready,
)
from pipeline.stack.progress import Reporter
from pipeline.stack.versions import KARPENTER_GO_TOOLCHAIN, StackVersions, cache_root, karpenter_dir

BINARY = "karpenter-kwok"
DEFAULT_INSTANCE_TYPES = RESOURCES / "karpenter-instance-types.json"
DEFAULT_NODE_CLASS = RESOURCES / "karpenter-nodeclass.yaml"
SYSTEM_NAMESPACE = "kube-system"
# The provider's CRDs live in two places of the module; NodeOverlays and CapacityBuffers are watched
# by Karpenter at start, so every chart CRD is installed, not only NodePool and NodeClaim.
_CRD_DIRS = ("kwok/charts/crds", "kwok/apis/crds")
POLLING_PERIOD_ENV = "KUBETAPE_DISRUPTION_POLLING_PERIOD"
VALIDATION_DELAY_ENV = "KUBETAPE_CONSOLIDATION_VALIDATION_DELAY"
# (file, upstream text, replacement, occurrences): each must match exactly, or the build stops
_PATCHES = (
    # metrics and health probe on loopback
    ("pkg/operator/operator.go", 'fmt.Sprintf(":%d", ', 'fmt.Sprintf("127.0.0.1:%d", ', 2),
    # two consolidation timers that no flag reaches, read from the environment so that a replay can
    # divide them by its speed like the others (unset: upstream's values)
    (
        "pkg/controllers/disruption/controller.go",
        "const pollingPeriod = 10 * time.Second",
        f'var pollingPeriod = kubetapeDuration("{POLLING_PERIOD_ENV}", 10*time.Second)',
        1,
    ),
    (
        "pkg/controllers/disruption/consolidation.go",
        "const commandValidationDelay = 15 * time.Second",
        f'var commandValidationDelay = kubetapeDuration("{VALIDATION_DELAY_ENV}", 15*time.Second)',
        1,
    ),
)
_ENV_HELPER = """package disruption

import (
	"os"
	"time"
)

// kubetapeDuration is added by kubetape's build: a duration from the environment, else the default.
func kubetapeDuration(name string, fallback time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return fallback
}
"""
READY_TIMEOUT_S = 180.0


def ensure_karpenter(versions: StackVersions, report: Reporter) -> Path:
    """Return the directory holding ``karpenter-kwok`` and ``crds/``, building them on first use
    (~2 min on 2 cores once the Go toolchain is fetched)."""
    out = karpenter_dir(versions)
    build = functools.partial(_build_karpenter, versions, report)
    return build_once(versions.karpenter_key, out / ".complete", build, report, result=out)


def _build_karpenter(versions: StackVersions, report: Reporter) -> Path:
    out = karpenter_dir(versions)
    go = require_tool("go", "build Karpenter's KWOK provider from the Go module proxy")
    env = {
        **os.environ,
        # v1.15's go.mod asks for a newer Go than distributions ship; the go command fetches this
        # toolchain from the module proxy (no other download)
        "GOTOOLCHAIN": KARPENTER_GO_TOOLCHAIN,
        "CGO_ENABLED": "0",
        "GOFLAGS": "-mod=mod",
    }
    logs = cache_root() / "logs"
    log = logs / f"{versions.karpenter_key}.log"
    work = cache_root() / "gowork" / versions.karpenter_key
    work.mkdir(parents=True, exist_ok=True)
    build = GoWork(go, work, env, report, log)
    record = build.download(
        f"sigs.k8s.io/karpenter@{versions.karpenter}", f"Go toolchain {KARPENTER_GO_TOOLCHAIN}"
    )
    module = Path(record["Dir"])
    source = work / "src"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(module, source)
    _make_writable(source)
    _patch(source)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "crds").mkdir(parents=True)
    GoWork(go, source, env, report, log).run(
        ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial / BINARY), "./kwok"],
        f"Karpenter {versions.karpenter} (KWOK provider): compiling",
        heartbeat_s=60.0,
    )
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


def _make_writable(tree: Path) -> None:
    # the module cache is read-only; the copy must be editable (and deletable on the next build)
    for path in [tree, *tree.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _patch(source: Path) -> None:
    for relative, upstream, replacement, count in _PATCHES:
        path = source / relative
        text = path.read_text()
        found = text.count(upstream)
        if found != count:
            raise StackError(
                f"cannot patch Karpenter: expected {count} {upstream!r} in {relative}, found {found}; this "
                f"Karpenter version needs the patches in pipeline/stack/karpenter.py updated"
            )
        path.write_text(text.replace(upstream, replacement))
    (source / "pkg/controllers/disruption/kubetape_env.go").write_text(_ENV_HELPER)


@dataclass(frozen=True, slots=True)
class KarpenterSettings:
    """How Karpenter is started. Its timers are Karpenter's defaults unless a replay scales them."""

    batch_idle_s: float = 1.0
    batch_max_s: float = 10.0
    instance_types: Path = DEFAULT_INSTANCE_TYPES
    log_level: str = "info"
    polling_period_s: float = 10.0
    """How often the disruption controller looks for nodes to consolidate (patched in, see _PATCHES)."""
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
