"""The objects a Simulation owns: names, labels, the replayer Job of each repetition and the ConfigMap of
its replay document, the node-pool ConfigMap.

Names are deterministic (simulation name + repetition), so creating an object twice after a restart or a
lost status update finds the first one instead of running a repetition twice. Everything carries an
ownerReference to the Simulation, so deleting the Simulation garbage-collects it.
"""

from __future__ import annotations

import hashlib
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
from pipeline.model.lifecycle_delays import lifecycle_fields
from pipeline.model.replay_document import replay_document

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
REPLAY_SPEC_MOUNT = "/etc/kubetape/replay"
REPLAY_SPEC_FILE = "replay.yaml"
"""The repetition's replay document, from its ConfigMap (:func:`replay_config_map`)."""
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


def replay_spec(simulation_name: str, index: int, spec: SimulationSpec) -> dict[str, Any]:
    """The replay document (:mod:`pipeline.model.replay_document`) of one repetition: the Simulation's
    spec in the document's keys, the paths those of the Job's mounts (in a cluster: no kubeconfig)."""
    fields: dict[str, Any] = {
        "name": job_name(simulation_name, index),
        "speed": "max" if spec.max_speed else spec.speed,
    }
    source = spec.source
    if isinstance(source, TraceSource):
        fields["trace"] = source.url
    elif isinstance(source, SegmentsSource) and source.url:
        fields.update(segments=source.url, **{"from": source.time_from, "to": source.time_to})
    elif isinstance(source, SegmentsSource):
        directory = SEGMENTS_MOUNT if source.claim_name else ""
        if source.path:
            directory = f"{directory}/{source.path.lstrip('/')}" if directory else source.path
        fields.update(segments=directory, **{"from": source.time_from, "to": source.time_to})
    elif isinstance(source, TopicSource):
        fields.update(topic=source.topic, bootstrap=source.bootstrap)
        if source.kafka_config_secret:
            fields["kafkaConfig"] = f"{KAFKA_CONFIG_MOUNT}/client.properties"
        fields.update({"from": source.time_from, "to": source.time_to})
    if isinstance(source, SegmentsSource | TopicSource) and source.cluster is not None:
        fields["cluster"] = source.cluster
    optional = {
        "duration": spec.duration_s,
        "namespacePrefix": spec.namespace_prefix,
        "maxLag": spec.max_lag_s,
        "expectProfile": spec.cluster_profile,
    }
    fields.update({key: value for key, value in optional.items() if value is not None})
    if spec.node_pools:
        fields["nodes"] = [
            {"skeleton": f"{NODE_POOLS_MOUNT}/pool-{i}.yaml", "count": pool.count}
            for i, pool in enumerate(spec.node_pools)
        ]
    autoscalers = []
    if spec.autoscaler is not None:
        autoscalers.append(spec.autoscaler.provider)
        fields["nodepools"] = [
            f"{NODE_POOLS_MOUNT}/autoscaler-pool-{i}.yaml" for i in range(len(spec.autoscaler.node_pools))
        ]
        if spec.autoscaler.prices is not None:
            fields["prices"] = f"{NODE_POOLS_MOUNT}/{PRICES_FILE}"
    if spec.pod_autoscaler is not None:
        autoscalers.append(spec.pod_autoscaler.provider)
        fields["loadModel"] = spec.pod_autoscaler.load_model
    if autoscalers:
        fields["autoscalers"] = autoscalers
    fields.update(lifecycle_fields(spec.lifecycle_delays))
    if spec.hooks:
        fields["hooks"] = [
            {"point": h.point, "command": list(h.argv), "ignoreFailure": h.ignore_failure} for h in spec.hooks
        ]
        fields["runDir"] = HOOKS_RUN_DIR  # the root filesystem is read-only but /tmp
    fields["reportJson"] = TERMINATION_LOG
    fields.update(spec.replay)  # spec.replay holds none of the keys above (parse_spec refuses them)
    return replay_document(fields)


def replay_config_map(
    simulation: Mapping[str, Any], index: int, spec: SimulationSpec, settings: ControllerSettings
) -> dict[str, Any]:
    """Repetition ``index``'s replay document, which its Job runs (``kubetape replay --spec``); named
    as the Job, owned by the Simulation."""
    sim_name = simulation["metadata"]["name"]
    document = replay_spec(sim_name, index, spec)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(
            simulation, job_name(sim_name, index), settings.namespace, **{REPETITION_LABEL: str(index)}
        ),
        "data": {REPLAY_SPEC_FILE: yaml.safe_dump(document, sort_keys=False)},
    }


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
    volumes.append({"name": "replay-spec", "configMap": {"name": name}})  # replay_config_map
    mounts.append({"name": "replay-spec", "mountPath": REPLAY_SPEC_MOUNT, "readOnly": True})
    container: dict[str, Any] = {
        "name": "replay",
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": ["replay", "--spec", f"{REPLAY_SPEC_MOUNT}/{REPLAY_SPEC_FILE}"],
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
