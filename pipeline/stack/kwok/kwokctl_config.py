"""The kwokctl configuration of a cluster: only the stack's own binaries, everything on 127.0.0.1,
the cluster's profile, KWOK's stages and, for a Metrics API cluster, metrics-server offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.stack.kwok.cluster import RESOURCES, KwokCluster
from pipeline.stack.kwok.profiles import scheduler_configuration

KWOK_STAGES = RESOURCES / "kwok-stages.yaml"
METRICS_SERVER_MANIFESTS = RESOURCES / "metrics-server"
"""A kustomize directory of metrics-server's own manifests: kwokctl would fetch them from the internet."""
KWOK_METRICS_RESOURCES = (RESOURCES / "metrics-resource.yaml", RESOURCES / "usage-from-annotation.yaml")
"""KWOK's emulated kubelet ``/metrics/resource`` per node, and pod usage read from the annotations
``kwok.x-k8s.io/usage-cpu`` / ``kwok.x-k8s.io/usage-memory`` (1m and 1Mi without them)."""
KWOK_METRICS_CRDS = ("Metric", "ClusterResourceUsage", "ResourceUsage")


NO_LEADER_ELECTION = {"leader-elect": "false"}
"""Every stack cluster's kube-controller-manager and kube-scheduler run alone: nobody to elect against."""


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
        # a configuration file makes kube-scheduler ignore the flag: the file says it
        configuration = {**scheduler_configuration(profile), "leaderElection": {"leaderElect": False}}
        scheduler.write_text(json.dumps(configuration, indent=2) + "\n")
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
    # One controller-manager and one scheduler per cluster: nobody to elect against. With election on,
    # a starved machine (a load average of 16 on 2 cores) let the scheduler's lease renewal time out
    # and it exited ("Leaderelection lost"), leaving every later pod Pending for good.
    patches.append(
        {
            "name": "kube-controller-manager",
            "extraArgs": _args({**NO_LEADER_ELECTION, **profile.controller_manager_args}),
        }
    )
    if not profile.scheduler_config:  # a configuration file says it (above)
        patches.append({"name": "kube-scheduler", "extraArgs": _args(NO_LEADER_ELECTION)})
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
