"""Build the local stack's components once, from package registries only, into a versioned cache.

* Kafka: the broker's jars are collected from Maven Central with ``mvn dependency:copy-dependencies``.
* Kubernetes control plane and etcd: built from the Go module proxy through wrapper modules, because
  ``go install`` refuses modules whose go.mod carries ``replace`` lines (k8s staging, etcd server).
* KWOK: ``go install`` works as is.
* metrics-server: built from a copy of its module with one documented patch (its resolution floor,
  see :data:`_METRICS_SERVER_PATCHES`), with the module's own go.mod.
* The dashboard checker (tools/dashboard-check, Grafana's Foundation SDK from the Go module proxy): built
  from this checkout's source for the monitoring test, keyed by that source's hash.

Nothing is downloaded from release pages. Each cache entry is written to a ``.partial`` directory and
renamed when complete, so an interrupted build never looks finished.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.model.errors import StackError
from pipeline.stack.build_lock import build_once
from pipeline.stack.processes import require_tool, run_logged
from pipeline.stack.progress import Reporter
from pipeline.stack.versions import (
    ALL_KUBE_BINARIES,
    StackVersions,
    cache_root,
    kafka_libs_dir,
    kube_bin_dir,
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


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # local: never fetch another Go toolchain; static binaries; modules resolved from the proxy.
    env.update({"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"})
    # At Go's default GOGC=100 the compiler spends a fifth of a cold build collecting garbage. Without
    # collection below a 3 GiB heap, the cluster binaries took 992 CPU s instead of 1,259 (GOGC=400:
    # 1,075), and the largest process stayed at 2.2 GB: the limit bounds what two parallel compiles hold.
    if "GOGC" not in env and "GOMEMLIMIT" not in env:
        env.update({"GOGC": "off", "GOMEMLIMIT": "3GiB"})
    return env


@dataclass(frozen=True, slots=True)
class GoWork:
    """One Go build's context: the go command, the directory it runs in, its environment, and where its
    output is logged and reported. Every Go step of the stack's builds goes through it."""

    go: str
    cwd: Path
    env: dict[str, str]
    report: Reporter
    log_file: Path

    def run(self, args: list[str], step: str, *, heartbeat_s: float | None = None) -> None:
        """``go ARGS`` in :attr:`cwd`, its output in the log, ``step`` reported (with a heartbeat)."""
        extra = {} if heartbeat_s is None else {"heartbeat_s": heartbeat_s}
        run_logged(
            [self.go, *args],
            step=step,
            report=self.report,
            log_file=self.log_file,
            cwd=self.cwd,
            env=self.env,
            **extra,
        )

    def download(self, module: str, what: str = "") -> dict[str, Any]:
        """``go mod download -json MODULE@VERSION``: the module's record (``Dir``, ``GoMod``…) once it is
        in the module cache; a StackError saying what failed when the proxy does not have it."""
        downloaded = subprocess.run(
            [self.go, "mod", "download", "-json", module],
            cwd=self.cwd,
            env=self.env,
            check=False,
            capture_output=True,
            text=True,
        )
        if downloaded.returncode != 0:
            raise StackError(
                f"could not fetch {module}{' (' + what + ')' if what else ''} from the Go module "
                f"proxy: {downloaded.stderr.strip()[-800:]}"
            )
        record: dict[str, Any] = json.loads(downloaded.stdout)
        return record

    def init_wrapper_module(self, name: str) -> None:
        """A go.mod in :attr:`cwd` for a module that is built as a dependency (it has replace lines)."""
        self.cwd.mkdir(parents=True, exist_ok=True)
        if not (self.cwd / "go.mod").exists():
            self.run_quiet(["mod", "init", name])

    def run_quiet(self, args: list[str]) -> None:
        """A short ``go`` step that fails loudly but needs no log (``go mod init``, ``go mod edit``)."""
        subprocess.run([self.go, *args], cwd=self.cwd, env=self.env, check=True, capture_output=True)


def ensure_kube_binaries(versions: StackVersions, report: Reporter) -> Path:
    """Return the directory with kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
    etcd, kwok and kwokctl, building them on first use."""
    bin_dir = kube_bin_dir(versions)
    build = functools.partial(_build_kube_binaries, versions, report)
    return build_once(versions.kube_key, bin_dir / ".complete", build, report, result=bin_dir)


def _build_kube_binaries(versions: StackVersions, report: Reporter) -> Path:
    bin_dir = kube_bin_dir(versions)
    go = require_tool("go", "build the Kubernetes control plane, etcd and KWOK from the Go module proxy")
    partial = bin_dir.with_name(bin_dir.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    work = cache_root() / "gowork" / versions.kube_key
    work.mkdir(parents=True, exist_ok=True)
    env = _go_env()
    logs = cache_root() / "logs"
    report("First start: building the simulated cluster's binaries (cached afterwards; ~4 min, 2 idle cores)")
    log = logs / f"{versions.kube_key}-build.log"
    _build_cluster_binaries(GoWork(go, work / "all", env, report, log), versions, partial)

    missing = [b for b in ALL_KUBE_BINARIES if not (partial / b).exists()]
    if missing:
        raise StackError(f"build finished without {', '.join(missing)} in {partial}; see logs in {logs}")
    (partial / ".complete").write_text(json.dumps({"built": time.time()}))
    shutil.rmtree(bin_dir, ignore_errors=True)
    partial.rename(bin_dir)
    report(
        f"Kubernetes {versions.kubernetes}, etcd {versions.etcd}, KWOK {versions.kwok} cached in {bin_dir}"
    )
    return bin_dir


METRICS_SERVER_RESOLUTION_FLOOR_S = 1
"""The lowest ``--metric-resolution`` the stack's metrics-server accepts (upstream: 10 s). A replay at
speed S scrapes every 15/S s, as the recorded cluster's did every 15 s (``pipeline.replay.hpa.timing``)."""
_METRICS_SERVER_PATCHES = (
    # (file, upstream text, replacement, occurrences): each must match exactly, or the build stops.
    # Only the validation floor: the scrape loop, the storage and the rule that the kubelet request
    # timeout stays under 90 % of the resolution are upstream's. At the resolution kwokctl passes
    # (15 s) the patched binary behaves as upstream's.
    (
        "cmd/metrics-server/app/options/options.go",
        "if o.MetricResolution < 10*time.Second {",
        f"if o.MetricResolution < {METRICS_SERVER_RESOLUTION_FLOOR_S}*time.Second {{ // kubetape: 10s",
        1,
    ),
    (
        "cmd/metrics-server/app/options/options.go",
        "metric-resolution should be a time duration at least 10s,",
        f"metric-resolution should be a time duration at least {METRICS_SERVER_RESOLUTION_FLOOR_S}s,",
        1,
    ),
)


def ensure_metrics_server(versions: StackVersions, report: Reporter) -> Path:
    """Return the metrics-server binary, building it on first use (~4 min on 2 cores). Only clusters
    that serve the Metrics API need it (``kubetape stack up --metrics``), so the core build skips it.
    It is built from a copy of the module with :data:`_METRICS_SERVER_PATCHES` applied."""
    out = metrics_server_dir(versions)
    build = functools.partial(_build_metrics_server, versions, report)
    return build_once(
        versions.metrics_server_key, out / ".complete", build, report, result=out / "metrics-server"
    )


def _build_metrics_server(versions: StackVersions, report: Reporter) -> Path:
    out = metrics_server_dir(versions)
    binary = out / "metrics-server"
    go = require_tool("go", "build metrics-server from the Go module proxy")
    work_dir = cache_root() / "gowork" / versions.metrics_server_key
    work_dir.mkdir(parents=True, exist_ok=True)
    log = cache_root() / "logs" / f"{versions.metrics_server_key}.log"
    env = _go_env()
    record = GoWork(go, work_dir, env, report, log).download(
        f"sigs.k8s.io/metrics-server@{versions.metrics_server}"
    )
    # the module cache is read-only and shared: the patch goes into a private copy, built with the
    # module's own go.mod (the dependency versions upstream's release pins)
    source = work_dir / "src"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(Path(record["Dir"]), source)
    make_writable(source)
    patch_source(source, _METRICS_SERVER_PATCHES, f"metrics-server {versions.metrics_server}")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    GoWork(go, source, env, report, log).run(
        [
            "build",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            str(partial / "metrics-server"),
            "./cmd/metrics-server",
        ],
        f"metrics-server {versions.metrics_server}, patched (first use only; ~4 min on 2 cores)",
        heartbeat_s=60.0,
    )
    if not (partial / "metrics-server").exists():
        raise StackError(f"go build finished without {partial / 'metrics-server'}; see {log}")
    (partial / ".complete").write_text(json.dumps({"built": time.time()}))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    shutil.rmtree(source, ignore_errors=True)
    report(
        f"metrics-server {versions.metrics_server} (resolution floor "
        f"{METRICS_SERVER_RESOLUTION_FLOOR_S}s) cached in {out}"
    )
    return binary


def make_writable(tree: Path) -> None:
    """Make a copy of a module from the (read-only) module cache editable and deletable."""
    for path in [tree, *tree.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def patch_source(source: Path, patches: tuple[tuple[str, str, str, int], ...], what: str) -> None:
    """Apply ``(file, upstream text, replacement, occurrences)`` patches to a module's copy; a
    StackError when a text is not found exactly that often (a new version must be looked at)."""
    for relative, upstream, replacement, count in patches:
        path = source / relative
        text = path.read_text()
        found = text.count(upstream)
        if found != count:
            raise StackError(
                f"cannot patch {what}: expected {count} {upstream!r} in {relative}, found {found}; this "
                "version needs the patches in pipeline/stack/build.py updated"
            )
        path.write_text(text.replace(upstream, replacement))


def _build_cluster_binaries(work: GoWork, versions: StackVersions, out: Path) -> None:
    """KWOK, etcd and the Kubernetes control plane from one wrapper module, in one ``go build``.

    Why one: KWOK and etcd use the libraries the control plane does (KWOK v0.8.0 requires k8s.io/*
    v0.36.1 beside Kubernetes v1.36.3's v0.36.3; etcd and the apiserver share gRPC and etcd's client).
    Built apart, with their own module versions and flags, each compiled those libraries and the
    standard library again: on a new 2-core machine KWOK's build alone took 394 s of a 1,533 s build.
    In one module, minimum version selection unifies the versions (patch releases here), each package
    is compiled once, and the go command keeps both cores busy across the seven binaries."""
    work.init_wrapper_module("kubetape.local/clusterbin")
    record = work.download(f"k8s.io/kubernetes@{versions.kubernetes}")
    upstream_gomod = Path(record["GoMod"]).read_text()
    # k8s.io/kubernetes requires its staging modules at v0.0.0 through ./staging replaces; pin each
    # to its published tag (v1.X.Y -> v0.X.Y) instead.
    staging_version = "v0." + versions.kubernetes.removeprefix("v1.")
    for line in upstream_gomod.splitlines():
        parts = line.split()
        if "=>" in parts and any(p.startswith("./staging/") for p in parts):
            module = parts[0]
            work.run_quiet(["mod", "edit", f"-replace={module}={module}@{staging_version}"])
    kubernetes = [
        (f"k8s.io/kubernetes/cmd/{c}", versions.kubernetes)
        for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    ]
    # etcd's server module has replace lines of its own, so it too is built as a dependency.
    etcd = ("go.etcd.io/etcd/server/v3", versions.etcd)
    kwok = [(f"sigs.k8s.io/kwok/cmd/{c}", versions.kwok) for c in ("kwok", "kwokctl")]
    commands = [*kubernetes, etcd, *kwok]
    work.run(
        ["get", "-tool", *[f"{package}@{version}" for package, version in commands]],
        f"Kubernetes {versions.kubernetes}, etcd {versions.etcd}, KWOK {versions.kwok}: resolving modules",
    )
    minor = versions.kubernetes.split(".")[1]
    ldflags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        ldflags += [
            f"-X {pkg}.gitVersion={versions.kubernetes}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    work.run(
        [
            "build",
            "-trimpath",
            "-ldflags",
            " ".join(ldflags),
            "-o",
            str(out) + "/",
            *[package for package, _ in commands],
        ],
        f"compiling {len(commands)} binaries (the long step)",
        heartbeat_s=60.0,
    )
    # go names a binary after its package's last element, a major-version suffix skipped: …/server/v3
    # becomes "server".
    if (out / "server").exists():
        (out / "server").replace(out / "etcd")


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
        env={**_go_env(), "GOFLAGS": "-mod=readonly"},
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
