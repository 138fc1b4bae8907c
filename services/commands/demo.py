"""``kubetape demo``: the main job on the local stack.

At this stage of the project it proves the stack end to end: the local stack comes up, a Deployment's
pods run on KWOK fake nodes in the ``source`` cluster, and a message makes a round trip through Kafka
in a consumer group with a committed offset.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from pipeline.io.kafka import KafkaSettings, ensure_topic, new_consumer, new_producer
from pipeline.io.kube import body as k8s_body
from pipeline.io.kube import kube_api
from pipeline.model.errors import StackError
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON
from pipeline.stack.progress import stderr_reporter
from pipeline.stack.stack import LocalStack

DEMO_NAMESPACE = "kubetape-demo"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo", help="bring up the local stack and show pods on KWOK nodes and a Kafka round trip"
    )
    parser.add_argument("--stack-dir", type=Path, default=None)
    parser.add_argument("--replicas", type=int, default=3)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    stack = LocalStack(args.stack_dir, report=stderr_reporter)
    info = stack.up(["source", "sim"])
    source = stack.cluster("source", info.bin_dir)
    if not source.kubectl("get", "nodes", "-o", "name").strip():
        stack.add_nodes("source", DEFAULT_NODE_SKELETON, 3)
    pods = asyncio.run(run_deployment(info.kubeconfigs["source"], args.replicas))
    print(f"\nDeployment kubetape-demo in cluster 'source': {len(pods)} pods")
    print(f"  {'POD':<40} {'PHASE':<10} NODE")
    for name, phase, node in pods:
        print(f"  {name:<40} {phase:<10} {node}")
    latency_ms = asyncio.run(kafka_round_trip(info.bootstrap))
    print(
        f"\nKafka round trip via {info.bootstrap}: produced, consumed in a group and committed "
        f"in {latency_ms:.0f} ms"
    )
    print("\nThe stack keeps running. Use it:")
    print("  " + "\n  ".join(info.env_lines()))
    print("Stop it with: .venv/bin/kubetape stack down")
    return 0


def _deployment(replicas: int) -> dict[str, Any]:
    labels = {"app": "kubetape-demo"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "kubetape-demo", "namespace": DEMO_NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example/demo:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ]
                },
            },
        },
    }


async def run_deployment(
    kubeconfig: Path, replicas: int, timeout_s: float = 120.0
) -> list[tuple[str, str, str]]:
    """Apply the demo Deployment and wait until ``replicas`` pods are Running on nodes."""
    async with kube_api(kubeconfig) as api:
        core = client.CoreV1Api(api)
        apps = client.AppsV1Api(api)
        namespaces = await core.list_namespace()
        if DEMO_NAMESPACE not in {ns.metadata.name for ns in namespaces.items}:
            await core.create_namespace(k8s_body({"metadata": {"name": DEMO_NAMESPACE}}))
        manifest = _deployment(replicas)
        try:
            await apps.create_namespaced_deployment(DEMO_NAMESPACE, k8s_body(manifest))
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            await apps.replace_namespaced_deployment("kubetape-demo", DEMO_NAMESPACE, k8s_body(manifest))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            listed = await core.list_namespaced_pod(DEMO_NAMESPACE, label_selector="app=kubetape-demo")
            running = [
                (p.metadata.name, p.status.phase, p.spec.node_name or "-")
                for p in listed.items
                if p.status.phase == "Running" and p.spec.node_name and p.metadata.deletion_timestamp is None
            ]
            if len(running) >= replicas:
                return sorted(running)
            await asyncio.sleep(0.5)
    raise StackError(
        f"the demo Deployment did not reach {replicas} Running pods within {timeout_s:.0f}s; "
        f"check `kubectl --kubeconfig {kubeconfig} get pods -A` and the nodes"
    )


async def kafka_round_trip(bootstrap: str) -> float:
    """Produce one message, read it back in a fresh consumer group, commit; returns milliseconds."""
    settings = KafkaSettings(bootstrap=bootstrap, client_id="kubetape-demo")
    topic = "kubetape.demo"
    await ensure_topic(settings, topic)
    payload = uuid.uuid4().hex.encode()
    started = time.monotonic()
    producer = new_producer(settings)
    await producer.start()
    try:
        await producer.send_and_wait(topic, payload, key=b"demo")
    finally:
        await producer.stop()
    consumer = new_consumer(settings, topic, group_id=f"kubetape-demo-{uuid.uuid4().hex[:8]}")
    await consumer.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for messages in batches.values():
                if any(m.value == payload for m in messages):
                    await consumer.commit()
                    return (time.monotonic() - started) * 1000
    finally:
        await consumer.stop()
    raise StackError(f"the demo message did not come back from Kafka at {bootstrap} within 30s")
