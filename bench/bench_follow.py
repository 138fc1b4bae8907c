"""Memory of ``replay --follow``'s source over a long synthetic topic; prints one JSON document.

The topic is generated on the fly (never held in memory) and handed to :class:`FollowSource` through its
``tail`` seam, so the figure is the source's own memory, not Kafka's or a list of records: a stream of
short-lived Jobs, each a distinct owner (applied, three pods' lifecycles, deleted), with 1% of the
records redelivered, as a producer's retries do. Figures: resident memory (RSS, from /proc) after a
warm-up (the first ``--warmup`` share of the records) and at the end, their difference, and the size of
every structure the source keeps (each bounded: see pipeline/replay/sources.py).

Usage::

    .venv/bin/python -m bench.bench_follow                     # 2 million records
    .venv/bin/python -m bench.bench_follow --records 5000000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from pipeline.formats.assemble import assemble_window
from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.message import Message
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey
from pipeline.model.tracer_config import TracerConfig
from pipeline.replay.plan import plan_replay
from pipeline.replay.sources import FollowSource

T0 = 1_767_225_600_000
BATCH = 5000


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]}
            }
        },
    }


def synthetic_records(total: int) -> Iterator[Message]:
    """``total`` records: per Job 5 events (apply, 3 finished pods, delete); every 100th redelivered."""
    offset = 0
    n = 0
    while offset < total:
        name = f"job-{n}"
        key = ObjectKey(f"batch/Job/bench/{name}")
        ts = T0 + n * 10
        events = [Event.applied(ts, key, job(name), 1)]
        events += [
            Event.pod_lifecycle(
                ts + p,
                ObjectKey(f"core/Pod/bench/{name}-{p}"),
                owner_key=key,
                pod_spec_hash=7,
                start_ms=ts + p,
                end_ms=ts + p + 1000 + (n * 37 + p) % 5000,
            )
            for p in range(3)
        ]
        events.append(Event.deleted(ts + 9, key, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {}}))
        for e in events:
            value = encode_event(e)
            yield Message(0, offset, e.ts_ms, None, value)
            if offset % 100 == 0:
                yield Message(0, offset + 1, e.ts_ms, None, value)  # a redelivery, byte-identical
            offset += 1
        n += 1


async def run(total: int, warmup: float) -> dict[str, Any]:
    marks: dict[str, float] = {}
    warm_at = int(total * warmup)

    async def tail(_s: KafkaSettings, _t: str, _from: int) -> AsyncIterator[list[Message]]:
        batch: list[Message] = []
        for i, record in enumerate(synthetic_records(total)):
            batch.append(record)
            if i == warm_at:
                gc.collect()
                marks["rss_after_warmup_mb"] = rss_mb()
            if len(batch) >= BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    config = TracerConfig.default()
    source = FollowSource(KafkaSettings("unused:9092"), "bench", 1000, now_ms=lambda: T0, tail=tail)
    source.plan = plan_replay(assemble_window(None, [], T0, T0 + 1, config=config), 1.0)
    started = time.perf_counter()
    steps = 0
    async for _ in source.steps():
        steps += 1
    elapsed = time.perf_counter() - started
    gc.collect()
    end = rss_mb()
    return {
        "benchmark": "follow_source_memory",
        "records": total,
        "steps": steps,
        "warmup_records": warm_at,
        "rss_after_warmup_mb": round(marks["rss_after_warmup_mb"], 1),
        "rss_end_mb": round(end, 1),
        "rss_growth_after_warmup_mb": round(end - marks["rss_after_warmup_mb"], 1),
        "records_per_s": round(total / elapsed),
        "structures": source.memory_figures(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument(
        "--warmup", type=float, default=0.25, help="share of the records before the first figure"
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.records, args.warmup)), indent=2))


if __name__ == "__main__":
    main()
