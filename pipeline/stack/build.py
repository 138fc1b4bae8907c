"""Build the local stack's components once, from package registries only, into a versioned cache.

* Kafka: the broker's jars are collected from Maven Central with ``mvn dependency:copy-dependencies``.
* The Kubernetes control plane, etcd and KWOK (the core build), and metrics-server on first use: built
  from the stack's one Go module (:mod:`pipeline.stack.go_module`, which says why one), Karpenter too
  (:mod:`pipeline.stack.karpenter`).
* The dashboard checker (tools/dashboard-check, Grafana's Foundation SDK from the Go module proxy): built
  from this checkout's source for the monitoring test, keyed by that source's hash.

Nothing is downloaded from release pages. Each cache entry is written to a ``.partial`` directory and
renamed when complete, so an interrupted build never looks finished.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import time
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.go_module import (
    KUBELET_PACKAGE,
    METRICS_SERVER_PACKAGE,
    METRICS_SERVER_RESOLUTION_FLOOR_S,
    build_go_programs,
    cluster_packages,
    go_env,
)
from pipeline.stack.machine_locks import build_once
from pipeline.stack.processes import require_tool, run_logged
from pipeline.stack.progress import Reporter
from pipeline.stack.versions import (
    ALL_KUBE_BINARIES,
    StackVersions,
    cache_root,
    kafka_libs_dir,
    kube_bin_dir,
    kubelet_dir,
    metrics_server_dir,
)

_RESOURCES = Path(__file__).parent / "resources"
# The checker's Go module lives in the checkout, not in the installed package: only tests use it.
_DASHBOARD_CHECK_SOURCE = Path(__file__).resolve().parents[2] / "tools" / "dashboard-check"


def ensure_kafka(versions: StackVersions, report: Reporter) -> Path:
    """Return the directory of the broker's jars, collecting them with Maven on first use."""
    libs = kafka_libs_dir(versions)
    build = functools.partial(_collect_kafka, versions, report)
    return build_once(versions.kafka_key, libs / ".complete", build, report, result=libs)


def _collect_kafka(versions: StackVersions, report: Reporter) -> Path:
    libs = kafka_libs_dir(versions)
    require_tool("java", "run the Kafka broker")
    mvn = require_tool("mvn", "collect the Kafka broker's jars from Maven Central")
    work = libs.parent / "maven-project"
    work.mkdir(parents=True, exist_ok=True)
    pom = (_RESOURCES / "kafka-pom.xml").read_text()
    pom = pom.replace("@KAFKA_VERSION@", versions.kafka).replace("@LOG4J_VERSION@", versions.kafka_log4j)
    (work / "pom.xml").write_text(pom)
    partial = libs.with_name("libs.partial")
    shutil.rmtree(partial, ignore_errors=True)
    run_logged(
        [
            mvn,
            "-B",
            "-q",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={partial}",
        ],
        step=f"Kafka {versions.kafka}: collecting broker jars from Maven Central",
        report=report,
        log_file=cache_root() / "logs" / f"{versions.kafka_key}-maven.log",
        cwd=work,
    )
    jars = list(partial.glob("*.jar"))
    if not any(j.name.startswith("kafka_2.13-") for j in jars):
        raise StackError(f"Maven finished but {partial} holds no kafka_2.13 jar; see the Maven log.")
    shutil.copy(_RESOURCES / "kafka-log4j2.properties", partial / "log4j2.properties")
    (partial / ".complete").write_text(json.dumps({"jars": len(jars), "built": time.time()}))
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    report(f"Kafka {versions.kafka}: {len(jars)} jars cached in {libs}")
    return libs


def ensure_kube_binaries(versions: StackVersions, report: Reporter) -> Path:
    """Return the directory with kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
    etcd, kwok and kwokctl, building them on first use."""
    bin_dir = kube_bin_dir(versions)
    build = functools.partial(_build_kube_binaries, versions, report)
    return build_once(versions.kube_key, bin_dir / ".complete", build, report, result=bin_dir)


def _build_kube_binaries(versions: StackVersions, report: Reporter) -> Path:
    bin_dir = kube_bin_dir(versions)
    partial = bin_dir.with_name(bin_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    report("First start: building the simulated cluster's binaries (cached afterwards; ~4 min, 2 idle cores)")
    packages = cluster_packages(versions)
    build_go_programs(
        versions,
        report,
        [package for package, _ in packages],
        partial,
        step=f"compiling {len(packages)} binaries (the long step)",
        ldflags=_kubernetes_version_flags(versions),
    )
    # go names a binary after its package's last element, a major-version suffix skipped: …/server/v3
    # becomes "server".
    if (partial / "server").exists():
        (partial / "server").replace(partial / "etcd")
    missing = [b for b in ALL_KUBE_BINARIES if not (partial / b).exists()]
    if missing:
        raise StackError(
            f"build finished without {', '.join(missing)} in {partial}; see the logs in "
            f"{cache_root() / 'logs'}"
        )
    (partial / ".complete").write_text(json.dumps({"built": time.time()}))
    shutil.rmtree(bin_dir, ignore_errors=True)
    partial.rename(bin_dir)
    report(
        f"Kubernetes {versions.kubernetes}, etcd {versions.etcd}, KWOK {versions.kwok} cached in {bin_dir}"
    )
    return bin_dir


def _kubernetes_version_flags(versions: StackVersions) -> tuple[str, ...]:
    """The linker flags that make a Kubernetes program built as a dependency report its release (as
    upstream's build does), not v0.0.0: the kubelet registers its node with that version."""
    minor = versions.kubernetes.split(".")[1]
    flags: list[str] = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={versions.kubernetes}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return tuple(flags)


def ensure_kubelet(versions: StackVersions, report: Reporter) -> Path:
    """Return the kubelet binary of the control plane's version, building it on first use of a real
    node (:mod:`pipeline.stack.real_node`). It shares the Kubernetes libraries of the core build, so
    only its own packages (the kubelet, cAdvisor, runc's cgroup code) compile."""
    out = kubelet_dir(versions)
    build = functools.partial(_build_kubelet, versions, report)
    return build_once(versions.kubelet_key, out / ".complete", build, report, result=out / "kubelet")


def _build_kubelet(versions: StackVersions, report: Reporter) -> Path:
    out = kubelet_dir(versions)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    build_go_programs(
        versions,
        report,
        [KUBELET_PACKAGE],
        partial,
        step=f"kubelet {versions.kubernetes} for the real node (first use only)",
        ldflags=_kubernetes_version_flags(versions),
    )
    if not (partial / "kubelet").exists():
        raise StackError(f"go build finished without {partial / 'kubelet'}; see its log")
    (partial / ".complete").write_text(
        json.dumps({"built": time.time(), "seconds": round(time.monotonic() - started)})
    )
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    report(f"kubelet {versions.kubernetes} cached in {out}")
    return out / "kubelet"


def ensure_metrics_server(versions: StackVersions, report: Reporter) -> Path:
    """Return the metrics-server binary, building it on first use (about a minute once the cluster's
    binaries are built: it shares their libraries). Only clusters that serve the Metrics API need it
    (``kubetape stack up --metrics``), so the core build skips it. It is built from a copy of the
    module with :data:`~pipeline.stack.go_module.METRICS_SERVER_PATCHES` applied."""
    out = metrics_server_dir(versions)
    build = functools.partial(_build_metrics_server, versions, report)
    return build_once(
        versions.metrics_server_key, out / ".complete", build, report, result=out / "metrics-server"
    )


def _build_metrics_server(versions: StackVersions, report: Reporter) -> Path:
    out = metrics_server_dir(versions)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    build_go_programs(
        versions,
        report,
        [METRICS_SERVER_PACKAGE],
        partial,
        step=f"metrics-server {versions.metrics_server}, patched (first use only)",
    )
    if not (partial / "metrics-server").exists():
        raise StackError(f"go build finished without {partial / 'metrics-server'}; see its log")
    (partial / ".complete").write_text(json.dumps({"built": time.time()}))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    report(
        f"metrics-server {versions.metrics_server} (resolution floor "
        f"{METRICS_SERVER_RESOLUTION_FLOOR_S}s) cached in {out}"
    )
    return out / "metrics-server"


def dashboard_checker_path() -> Path:
    """Where the dashboard checker built from this checkout's tools/dashboard-check is cached (whether
    or not it is built yet): the entry is named by the hash of its source, so an edit builds anew."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update(name.encode() + b"\0" + (_DASHBOARD_CHECK_SOURCE / name).read_bytes())
    return cache_root() / "tools" / f"dashboard-check-{digest.hexdigest()[:16]}" / "dashboard-check"


def ensure_dashboard_checker(report: Reporter) -> Path:
    """Return the dashboard checker's binary, building it on first use (~2 min of CPU, cold)."""
    binary = dashboard_checker_path()
    build = functools.partial(_build_dashboard_checker, binary, report)
    return build_once(binary.parent.name, binary.parent / ".complete", build, report, result=binary)


def _build_dashboard_checker(binary: Path, report: Reporter) -> Path:
    go = require_tool("go", "build the dashboard checker (Grafana's Foundation SDK) from the Go module proxy")
    out = binary.parent
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    run_logged(
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial / binary.name), "."],
        step="dashboard checker (Grafana Foundation SDK; first use only)",
        report=report,
        log_file=cache_root() / "logs" / f"{out.name}.log",
        cwd=_DASHBOARD_CHECK_SOURCE,
        # readonly: the build never rewrites the checkout's go.mod or go.sum
        env={**go_env(), "GOFLAGS": "-mod=readonly"},
        heartbeat_s=60.0,
    )
    if not (partial / binary.name).exists():
        raise StackError(f"go build finished without {partial / binary.name}; see its log")
    (partial / ".complete").write_text(json.dumps({"built": time.time()}))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    report(f"dashboard checker cached in {out}")
    return binary


if __name__ == "__main__":
    # scripts/bootstrap.sh --for-tests: `python -m pipeline.stack.build dashboard-check`
    import sys

    from pipeline.stack.progress import stderr_reporter

    if sys.argv[1:] != ["dashboard-check"]:
        raise SystemExit("usage: python -m pipeline.stack.build dashboard-check")
    print(ensure_dashboard_checker(stderr_reporter))
