"""Watcher benchmarks on the real local stack; prints one JSON document.

* ``publish``: the publishing path alone: pre-decoded events (a realistic sanitized Deployment each) go
  through :class:`~pipeline.io.publisher.KafkaPublisher` into the real broker (event + state record per
  change, acks=all, idempotent, zstd). Figure: events/s until every record is acknowledged.
* ``watch``: a burst of ConfigMap creations on the KWOK ``source`` cluster (a client-side send time in
  each object) → the in-process watcher → Kafka → a consumer. Figures: events/s the watcher sustained and
  end-to-end latency p50/p99 (object sent → event consumed).

Usage::

    .venv/bin/python -m bench.bench_watcher                      # starts a private stack (~1 min)
    .venv/bin/python -m bench.bench_watcher --bootstrap H:P --kubeconfig K   # reuse a running stack
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from kubernetes_asyncio import client

from pipeline.io.kafka import KafkaSettings, ensure_topic, new_consumer
from pipeline.io.kube import body, kube_api
from pipeline.io.kube_watch import KubeCluster
from pipeline.io.metrics import Metrics
from pipeline.io.publisher import KafkaPublisher
from pipeline.io.resume_store import ensure_watcher_topics, topic_partitions
from pipeline.io.watch_types import EVENTS_TOPIC, STATE_TOPIC, Record
from pipeline.model.events import Event, decode_event, encode_event
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import object_key
from pipeline.model.tracer_config import TracerConfig
from pipeline.watch.watcher import Watcher


def _deployment(i: int) -> dict[str, Any]:
    labels = {"app": f"svc-{i}", "team": "payments", "tier": "backend"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"svc-{i}", "namespace": "bench", "labels": labels, "annotations": {}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": f"registry.example.com/payments/svc:{i}",
                            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                            "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(6)],
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        }
                    ]
                },
            },
        },
    }


async def bench_publish(bootstrap: str, n: int) -> dict[str, Any]:
    units = []
    for i in range(n):
        obj = _deployment(i)
        key = object_key("apps/v1", "Deployment", "bench", f"svc-{i}")
        event = Event.applied(int(time.time() * 1000), key, obj, object_spec_hash(obj), uid=str(i))
        encoded = encode_event(event)
        units.append(
            [Record(EVENTS_TOPIC, key, encoded, event.ts_ms), Record(STATE_TOPIC, key, encoded, event.ts_ms)]
        )
    value_bytes = len(units[0][0].value or b"")
    settings = KafkaSettings(bootstrap, client_id="bench-publisher")
    await ensure_watcher_topics(settings)
    async with KafkaPublisher(settings, Metrics(), max_pending_units=20_000) as publisher:
        started = time.perf_counter()
        for unit in units:
            await publisher.submit(unit)
        await publisher.flush()
        elapsed = time.perf_counter() - started
    return {
        "events": n,
        "records": 2 * n,
        "event_value_bytes": value_bytes,
        "seconds": round(elapsed, 3),
        "events_per_s": round(n / elapsed),
    }


async def _end_offsets(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    tps = await topic_partitions(KafkaSettings(bootstrap), topic)
    consumer = new_consumer(KafkaSettings(bootstrap), group_id=None)
    await consumer.start()
    try:
        offsets: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        return offsets
    finally:
        await consumer.stop()


async def bench_watch(bootstrap: str, kubeconfig: Path, n: int, concurrency: int) -> dict[str, Any]:
    namespace = f"bench-{int(time.time())}"
    config = TracerConfig.from_mapping(
        {"trackedObjects": {"v1.ConfigMap": {}}, "namespaces": {"allow": [namespace]}}, "bench"
    )
    settings = KafkaSettings(bootstrap, client_id="bench-watcher")
    await ensure_watcher_topics(settings)
    await ensure_topic(settings, EVENTS_TOPIC)
    start_offsets = await _end_offsets(bootstrap, EVENTS_TOPIC)
    received: dict[str, float] = {}
    sent: dict[str, float] = {}
    async with kube_api(kubeconfig) as api, KafkaPublisher(settings, Metrics()) as publisher:
        core = client.CoreV1Api(api)
        await core.create_namespace(body({"metadata": {"name": namespace}}))
        watcher = Watcher(config, KubeCluster(api), publisher, Metrics())
        run = asyncio.create_task(watcher.run())
        while not watcher.ready:  # noqa: ASYNC110 - readiness is a polled property, not an event
            await asyncio.sleep(0.05)

        consumer = new_consumer(settings, group_id=None)
        await consumer.start()
        consumer.assign(list(start_offsets))
        for tp, offset in start_offsets.items():
            consumer.seek(tp, offset)

        async def consume() -> None:
            while len(received) < n:
                for msgs in (await consumer.getmany(timeout_ms=200)).values():
                    now = time.time()
                    for m in msgs:
                        if f"/{namespace}/" in m.key.decode():
                            event = decode_event(m.value)
                            name = event.key.rsplit("/", 1)[1]
                            received.setdefault(name, now)

        consumer_task = asyncio.create_task(consume())
        limit = asyncio.Semaphore(concurrency)

        async def create(i: int) -> None:
            name = f"cm-{i}"
            async with limit:
                sent[name] = time.time()
                await core.create_namespaced_config_map(
                    namespace, body({"metadata": {"name": name}, "data": {"i": str(i)}})
                )

        started = time.time()
        await asyncio.gather(*(create(i) for i in range(n)))
        created_s = time.time() - started
        await asyncio.wait_for(consumer_task, 300)
        await consumer.stop()
        await watcher.stop()
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        await core.delete_namespace(namespace)
    latencies = sorted((received[k] - sent[k]) * 1000 for k in sent)
    span = max(received.values()) - min(received.values())
    return {
        "objects": n,
        "api_create_per_s": round(n / created_s),
        "events_per_s": round(n / max(span, 1e-9)),
        "latency_ms_p50": round(statistics.median(latencies), 1),
        "latency_ms_p99": round(latencies[int(0.99 * (len(latencies) - 1))], 1),
        "note": "events/s is bounded by how fast the API server accepts creates (api_create_per_s)",
    }


@contextlib.contextmanager
def _stack(args: argparse.Namespace) -> Iterator[tuple[str, Path | None]]:
    if args.bootstrap:
        yield args.bootstrap, args.kubeconfig
        return
    from pipeline.stack.stack import LocalStack

    with tempfile.TemporaryDirectory(prefix="kubetape-bench-") as tmp:
        stack = LocalStack(Path(tmp))
        clusters = [] if args.skip_watch else ["source"]
        info = stack.up(clusters)
        try:
            yield info.bootstrap, info.kubeconfigs.get("source")
        finally:
            stack.down()


async def _main(args: argparse.Namespace, bootstrap: str, kubeconfig: Path | None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "watcher",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "publish": await bench_publish(bootstrap, args.events),
    }
    if not args.skip_watch and kubeconfig is not None:
        result["watch"] = await bench_watch(bootstrap, kubeconfig, args.objects, args.concurrency)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default=None, help="a running broker (default: start a private stack)")
    parser.add_argument("--kubeconfig", type=Path, default=None, help="the source cluster of a running stack")
    parser.add_argument("--events", type=int, default=100_000, help="events for the publish benchmark")
    parser.add_argument(
        "--objects", type=int, default=2_000, help="ConfigMaps created for the watch benchmark"
    )
    parser.add_argument(
        "--concurrency", type=int, default=32, help="parallel creates for the watch benchmark"
    )
    parser.add_argument("--skip-watch", action="store_true", help="only the publishing path")
    args = parser.parse_args()
    with _stack(args) as (bootstrap, kubeconfig):
        result = asyncio.run(_main(args, bootstrap, kubeconfig))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
