"""What recording and replaying the load costs; prints one JSON document. No cluster, no broker.

Two parts, in one run so their figures sit side by side:

* ``watcher``: the watcher's cost of sampling usage at ``--pods`` pods (default 5,000, over
  ``--deployments`` Deployments of two template hashes each) every ``--every`` seconds (15), beside the
  object watch alone. The object watch is the real :class:`~pipeline.watch.shaper.Shaper` observing the
  Deployments and every pod as a watch delivers them (``ADDED``, with owner references resolved
  through their ReplicaSets, served by a fake cluster at once), then one change of every pod
  (``MODIFIED``). A sampling round is the real :class:`~pipeline.watch.usage.UsageSampler` over a fake
  Metrics API answering a PodMetrics list of every pod (the JSON bytes metrics-server would send,
  decoded with orjson as the watcher's client does): attribution to owners and hashes, exact sums, one
  sample per owner and hash encoded for ``kubetape.usage`` (the bus keeps the records; Kafka's cost is
  the publisher's, measured by ``bench_watcher``). Figures: CPU seconds (``time.process_time``, best of
  ``--repeat``) of the initial watch, of a round of pod changes and of a sampling round; the sampling
  round's share of one core at its interval; memory the shaper holds for the pods against the peak a
  sampling round allocates (``tracemalloc``); and their ratios.
* ``replay_driver``: the replayer's usage driver (:class:`~pipeline.replay.hpa.replay.UsageDriver`)
  writing a recorded load onto ``--pods`` running simulated pods of the autoscaled owners, against a
  fake replay cluster that lists them at once and accepts every write at once: the driver's own ceiling
  in pod usage updates per CPU second of one core (best of ``--repeat`` passes in which every pod's
  usage changes; CPU time, so the machine's other load does not count).
  Beside it, the rate a recording needs at ``--speed`` (10): every pod's usage changes at each reading,
  one per ``--every`` seconds of trace time, so ``pods * speed / every`` updates per wall second. The
  API server's own patch rate is not measured here (``bench_scale`` measures the sim cluster's write
  ceilings); the driver's ceiling says whether the driver itself would be the limit.

Usage::

    .venv/bin/python -m bench.bench_usage                 # 5,000 pods, ~1 min
    .venv/bin/python -m bench.bench_usage --pods 20000 --deployments 400 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import orjson

from bench.environment import machine
from pipeline.io.kafka.message import Record
from pipeline.io.kube.types import ApiResource, ListPage, ResourceVersion, WatchEvent
from pipeline.io.metrics import Metrics
from pipeline.model.keys import GroupVersionKind, ObjectKey
from pipeline.model.tracer_config import TracerConfig
from pipeline.model.usage import ContainerUsage, UsageSample
from pipeline.replay.clock.schedule import MonotonicClock
from pipeline.replay.hpa.load import LoadModel, RecordedLoad
from pipeline.replay.hpa.replay import HpaReplay, UsageDriver
from pipeline.replay.hpa.targets import HpaPlan
from pipeline.replay.rewrite import RECORDED_OWNER_ANNOTATION, REPLAY_LABEL
from pipeline.watch.shaper import Shaper
from pipeline.watch.usage import UsageSampler

if TYPE_CHECKING:
    from pipeline.replay.ports import ReplayCluster

T0 = 1_800_000_000_000
NAMESPACE = "bench"
HASHES = ("h1", "h2")
CONFIG = TracerConfig.from_mapping(
    {"trackedObjects": {"apps/v1.Deployment": {"trackLifecycle": True}}}, "bench"
)


# ---- the watcher ---------------------------------------------------------------------------------------
def deployment(d: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"d{d}", "namespace": NAMESPACE, "uid": f"d{d}", "resourceVersion": "1"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "app", "image": "a:1"}]}}},
    }


def pod(i: int, deployments: int, rv: int) -> dict[str, Any]:
    d, template = i % deployments, HASHES[i // deployments % 2]
    rs = f"d{d}-{template}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p{i}",
            "namespace": NAMESPACE,
            "uid": f"u{i}",
            "resourceVersion": str(rv),
            "labels": {"app": f"d{d}", "pod-template-hash": template},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": rs, "controller": True}
            ],
        },
        "spec": {"nodeName": f"n{i % 100}", "containers": [{"name": "app", "image": "a:1"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "app", "state": {"running": {"startedAt": "2027-01-15T00:00:00Z"}}}
            ],
        },
    }


def pod_metrics_answer(pods: int, deployments: int, cpu_m: int) -> bytes:
    """The PodMetrics list metrics-server answers, as bytes (usage in nanocores and Ki, as it writes)."""
    items = [
        {
            "metadata": {
                "name": f"p{i}",
                "namespace": NAMESPACE,
                "labels": {"app": f"d{i % deployments}", "pod-template-hash": HASHES[i // deployments % 2]},
            },
            "timestamp": "2027-01-15T00:01:00Z",
            "window": "15.123s",
            "containers": [
                {"name": "app", "usage": {"cpu": f"{cpu_m * 1_000_000 + i}n", "memory": f"{65536 + i}Ki"}}
            ],
        }
        for i in range(pods)
    ]
    return orjson.dumps({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "items": items})


class OwnersCluster:
    """Serves each ReplicaSet as owned by its Deployment (``d{n}-{hash}`` → ``d{n}``), at once."""

    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        return ApiResource(gvk.api_version, gvk.kind, gvk.kind.lower() + "s", True)

    def list_pages(self, res: ApiResource) -> AsyncIterator[ListPage]:
        raise AssertionError("not listed here")

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        owner = name.rsplit("-", 1)[0]
        ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner, "uid": owner, "controller": True}
        meta = {"name": name, "namespace": namespace, "uid": name, "ownerReferences": [ref]}
        return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta}

    def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        raise AssertionError("not watched here")


class MetricsApi:
    """The Metrics API: the same PodMetrics bytes at every call, decoded as the watcher's client does."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    async def pod_metrics(self) -> list[dict[str, Any]]:
        items = orjson.loads(self.answer)["items"]
        return [item for item in items if isinstance(item, dict)]


class Bus:
    def __init__(self) -> None:
        self.records = 0

    async def submit(self, unit: Sequence[Record]) -> None:
        self.records += len(unit)


async def watched(pods: int, deployments: int) -> Shaper:
    shaper = Shaper(CONFIG, OwnersCluster())
    for d in range(deployments):
        shaper.observe_object("ADDED", deployment(d), T0)
    for i in range(pods):
        await shaper.observe_pod("ADDED", pod(i, deployments, 2), T0)
    return shaper


async def changed(shaper: Shaper, pods: int, deployments: int, rv: int) -> None:
    for i in range(pods):
        await shaper.observe_pod("MODIFIED", pod(i, deployments, rv), T0 + 1_000)


def best_cpu_s(repeat: int, run: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def held_bytes(make: Callable[[], Any]) -> tuple[Any, int]:
    """What ``make()`` returns and the bytes it still holds once made."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        gc.collect()
        return made, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def peak_bytes(run: Callable[[], Any]) -> int:
    """The most ``run()`` allocates at once beyond what was held before it."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def bench_watcher(pods: int, deployments: int, every_s: float, repeat: int) -> dict[str, Any]:
    watch_s = best_cpu_s(repeat, lambda: asyncio.run(watched(pods, deployments)))
    shaper, shaper_bytes = held_bytes(lambda: asyncio.run(watched(pods, deployments)))
    rvs = iter(range(3, 3 + 10 * repeat))
    change_s = best_cpu_s(repeat, lambda: asyncio.run(changed(shaper, pods, deployments, next(rvs))))
    answer = pod_metrics_answer(pods, deployments, cpu_m=150)
    bus = Bus()
    clock = iter(range(T0, T0 + 10**12, 15_000))
    sampler = UsageSampler(shaper, MetricsApi(answer), bus, Metrics(), lambda: next(clock))
    first = asyncio.run(sampler.sample_once())
    assert sum(s.pods for s in first) == pods, "every pod attributed"
    sample_s = best_cpu_s(repeat, lambda: asyncio.run(sampler.sample_once()))
    sample_peak = peak_bytes(lambda: asyncio.run(sampler.sample_once()))
    return {
        "pods": pods,
        "owners": deployments,
        "samples_per_round": len(first),
        "metrics_answer_bytes": len(answer),
        "object_watch": {
            "initial_cpu_s": round(watch_s, 4),
            "one_change_of_every_pod_cpu_s": round(change_s, 4),
            "shaper_holds_bytes": shaper_bytes,
        },
        "usage_sampling": {
            "every_s": every_s,
            "round_cpu_s": round(sample_s, 4),
            "share_of_one_core": round(sample_s / every_s, 5),
            "round_peak_bytes": sample_peak,
        },
        "ratios": {
            "round_cpu_over_initial_watch_cpu": round(sample_s / watch_s, 3),
            "round_cpu_over_one_change_of_every_pod_cpu": round(sample_s / change_s, 3),
            "round_peak_bytes_over_shaper_bytes": round(sample_peak / shaper_bytes, 3),
        },
    }


# ---- the replayer's usage driver -------------------------------------------------------------------------
class ReplayPods:
    """The replay cluster the driver sees: ``pods`` running pods, listed and written at once."""

    def __init__(self, pods: int, deployments: int) -> None:
        # the writes are not kept: every reading changes every pod's usage, so each pass writes them all
        self.pods = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"p{i}",
                    "namespace": NAMESPACE,
                    "labels": {REPLAY_LABEL: "bench"},
                    "annotations": {RECORDED_OWNER_ANNOTATION: owner_key(i % deployments)},
                },
                "spec": {"containers": [{"name": "app"}]},
                "status": {"phase": "Running"},
            }
            for i in range(pods)
        ]
        self.writes = 0

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        return self.pods if kind == "Pod" else []

    async def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        return body


def owner_key(d: int) -> ObjectKey:
    return ObjectKey(f"apps/Deployment/{NAMESPACE}/d{d}")


def bench_driver(pods: int, deployments: int, every_s: float, speed: float, repeat: int) -> dict[str, Any]:
    owners = [owner_key(d) for d in range(deployments)]
    per_owner = pods // deployments
    readings = repeat + 1
    samples = [
        UsageSample(
            T0 + r * round(every_s * 1000),
            o,
            "h1",
            per_owner,
            (ContainerUsage("app", 100 * per_owner + r, 1 << 26),),
        )
        for r in range(readings)
        for o in owners
    ]
    load = RecordedLoad.from_samples(samples, owners)
    plan = HpaPlan(
        targets={
            o: ObjectKey(f"autoscaling/HorizontalPodAutoscaler/{NAMESPACE}/{o.rsplit('/', 1)[1]}")
            for o in owners
        }
    )
    cluster = ReplayPods(pods, deployments)
    trace_now = [float(T0)]
    # the driver only lists and applies: the fake has just those
    replay_cluster = cast("ReplayCluster", cluster)
    hpa = HpaReplay(plan, load, LoadModel.CONSERVE)
    driver = UsageDriver(replay_cluster, hpa, "bench", lambda: trace_now[0], MonotonicClock())
    passes = []
    for r in range(readings):
        trace_now[0] = T0 + r * every_s * 1000
        before = cluster.writes
        gc.collect()
        start = time.process_time()  # CPU, not wall: what the driver costs, whatever else the machine runs
        asyncio.run(driver.update())
        elapsed = time.process_time() - start
        assert cluster.writes - before == pods, "each reading changes every pod's usage"
        passes.append(pods / elapsed)
    needed = pods * speed / every_s
    ceiling = max(passes)
    return {
        "pods": pods,
        "owners": deployments,
        "model": LoadModel.CONSERVE.value,
        "driver_updates_per_cpu_s": round(ceiling),
        "needed_at_speed_per_s": round(needed),
        "speed": speed,
        "every_s": every_s,
        "ratio_driver_over_needed": round(ceiling / needed, 2),
        "failures": driver.figures.failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=5_000)
    parser.add_argument("--deployments", type=int, default=250)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between usage samples (15)")
    parser.add_argument("--speed", type=float, default=10.0, help="replay speed the driver must keep up with")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    doc = {
        "bench": "usage",
        "machine": machine(),
        "command": " ".join(["python -m bench.bench_usage", *sys.argv[1:]]),
        "watcher": bench_watcher(args.pods, args.deployments, args.every, args.repeat),
        "replay_driver": bench_driver(args.pods, args.deployments, args.every, args.speed, args.repeat),
    }
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
