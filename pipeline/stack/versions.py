"""Pinned versions of the local stack's components and where their builds are cached.

Builds are keyed by these versions, so changing one builds a new cache entry beside the old one and
the second start of an unchanged stack takes seconds.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

KAFKA_VERSION = "4.3.1"
# Kafka's own POM pulls log4j-api/core at this version; the SLF4J binding must match it.
KAFKA_LOG4J_VERSION = "2.25.4"
# 1.36 is the line KWOK v0.8.0 is built and tested against; kubernetes-asyncio 36.x matches it.
K8S_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.14"
KWOK_VERSION = "v0.8.0"
# Karpenter's own KWOK cloud provider (its `kwok/` main package).
KARPENTER_VERSION = "v1.15.0"
# kubetape's patches to Karpenter's source (pipeline/stack/go_module.py); a change to them bumps this so
# that builds with other patches are not taken for this one
KARPENTER_PATCH_LEVEL = "kt3"
# The local S3 server; 4.x runs on Java 17 and honours If-None-Match / If-Match on PUT.
S3PROXY_VERSION = "4.1.0"
# The Metrics API over KWOK's emulated kubelet metrics; >= 0.7 reads a node's
# metrics.k8s.io/resource-metrics-path annotation, which is how it finds KWOK's per-node paths. 0.9 is
# built against the Kubernetes 1.36 libraries, as the cluster is (pipeline/stack/go_module.py).
METRICS_SERVER_VERSION = "v0.9.0"
# kubetape's patch to metrics-server's source (pipeline/stack/go_module.py, METRICS_SERVER_PATCHES): its
# --metric-resolution floor lowered from 10 s to 1 s, so a replay at speed S can scrape every 15/S s. A
# change to the patch bumps this, so that a build with another patch is not taken for this one.
METRICS_SERVER_PATCH_LEVEL = "kt1"
# What the stack's Go module resolves beyond the versions above (pipeline/stack/go_module.py): "kubelet"
# since it also resolves the real node's kubelet. A change bumps this, so that a module prepared without
# a program is not taken for one with it.
GO_MODULE_LAYOUT = "kubelet"


@dataclass(frozen=True, slots=True)
class StackVersions:
    """The component versions one stack build is keyed by."""

    kafka: str = KAFKA_VERSION
    kafka_log4j: str = KAFKA_LOG4J_VERSION
    kubernetes: str = K8S_VERSION
    etcd: str = ETCD_VERSION
    kwok: str = KWOK_VERSION
    karpenter: str = KARPENTER_VERSION
    s3proxy: str = S3PROXY_VERSION
    metrics_server: str = METRICS_SERVER_VERSION

    @property
    def kafka_key(self) -> str:
        return f"kafka-{self.kafka}-log4j-{self.kafka_log4j}"

    @property
    def go_module_key(self) -> str:
        """The stack's one Go module (pipeline/stack/go_module.py): every Go program's version and patch
        level, since each program's library versions depend on all of them."""
        versions = (
            f"k8s-{self.kubernetes}-etcd-{self.etcd}-kwok-{self.kwok}-karpenter-{self.karpenter}-"
            f"{KARPENTER_PATCH_LEVEL}-metrics-server-{self.metrics_server}-{METRICS_SERVER_PATCH_LEVEL}-"
            f"{GO_MODULE_LAYOUT}"
        )
        return f"gomod-{hashlib.sha256(versions.encode()).hexdigest()[:10]}"

    @property
    def kube_key(self) -> str:
        return f"k8s-{self.kubernetes}-etcd-{self.etcd}-kwok-{self.kwok}-{self.go_module_key}"

    @property
    def karpenter_key(self) -> str:
        return f"karpenter-{self.karpenter}-{KARPENTER_PATCH_LEVEL}-{self.go_module_key}"

    @property
    def kubelet_key(self) -> str:
        return f"kubelet-{self.kubernetes}-{self.go_module_key}"

    @property
    def metrics_server_key(self) -> str:
        return f"metrics-server-{self.metrics_server}-{METRICS_SERVER_PATCH_LEVEL}-{self.go_module_key}"


def cache_root() -> Path:
    """Where built binaries and jars live, outside any checkout (``KUBETAPE_CACHE`` overrides)."""
    configured = os.environ.get("KUBETAPE_CACHE")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kubetape"


def kafka_libs_dir(versions: StackVersions, root: Path | None = None) -> Path:
    return (root or cache_root()) / "kafka" / versions.kafka_key / "libs"


def kube_bin_dir(versions: StackVersions, root: Path | None = None) -> Path:
    return (root or cache_root()) / "bin" / versions.kube_key


def karpenter_dir(versions: StackVersions, root: Path | None = None) -> Path:
    """Karpenter's KWOK provider binary and the CRDs of the same version (``crds/``)."""
    return (root or cache_root()) / "bin" / versions.karpenter_key


def kubelet_dir(versions: StackVersions, root: Path | None = None) -> Path:
    """The real node's kubelet (built on first use of a real node)."""
    return (root or cache_root()) / "bin" / versions.kubelet_key


def metrics_server_dir(versions: StackVersions, root: Path | None = None) -> Path:
    """The metrics-server binary (built on first use by a cluster that runs it)."""
    return (root or cache_root()) / "bin" / versions.metrics_server_key


KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
KWOK_BINARIES = ("kwok", "kwokctl")
ETCD_BINARIES = ("etcd",)
ALL_KUBE_BINARIES = KUBE_BINARIES + ETCD_BINARIES + KWOK_BINARIES
