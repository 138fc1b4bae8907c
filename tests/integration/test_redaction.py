"""Env values and command-line secrets never leave the cluster: one real object of every kind the
shipped tracer config tracks, each with env values and a secret in its command and args in every
container list it can have (containers, initContainers, and for the bare Pod ephemeralContainers, added
through their subresource), recorded by the real watcher process. No value may be in any topic the
watcher writes nor in a trace assembled from the topic (what an export holds)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from pipeline.formats.wire.codec import decode_event
from pipeline.io.kafka.settings import (
    DEADLETTER_TOPIC,
    EVENTS_TOPIC,
    RESUME_TOPIC,
    STATE_TOPIC,
    KafkaSettings,
)
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ClusterId
from pipeline.model.tracer_config import TracerConfig, load_tracer_config
from pipeline.replay.sources import read_topic_trace
from pipeline.stack.state import StackInfo
from tests.integration.test_watch_service import Workload, read_topic, running_watcher

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "examples" / "tracer.yaml"

pytestmark = pytest.mark.timeout(600)


def containers(kind: str, lst: str) -> list[dict[str, Any]]:
    return [
        {
            "name": f"{lst.lower()}-c",
            "image": "busybox:1",
            # secrets on the command line too: a script's flag and a camelCase key flag (redactArgs)
            "command": ["sh", "-c", f"exec app --password=leak-{kind}-{lst}-script"],
            "args": ["--accessKey", f"leak-{kind}-{lst}-arg", "--port", "80"],
            "env": [
                {"name": "TOKEN", "value": f"leak-{kind}-{lst}-value"},
                {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            ],
        }
    ]


def pod_spec(kind: str, restart: str) -> dict[str, Any]:
    return {
        "restartPolicy": restart,
        "containers": containers(kind, "containers"),
        "initContainers": containers(kind, "initContainers"),
    }


def template(kind: str, labels: dict[str, str], restart: str) -> dict[str, Any]:
    return {"metadata": {"labels": labels}, "spec": pod_spec(kind, restart)}


def manifests() -> dict[str, dict[str, Any]]:
    """One object of each kind the shipped config tracks, by ``group/version.Kind``."""
    labels = {"app": "redact"}
    return {
        "apps/v1.Deployment": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "dep"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "dep"}},
                "template": template("Deployment", {"app": "dep"}, "Always"),
            },
        },
        "apps/v1.StatefulSet": {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "sts"},
            "spec": {
                "serviceName": "sts",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "sts"}},
                "template": template("StatefulSet", {"app": "sts"}, "Always"),
            },
        },
        "batch/v1.Job": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job"},
            "spec": {"template": template("Job", labels, "Never")},
        },
        "batch/v1.CronJob": {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "cron"},
            "spec": {
                "schedule": "0 0 1 1 *",
                "suspend": True,
                "jobTemplate": {"spec": {"template": template("CronJob", labels, "Never")}},
            },
        },
        "v1.Pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bare", "labels": labels},
            "spec": pod_spec("Pod", "Never"),
        },
        # no containers of its own: recorded beside the others, with nothing to mask
        "autoscaling/v2.HorizontalPodAutoscaler": {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "hpa"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "dep"},
                "minReplicas": 1,
                "maxReplicas": 2,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 50},
                        },
                    }
                ],
            },
        },
    }


def add_ephemeral_container(w: Workload, pod: str) -> None:
    """Ephemeral containers cannot be created with the pod: they go through their own subresource."""
    current = json.loads(w.kubectl("get", "pod", pod, "-n", w.ns, "-o", "json"))
    current["spec"]["ephemeralContainers"] = [
        {**containers("Pod", "ephemeralContainers")[0], "targetContainerName": "containers-c"}
    ]
    path = f"/api/v1/namespaces/{w.ns}/pods/{pod}/ephemeralcontainers"
    w.kubectl("replace", "--raw", path, "-f", "-", stdin=json.dumps(current))


async def published_objects(bootstrap: str, ns: str, cluster: ClusterId) -> dict[str, Event]:
    """The latest APPLIED event per key of ``ns`` of ``cluster`` on the events topic."""
    out: dict[str, Event] = {}
    for key, value, _ in await read_topic(bootstrap, EVENTS_TOPIC, cluster):
        if f"/{ns}/" in key and value is not None:
            event = decode_event(value)
            if event.type is EventType.APPLIED:
                out[key] = event
    return out


async def test_no_env_value_reaches_any_topic_or_trace(stack_info: StackInfo, tmp_path: Path) -> None:
    ns = f"redact-{uuid.uuid4().hex[:6]}"
    shipped = yaml.safe_load(SHIPPED.read_text())
    shipped["namespaces"] = {"allow": [ns]}  # only this test's objects; everything else as shipped
    config_path = tmp_path / "tracer.yaml"
    config_path.write_text(yaml.safe_dump(shipped))
    config = load_tracer_config(config_path)
    objects = manifests()
    assert sorted(objects) == sorted(e.gvk.format() for e in config.tracked), "one object per tracked kind"
    assert {e.gvk.format() for e in TracerConfig.default().tracked} <= set(objects)

    w = Workload(stack_info, ns)
    w.kubectl("create", "namespace", ns)
    expected = {
        "apps/Deployment/{ns}/dep",
        "apps/StatefulSet/{ns}/sts",
        "batch/Job/{ns}/job",
        "batch/CronJob/{ns}/cron",
        "core/Pod/{ns}/bare",
    }
    expected = {k.format(ns=ns) for k in expected}
    without_containers = {f"autoscaling/HorizontalPodAutoscaler/{ns}/hpa"}
    started_ms = int(time.time() * 1000) - 60_000
    cluster = w.cluster_id()  # what the watcher names this cluster by default
    async with running_watcher(config_path, w.kubeconfig, stack_info.bootstrap) as watcher:
        for manifest in objects.values():
            w.apply(manifest)
        add_ephemeral_container(w, "bare")
        deadline = time.monotonic() + 90
        seen: dict[str, Event] = {}
        while True:
            seen = await published_objects(stack_info.bootstrap, ns, cluster)
            bare = seen.get(f"core/Pod/{ns}/bare")
            has_ephemeral = (
                bare is not None and bare.obj is not None and "ephemeralContainers" in bare.obj["spec"]
            )
            if expected | without_containers <= seen.keys() and has_ephemeral:
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not all objects were published: {sorted(seen)}, ephemeral: {has_ephemeral}"
                )
            await asyncio.sleep(1)
        assert await watcher.terminate() == 0, watcher.lines[-5:]

    # every topic the watcher writes, as raw bytes: no value, in any encoding of it
    for topic in (EVENTS_TOPIC, STATE_TOPIC, RESUME_TOPIC, DEADLETTER_TOPIC):
        for key, value, _ in await read_topic(stack_info.bootstrap, topic):
            assert b"leak-" not in (value or b""), f"{topic} key {key} holds a secret"
    # the objects are there, masked, with their env names and references kept
    for key in expected:
        obj = seen[key].obj
        assert obj is not None
        text = orjson.dumps(obj)
        assert b"<redacted>" in text, key
        assert b"TOKEN" in text, key
        assert b"secretKeyRef" in text, key
        assert b'"--port","80"' in text, key  # a flag that is no secret is kept

    # a trace of the topic range (the assembly an export does) holds no value either
    trace = await read_topic_trace(
        KafkaSettings(stack_info.bootstrap),
        EVENTS_TOPIC,
        started_ms,
        int(time.time() * 1000) + 1,
        config=config,
        cluster=cluster,  # the topic may hold other clusters of a fleet (test_fleet.py)
    )
    objs = [e.obj for e in trace.events if e.obj is not None]
    if trace.keyframe is not None:
        objs += [orjson.loads(orjson.dumps(trace.keyframe, default=str))]
    dumped = orjson.dumps(objs, default=str)
    assert b"leak-" not in dumped
    assert sum(f"/{ns}/".encode() in orjson.dumps(e.key) for e in trace.events) >= len(expected)
