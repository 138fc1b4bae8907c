"""What the watcher keeps per live pod while it watches (not lists) a cluster, measured with tracemalloc
through ``Watcher._handle`` itself, two ways in one run:

* ``now``: the shaper as it is: once a pod's lifecycle owner is chosen, its owner chain is dropped and
  the owner's key and the pod-template hash are strings shared by every pod of the owner;
* ``before``: the shaper as it was up to commit ba23026 (emulated by swapping that one step back): every
  pod kept its whole owner chain (its ReplicaSet's and Deployment's keys and kinds, and itself) and
  its own copies of the owner key and the hash.

The workload is a watch as the API server sends it, one JSON line per event, decoded as the client
decodes it (``decode_watch_line``): ``--pods`` pods of Deployments of 50 come up (added Pending, then
scheduled, then Running: three events each), then ``--roll`` of them are replaced (marked for
deletion, deleted, and a new pod comes up in its place), so ended lifecycles are counted too. The pods
are a KWOK pod as :mod:`bench.relist_heap` makes it. Prints one JSON document::

    .venv/bin/python -m bench.watch_heap --pods 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import json
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import orjson

from bench.relist_heap import (
    PODS,
    PODS_PER_REPLICASET,
    TRACER_CONFIG,
    CountingBus,
    PodsCluster,
    deployment,
    pod,
)
from pipeline.io.kube.watch import decode_watch_line
from pipeline.io.metrics import Metrics
from pipeline.model.keys import ObjectKey
from pipeline.model.tracer_config import load_tracer_config
from pipeline.watch import pod_track
from pipeline.watch.pod_track import TEMPLATE_HASH_LABELS, PodTrack
from pipeline.watch.watcher import RV_PREFIX, Watcher, _Stream

MIB = 1024 * 1024
DELETED_AT = "2026-11-27T05:00:00Z"


def _choose_owner_before(track: PodTrack, owner: ObjectKey) -> None:
    track.owner = owner  # the chain kept, the key the chain's own copy


def _template_hash_before(labels: object) -> str:
    if isinstance(labels, dict):
        for name in TEMPLATE_HASH_LABELS:
            value = labels.get(name)
            if isinstance(value, str):
                return value[:253]
    return ""


@contextlib.contextmanager
def shaper_before() -> Iterator[None]:
    """The shaper's per-pod step as it was up to commit ba23026, for the duration."""
    now = pod_track._choose_owner, pod_track.template_hash_of
    pod_track._choose_owner, pod_track.template_hash_of = _choose_owner_before, _template_hash_before
    try:
        yield
    finally:
        pod_track._choose_owner, pod_track.template_hash_of = now


def coming_up(i: int) -> list[tuple[str, dict[str, Any]]]:
    """The watch events of pod ``i`` coming up: added Pending, scheduled, Running."""
    running = pod(i)
    pending = copy.deepcopy(running)
    del pending["spec"]["nodeName"]
    pending["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    scheduled = copy.deepcopy(pending)
    scheduled["spec"]["nodeName"] = running["spec"]["nodeName"]
    scheduled["status"]["conditions"] = running["status"]["conditions"][-1:]
    return [("ADDED", pending), ("MODIFIED", scheduled), ("MODIFIED", running)]


def going(i: int) -> list[tuple[str, dict[str, Any]]]:
    """The watch events of pod ``i`` replaced: marked for deletion, then deleted."""
    marked = pod(i)
    marked["metadata"]["deletionTimestamp"] = DELETED_AT
    marked["metadata"]["deletionGracePeriodSeconds"] = 30
    return [("MODIFIED", marked), ("DELETED", marked)]


class WatchFeed:
    """Feeds watch events to a watcher's pod stream as the client decodes them, one line at a time."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher
        self.stream = _Stream(PODS, tracked=True, lifecycles=True, resume_key=RV_PREFIX + "core/Pod/*/*")
        self.rv = 10_000_000
        self.events = 0

    async def feed(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        for event_type, obj in events:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            line = orjson.dumps({"type": event_type, "object": obj})
            await self.watcher._handle(self.stream, decode_watch_line(line, PODS))
            self.events += 1


async def measure(n: int, roll: int, *, before: bool) -> dict[str, Any]:
    cluster, bus = PodsCluster(0, 1, whole=False), CountingBus()  # the ReplicaSets' GETs only
    watcher = Watcher(load_tracer_config(TRACER_CONFIG), cluster, bus, Metrics())
    for d in range(-(-(n + roll) // PODS_PER_REPLICASET)):
        watcher.shaper.observe_object("ADDED", deployment(d), 1)
    feed = WatchFeed(watcher)
    with shaper_before() if before else contextlib.nullcontext():
        gc.collect()
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        started = time.process_time()
        for i in range(n):
            await feed.feed(coming_up(i))
        gc.collect()
        after_ramp, _ = tracemalloc.get_traced_memory()
        for i in range(roll):  # a replacement comes up beside each pod replaced, as a rollout does
            await feed.feed(coming_up(n + i))
            await feed.feed(going(i))
        cpu = time.process_time() - started
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    live = len(watcher.shaper.pods)
    return {
        "shaper": "before" if before else "now",
        "live_pods": live,
        "kept_mib": round((kept - base) / MIB, 2),
        "kept_bytes_per_live_pod": round((kept - base) / live),
        "kept_bytes_per_pod_after_ramp": round((after_ramp - base) / n),
        "peak_mib": round((peak - base) / MIB, 2),
        "watch_events": feed.events,
        "records": bus.records,
        "cpu_s_traced": round(cpu, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=20_000, help="live pods after the ramp")
    parser.add_argument("--roll", type=int, help="pods replaced after the ramp (default: a quarter)")
    args = parser.parse_args()
    roll = args.pods // 4 if args.roll is None else args.roll
    now = asyncio.run(measure(args.pods, roll, before=False))
    before = asyncio.run(measure(args.pods, roll, before=True))
    out = {
        "pods": args.pods,
        "replaced": roll,
        "now": now,
        "before": before,
        "kept_now_vs_before": round(now["kept_mib"] / max(before["kept_mib"], 0.01), 3),
        "kept_mib_at_50000_pods": {
            "now": round(now["kept_bytes_per_live_pod"] * 50_000 / MIB, 1),
            "before": round(before["kept_bytes_per_live_pod"] * 50_000 / MIB, 1),
        },
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
