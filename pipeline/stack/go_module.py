"""The one Go module every Go program of the local stack is built from, and how a program is built.

The control plane, etcd, KWOK, Karpenter's KWOK provider and metrics-server all use the Kubernetes
libraries (client-go, apimachinery, apiserver, component-base), gRPC and Prometheus' client, at versions
a patch release or a few weeks apart. Built each from its own module, each compiled those libraries
(and, for Karpenter, whose go.mod asked for a newer Go, the standard library with a toolchain fetched
for it alone) again: on a new 2-core machine under one CPU hog, Karpenter took 211 s and metrics-server
175 s after the cluster's 446 s. In one module, minimum version selection picks one version of each
library and Go's build cache compiles each package once, so the programs built later, on first use,
compile only their own packages.

The module is prepared once per set of versions (:func:`ensure_go_module`): a wrapper go.mod that pins
Kubernetes' staging modules to their published tags (its go.mod replaces them with ``./staging``, which
a module built as a dependency cannot use), with private, patched copies of Karpenter and
metrics-server in the module's directory, replaced in. Each program is then built from it on first use
(:func:`build_go_programs`) with the go.mod read-only, so builds started side by side share it safely.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.model.errors import StackError
from pipeline.stack.machine_locks import build_once
from pipeline.stack.processes import require_tool, run_logged
from pipeline.stack.progress import Reporter
from pipeline.stack.versions import StackVersions, cache_root

Patch = tuple[str, str, str, int]
"""(file, upstream text, replacement, occurrences): each must match exactly, or the build stops."""

KARPENTER_DIR = "karpenter"
METRICS_SERVER_DIR = "metrics-server"
POLLING_PERIOD_ENV = "KUBETAPE_DISRUPTION_POLLING_PERIOD"
VALIDATION_DELAY_ENV = "KUBETAPE_CONSOLIDATION_VALIDATION_DELAY"
KARPENTER_PATCHES: tuple[Patch, ...] = (
    # v1.15's go.mod asks for Go 1.26.9, a patch release, while its code needs only the 1.26 language;
    # at 1.26.0 the whole module builds with the machine's Go 1.26.x (no toolchain fetched for Karpenter)
    ("go.mod", "\ngo 1.26.9\n", "\ngo 1.26.0\n", 1),
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
_KARPENTER_ENV_HELPER = (
    "pkg/controllers/disruption/kubetape_env.go",
    """package disruption

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
""",
)
METRICS_SERVER_RESOLUTION_FLOOR_S = 1
"""The lowest ``--metric-resolution`` the stack's metrics-server accepts (upstream: 10 s). A replay at
speed S scrapes every 15/S s, as the recorded cluster's did every 15 s (``pipeline.replay.hpa.timing``)."""
METRICS_SERVER_PATCHES: tuple[Patch, ...] = (
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


def go_env() -> dict[str, str]:
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
        record = self._mod_download(module)
        if "Error" in record:
            raise StackError(
                f"could not fetch {module}{' (' + what + ')' if what else ''} from the Go module "
                f"proxy: {record['Error']}"
            )
        return record

    def module_zip(self, module: str) -> Path:
        """The zip of ``MODULE@VERSION`` in Go's module cache, fetched from the proxy if missing. Unlike
        :meth:`download` this does not need the module to build with the machine's Go: the go command
        refuses to extract a module whose go.mod asks for a newer Go, but still fetches its zip."""
        record = self._mod_download(module)
        zip_path = record.get("Zip")
        if not zip_path or not Path(zip_path).is_file():
            raise StackError(f"could not fetch {module} from the Go module proxy: {record.get('Error')}")
        return Path(zip_path)

    def _mod_download(self, module: str) -> dict[str, Any]:
        """``go mod download -json MODULE@VERSION``'s record, with ``Error`` set whenever it failed."""
        fetched = subprocess.run(
            [self.go, "mod", "download", "-json", module],
            cwd=self.cwd,
            env=self.env,
            check=False,
            capture_output=True,
            text=True,
        )
        try:
            record: dict[str, Any] = json.loads(fetched.stdout)
        except json.JSONDecodeError:
            record = {}
        if fetched.returncode != 0 and "Error" not in record:
            record["Error"] = fetched.stderr.strip()[-800:] or f"go exited with {fetched.returncode}"
        return record

    def run_quiet(self, args: list[str]) -> None:
        """A short ``go`` step that fails loudly but needs no log (``go mod init``, ``go mod edit``)."""
        subprocess.run([self.go, *args], cwd=self.cwd, env=self.env, check=True, capture_output=True)


def extract_module(zip_path: Path, module_at_version: str, dest: Path) -> None:
    """Unpack a module zip from Go's module cache into ``dest`` (writable, unlike the cache's copy). Every
    entry of a module zip lies under ``MODULE@VERSION/``; one that does not, or that would land outside
    ``dest``, stops the build (the cache is not what the go command wrote)."""
    prefix = module_at_version + "/"
    root = dest.resolve()
    with zipfile.ZipFile(zip_path) as archive:
        for entry in archive.infolist():
            target = (dest / entry.filename.removeprefix(prefix)).resolve()
            if not entry.filename.startswith(prefix) or not target.is_relative_to(root):
                raise StackError(
                    f"{zip_path} holds {entry.filename!r}, outside {prefix}; delete the file so that the "
                    "go command fetches the module again"
                )
            if entry.is_dir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(entry) as packed, target.open("wb") as unpacked:
                shutil.copyfileobj(packed, unpacked)


def patch_source(source: Path, patches: tuple[Patch, ...], what: str) -> None:
    """Apply ``(file, upstream text, replacement, occurrences)`` patches to a module's copy; a
    StackError when a text is not found exactly that often (a new version must be looked at)."""
    for relative, upstream, replacement, count in patches:
        path = source / relative
        text = path.read_text()
        found = text.count(upstream)
        if found != count:
            raise StackError(
                f"cannot patch {what}: expected {count} {upstream!r} in {relative}, found {found}; this "
                "version needs the patches in pipeline/stack/go_module.py updated"
            )
        path.write_text(text.replace(upstream, replacement))


def cluster_packages(versions: StackVersions) -> list[tuple[str, str]]:
    """The cluster's programs as (package, module version): the control plane, etcd and KWOK."""
    kubernetes = [
        (f"k8s.io/kubernetes/cmd/{c}", versions.kubernetes)
        for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    ]
    # etcd's server module has replace lines of its own, so it too is built as a dependency.
    etcd = ("go.etcd.io/etcd/server/v3", versions.etcd)
    kwok = [(f"sigs.k8s.io/kwok/cmd/{c}", versions.kwok) for c in ("kwok", "kwokctl")]
    return [*kubernetes, etcd, *kwok]


KARPENTER_PACKAGE = "sigs.k8s.io/karpenter/kwok"
METRICS_SERVER_PACKAGE = "sigs.k8s.io/metrics-server/cmd/metrics-server"
KUBELET_PACKAGE = "k8s.io/kubernetes/cmd/kubelet"
"""The real node's kubelet (:mod:`pipeline.stack.real_node`), built on first use of ``--real-node``."""


def go_module_dir(versions: StackVersions) -> Path:
    return cache_root() / "gowork" / versions.go_module_key


def ensure_go_module(versions: StackVersions, report: Reporter) -> Path:
    """Return the directory of the stack's Go module, preparing it on first use (seconds once the
    modules are in Go's module cache; downloads them from the proxy otherwise)."""
    directory = go_module_dir(versions)
    prepare = functools.partial(_prepare_go_module, versions, report)
    return build_once(versions.go_module_key, directory / ".complete", prepare, report, result=directory)


def _prepare_go_module(versions: StackVersions, report: Reporter) -> Path:
    directory = go_module_dir(versions)
    go = require_tool("go", "build the local stack's programs from the Go module proxy")
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log = cache_root() / "logs" / f"{versions.go_module_key}.log"
    work = GoWork(go, partial, go_env(), report, log)
    work.run_quiet(["mod", "init", "kubetape.local/stackbin"])
    record = work.download(f"k8s.io/kubernetes@{versions.kubernetes}")
    # k8s.io/kubernetes requires its staging modules at v0.0.0 through ./staging replaces; pin each
    # to its published tag (v1.X.Y -> v0.X.Y) instead.
    staging_version = "v0." + versions.kubernetes.removeprefix("v1.")
    for line in Path(record["GoMod"]).read_text().splitlines():
        parts = line.split()
        if "=>" in parts and any(p.startswith("./staging/") for p in parts):
            work.run_quiet(["mod", "edit", f"-replace={parts[0]}={parts[0]}@{staging_version}"])
    patched = (
        ("sigs.k8s.io/karpenter", versions.karpenter, KARPENTER_DIR, KARPENTER_PATCHES),
        ("sigs.k8s.io/metrics-server", versions.metrics_server, METRICS_SERVER_DIR, METRICS_SERVER_PATCHES),
    )
    for module, version, name, patches in patched:
        # the module cache is read-only and shared: the patches go into a private copy
        source = partial / name
        extract_module(work.module_zip(f"{module}@{version}"), f"{module}@{version}", source)
        patch_source(source, patches, f"{module}@{version}")
        work.run_quiet(["mod", "edit", f"-replace={module}=./{name}"])
    helper, text = _KARPENTER_ENV_HELPER
    (partial / KARPENTER_DIR / helper).write_text(text)
    programs = [
        *cluster_packages(versions),
        (KARPENTER_PACKAGE, versions.karpenter),
        (METRICS_SERVER_PACKAGE, versions.metrics_server),
        # the kubelet imports modules no other program does (cAdvisor, runc's cgroup code): resolved here
        # so that its build on first use finds them in the read-only go.mod and go.sum
        (KUBELET_PACKAGE, versions.kubernetes),
    ]
    work.run(
        ["get", "-tool", *[f"{package}@{version}" for package, version in programs]],
        f"the stack's Go module ({len(programs)} programs): resolving modules",
    )
    (partial / ".complete").write_text(json.dumps({"prepared": time.time()}))
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)
    return directory


def build_go_programs(
    versions: StackVersions,
    report: Reporter,
    packages: list[str],
    out: Path,
    *,
    step: str,
    ldflags: tuple[str, ...] = (),
) -> None:
    """``go build`` ``packages`` of the stack's Go module into ``out`` (a directory), logged under
    ``step``. The go.mod is read-only here: builds of other programs may run at the same time."""
    directory = ensure_go_module(versions, report)
    go = require_tool("go", "build the local stack's programs from the Go module proxy")
    env = {**go_env(), "GOFLAGS": "-mod=readonly"}
    log = cache_root() / "logs" / f"{out.name.removesuffix('.partial')}.log"
    out.mkdir(parents=True, exist_ok=True)
    GoWork(go, directory, env, report, log).run(
        ["build", "-trimpath", "-ldflags", " ".join(("-s", "-w", *ldflags)), "-o", f"{out}/", *packages],
        step,
        heartbeat_s=60.0,
    )
