"""Build the local stack's components once, from package registries only, into a versioned cache.

* Kafka: the broker's jars are collected from Maven Central with ``mvn dependency:copy-dependencies``.
* Kubernetes control plane and etcd: built from the Go module proxy through wrapper modules, because
  ``go install`` refuses modules whose go.mod carries ``replace`` lines (k8s staging, etcd server).
* KWOK: ``go install`` works as is.

Nothing is downloaded from release pages. Each cache entry is written to a ``.partial`` directory and
renamed when complete, so an interrupted build never looks finished.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.processes import require_tool, run_logged
from pipeline.stack.progress import Reporter
from pipeline.stack.versions import (
    ALL_KUBE_BINARIES,
    StackVersions,
    cache_root,
    kafka_libs_dir,
    kube_bin_dir,
)

_RESOURCES = Path(__file__).parent / "resources"


def ensure_kafka(versions: StackVersions, report: Reporter) -> Path:
    """Return the directory of the broker's jars, collecting them with Maven on first use."""
    libs = kafka_libs_dir(versions)
    if (libs / ".complete").exists():
        return libs
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
    return env


def ensure_kube_binaries(versions: StackVersions, report: Reporter) -> Path:
    """Return the directory with kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
    etcd, kwok and kwokctl, building whichever are missing (~11 min cold on 2 cores)."""
    bin_dir = kube_bin_dir(versions)
    if (bin_dir / ".complete").exists():
        return bin_dir
    go = require_tool("go", "build the Kubernetes control plane, etcd and KWOK from the Go module proxy")
    partial = bin_dir.with_name(bin_dir.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    work = cache_root() / "gowork" / versions.kube_key
    work.mkdir(parents=True, exist_ok=True)
    env = _go_env()
    logs = cache_root() / "logs"
    report(
        "First start: building the simulated cluster's binaries (cached afterwards; ~10–15 min on 2 cores)"
    )

    if not all((partial / b).exists() for b in ("kwok", "kwokctl")):
        run_logged(
            [
                go,
                "install",
                f"sigs.k8s.io/kwok/cmd/kwok@{versions.kwok}",
                f"sigs.k8s.io/kwok/cmd/kwokctl@{versions.kwok}",
            ],
            step=f"KWOK {versions.kwok}",
            report=report,
            log_file=logs / f"{versions.kube_key}-kwok.log",
            env={**env, "GOBIN": str(partial)},
        )
    if not (partial / "etcd").exists():
        _build_etcd(
            go, versions=versions, module_dir=work / "etcd", out=partial, env=env, report=report, logs=logs
        )
    if not all(
        (partial / b).exists()
        for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    ):
        _build_kubernetes(
            go, versions=versions, module_dir=work / "k8s", out=partial, env=env, report=report, logs=logs
        )

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


def _init_wrapper_module(go: str, module_dir: Path, name: str, env: dict[str, str]) -> None:
    module_dir.mkdir(parents=True, exist_ok=True)
    if not (module_dir / "go.mod").exists():
        subprocess.run([go, "mod", "init", name], cwd=module_dir, env=env, check=True, capture_output=True)


def _build_etcd(
    go: str,
    *,
    versions: StackVersions,
    module_dir: Path,
    out: Path,
    env: dict[str, str],
    report: Reporter,
    logs: Path,
) -> None:
    # etcd's server module has replace lines, so it is built as a dependency of a wrapper module.
    _init_wrapper_module(go, module_dir, "kubetape.local/etcdbin", env)
    log = logs / f"{versions.kube_key}-etcd.log"
    run_logged(
        [go, "get", "-tool", f"go.etcd.io/etcd/server/v3@{versions.etcd}"],
        step=f"etcd {versions.etcd}: resolving modules",
        report=report,
        log_file=log,
        cwd=module_dir,
        env=env,
    )
    run_logged(
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "etcd"), "go.etcd.io/etcd/server/v3"],
        step=f"etcd {versions.etcd}: compiling",
        report=report,
        log_file=log,
        cwd=module_dir,
        env=env,
    )


def _build_kubernetes(
    go: str,
    *,
    versions: StackVersions,
    module_dir: Path,
    out: Path,
    env: dict[str, str],
    report: Reporter,
    logs: Path,
) -> None:
    _init_wrapper_module(go, module_dir, "kubetape.local/k8sbin", env)
    log = logs / f"{versions.kube_key}-kubernetes.log"
    downloaded = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{versions.kubernetes}"],
        cwd=module_dir,
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    if downloaded.returncode != 0:
        raise StackError(
            f"could not fetch k8s.io/kubernetes@{versions.kubernetes} from the Go module "
            f"proxy: {downloaded.stderr.strip()[-500:]}"
        )
    upstream_gomod = Path(json.loads(downloaded.stdout)["GoMod"]).read_text()
    # k8s.io/kubernetes requires its staging modules at v0.0.0 through ./staging replaces; pin each
    # to its published tag (v1.X.Y -> v0.X.Y) instead.
    staging_version = "v0." + versions.kubernetes.removeprefix("v1.")
    for line in upstream_gomod.splitlines():
        parts = line.split()
        if "=>" in parts and any(p.startswith("./staging/") for p in parts):
            module = parts[0]
            subprocess.run(
                [go, "mod", "edit", f"-replace={module}={module}@{staging_version}"],
                cwd=module_dir,
                env=env,
                check=True,
            )
    commands = [
        f"k8s.io/kubernetes/cmd/{c}"
        for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    ]
    run_logged(
        [go, "get", "-tool", *[f"{c}@{versions.kubernetes}" for c in commands]],
        step=f"Kubernetes {versions.kubernetes}: resolving modules",
        report=report,
        log_file=log,
        cwd=module_dir,
        env=env,
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
    run_logged(
        [go, "build", "-trimpath", "-ldflags", " ".join(ldflags), "-o", str(out) + "/", *commands],
        step=f"Kubernetes {versions.kubernetes}: compiling 4 binaries (the long step)",
        report=report,
        log_file=log,
        cwd=module_dir,
        env=env,
        heartbeat_s=60.0,
    )
