"""The objects a Simulation owns: names, labels, the replayer Job of each repetition, the node-pool ConfigMap.

Names are deterministic (simulation name + repetition), so creating an object twice after a restart or a
lost status update finds the first one instead of running a repetition twice. Everything carries an
ownerReference to the Simulation, so deleting the Simulation garbage-collects it.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping
from typing import Any

import yaml

from pipeline.controller.settings import ControllerSettings
from pipeline.controller.spec import (
    API_VERSION,
    KIND,
    SegmentsSource,
    SimulationSpec,
    TopicSource,
    TraceSource,
)
from pipeline.model.lifecycle_delays import lifecycle_flags

SIMULATION_LABEL = "kubetape.dev/simulation"
"""On every object the controller creates; value: :func:`label_value` of the Simulation's name."""
REPETITION_LABEL = "kubetape.dev/repetition"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kubetape-controller"}
MANAGED_BY_SELECTOR = "app.kubernetes.io/managed-by=kubetape-controller"
FINALIZER = "kubetape.dev/simulation-cleanup"
"""Held until the replayed objects of every repetition are gone (they are not owned by the Simulation)."""

# Same values as pipeline.replay.rewrite.REPLAY_LABEL and pipeline.replay.setup.ROOT_KIND: the
# replayer labels everything with its replay name and owns it by ReplayRoot ``kubetape-<replay name>``
# (kubetape's own kind, k8s/sim/replayroot-crd.yaml); repeated here because stages must not import
# each other.
REPLAY_LABEL = "kubetape.dev/replay"
REPLAY_ROOT_API_VERSION = "kubetape.dev/v1"
REPLAY_ROOT_KIND = "ReplayRoot"

SEGMENTS_MOUNT = "/var/lib/kubetape/segments"
KAFKA_CONFIG_MOUNT = "/etc/kubetape/kafka"
"""Where a topic source's ``kafkaConfigSecret`` is mounted; its ``client.properties`` names files here."""
NODE_POOLS_MOUNT = "/etc/kubetape/node-pools"
PRICES_FILE = "autoscaler-prices.yaml"
TERMINATION_LOG = "/dev/termination-log"
HOOKS_RUN_DIR = "/tmp/kubetape-run"
"""Where the replay Job's hooks write their logs (the report goes to the termination log)."""
"""The replayer writes its JSON report here; the kubelet hands it back in the pod's status (4 KiB max)."""
KWOK_NODE_LABEL = ("type", "kwok")
"""Virtual nodes carry this label (pipeline/stack/resources/node-skeleton.yaml); no replayer runs there."""

_MAX_NAME = 63


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def label_value(name: str) -> str:
    """A Simulation name as a label value (≤ 63 chars): long names are cut and made unique by a hash."""
    if len(name) <= _MAX_NAME:
        return name
    return f"{name[:50].rstrip('.-')}-{_short_hash(name)}"


def _base_name(simulation_name: str, room: int) -> str:
    """The Simulation name as a DNS label of at most ``room`` chars (dots replaced, long names hashed)."""
    base = simulation_name.replace(".", "-")
    if len(base) > room or base != simulation_name:
        base = f"{base[: room - 9].rstrip('-')}-{_short_hash(simulation_name)}"
    return base


def job_name(simulation_name: str, index: int) -> str:
    """``<simulation>-r<index>`` (index from 1), at most 52 chars: Job names become pod labels, pods add
    a suffix. Also the replay's name (``kubetape replay --name``): its root is ``ReplayRoot kubetape-<job>``.
    """
    suffix = f"-r{index}"
    return f"{_base_name(simulation_name, 52 - len(suffix))}{suffix}"


REPLAY_PAUSE_ANNOTATION = "kubetape.dev/paused"
"""Same value as pipeline.replay.rewrite.PAUSE_ANNOTATION (the controller must not import the replayer):
``"true"`` on a replay's root stops its trace clock until the annotation is removed."""


def replay_root_name(simulation_name: str, index: int) -> str:
    return f"kubetape-{job_name(simulation_name, index)}"


def node_pools_name(simulation_name: str) -> str:
    return f"{_base_name(simulation_name, 52)}-node-pools"


def owner_reference(simulation: Mapping[str, Any]) -> dict[str, Any]:
    meta = simulation["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: Mapping[str, Any], simulation: Mapping[str, Any]) -> bool:
    uid = simulation["metadata"]["uid"]
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _metadata(simulation: Mapping[str, Any], name: str, namespace: str, **labels: str) -> dict[str, Any]:
    sim_name = simulation["metadata"]["name"]
    return {
        "name": name,
        "namespace": namespace,
        "labels": {SIMULATION_LABEL: label_value(sim_name), **MANAGED_BY, **labels},
        "annotations": {"kubetape.dev/simulation-name": sim_name},
        "ownerReferences": [owner_reference(simulation)],
    }


def node_pools_config_map(
    simulation: Mapping[str, Any], spec: SimulationSpec, settings: ControllerSettings
) -> dict[str, Any] | None:
    """The node skeletons as files for ``--nodes``, and the autoscaler's NodePools and prices for
    ``--nodepool``/``--prices``; None when the Simulation has neither."""
    if not spec.node_pools and spec.autoscaler is None:
        return None
    name = simulation["metadata"]["name"]
    data = {
        f"pool-{i}.yaml": yaml.safe_dump(dict(pool.skeleton), sort_keys=False)
        for i, pool in enumerate(spec.node_pools)
    }
    if spec.autoscaler is not None:
        for i, nodepool in enumerate(spec.autoscaler.node_pools):
            data[f"autoscaler-pool-{i}.yaml"] = yaml.safe_dump(dict(nodepool), sort_keys=False)
        if spec.autoscaler.prices is not None:
            data[PRICES_FILE] = yaml.safe_dump(dict(spec.autoscaler.prices), sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(simulation, node_pools_name(name), settings.namespace),
        "data": data,
    }


def replay_args(simulation_name: str, index: int, spec: SimulationSpec) -> list[str]:
    """The ``kubetape replay`` command line of one repetition (in a cluster: no --kubeconfig)."""
    speed = "max" if spec.max_speed else f"{spec.speed:g}"
    args = ["replay", "--name", job_name(simulation_name, index), "--speed", speed]
    source = spec.source
    if isinstance(source, TraceSource):
        args += ["--trace", source.url]
    elif isinstance(source, SegmentsSource) and source.url:
        args += ["--segments", source.url, f"--from={source.time_from}", f"--to={source.time_to}"]
    elif isinstance(source, SegmentsSource):
        directory = SEGMENTS_MOUNT if source.claim_name else ""
        if source.path:
            directory = f"{directory}/{source.path.lstrip('/')}" if directory else source.path
        # `--from=VALUE`: a relative time such as -30m would otherwise read as an option
        args += ["--segments", directory, f"--from={source.time_from}", f"--to={source.time_to}"]
    elif isinstance(source, TopicSource):
        args += ["--topic", source.topic, "--bootstrap", source.bootstrap]
        if source.kafka_config_secret:
            args += ["--kafka-config", f"{KAFKA_CONFIG_MOUNT}/client.properties"]
        args += [f"--from={source.time_from}", f"--to={source.time_to}"]
    if isinstance(source, SegmentsSource | TopicSource) and source.cluster is not None:
        args += ["--cluster", source.cluster]
    if spec.duration_s is not None:
        args += ["--duration", f"{spec.duration_s:g}"]
    if spec.namespace_prefix is not None:
        args += ["--namespace-prefix", spec.namespace_prefix]
    if spec.max_lag_s is not None:
        args += ["--max-lag", f"{spec.max_lag_s:g}"]
    if spec.cluster_profile is not None:
        args += ["--expect-profile", spec.cluster_profile]
    for i, pool in enumerate(spec.node_pools):
        args += ["--nodes", f"{NODE_POOLS_MOUNT}/pool-{i}.yaml:{pool.count}"]
    if spec.autoscaler is not None:
        args += ["--autoscaler", spec.autoscaler.provider]
        for i in range(len(spec.autoscaler.node_pools)):
            args += ["--nodepool", f"{NODE_POOLS_MOUNT}/autoscaler-pool-{i}.yaml"]
        if spec.autoscaler.prices is not None:
            args += ["--prices", f"{NODE_POOLS_MOUNT}/{PRICES_FILE}"]
    if spec.pod_autoscaler is not None:
        args += ["--autoscaler", spec.pod_autoscaler.provider, "--load-model", spec.pod_autoscaler.load_model]
    args += lifecycle_flags(spec.lifecycle_delays)
    for hook in spec.hooks:
        flag = "--hook-ignoring-failure" if hook.ignore_failure else "--hook"
        args += [f"{flag}={hook.point}={shlex.join(hook.argv)}"]
    if spec.hooks:  # the root filesystem is read-only but /tmp
        args += ["--run-dir", HOOKS_RUN_DIR]
    args += ["--report-json", TERMINATION_LOG]
    return args


def replayer_job(
    simulation: Mapping[str, Any], index: int, spec: SimulationSpec, settings: ControllerSettings
) -> dict[str, Any]:
    """The Job running repetition ``index``: one pod, never retried (a replay is not idempotent)."""
    sim_name = simulation["metadata"]["name"]
    name = job_name(sim_name, index)
    labels = {REPETITION_LABEL: str(index)}
    # the root filesystem is read-only; /tmp stays writable for libraries that need scratch space
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    if isinstance(spec.source, SegmentsSource) and spec.source.claim_name:
        volumes.append(
            {
                "name": "segments",
                "persistentVolumeClaim": {"claimName": spec.source.claim_name, "readOnly": True},
            }
        )
        mounts.append({"name": "segments", "mountPath": SEGMENTS_MOUNT, "readOnly": True})
    if isinstance(spec.source, TopicSource) and spec.source.kafka_config_secret:
        # files, not environment: the password stays out of the pod spec and `kubectl describe`
        secret = {"secretName": spec.source.kafka_config_secret, "defaultMode": 0o440}
        volumes.append({"name": "kafka-config", "secret": secret})
        mounts.append({"name": "kafka-config", "mountPath": KAFKA_CONFIG_MOUNT, "readOnly": True})
    if spec.node_pools or spec.autoscaler is not None:
        volumes.append({"name": "node-pools", "configMap": {"name": node_pools_name(sim_name)}})
        mounts.append({"name": "node-pools", "mountPath": NODE_POOLS_MOUNT, "readOnly": True})
    container: dict[str, Any] = {
        "name": "replay",
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": replay_args(sim_name, index, spec),
        # success: the report written to /dev/termination-log; failure: the last log lines (the error)
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {
            "requests": {"cpu": settings.job_cpu_request, "memory": settings.job_memory_request},
            "limits": {"memory": settings.job_memory_limit},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }
    if isinstance(spec.source, SegmentsSource) and spec.source.credentials_secret:
        # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL, AWS_REGION) for the object store
        container["envFrom"] = [{"secretRef": {"name": spec.source.credentials_secret}}]
    key, value = KWOK_NODE_LABEL
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(simulation, name, settings.namespace, **labels),
        "spec": {
            "backoffLimit": 0,
            "parallelism": 1,
            "completions": 1,
            "template": {
                "metadata": {"labels": {SIMULATION_LABEL: label_value(sim_name), **MANAGED_BY, **labels}},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": settings.service_account,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    # the replayer must run on a real node, never on the fake nodes it simulates
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": key, "operator": "NotIn", "values": [value]}
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }
