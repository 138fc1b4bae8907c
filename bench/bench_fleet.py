"""What a fleet costs the sink per message; prints one JSON document.

A sink records one cluster of the topic. It tells each message's cluster from its Kafka header before
anything else, and never scans another cluster's payload. This benchmark measures that check beside
the C ingest scan (``native.scan``) of the same batch, in one run, in memory (no broker):

* ``own``: a batch where every message belongs to the sink's cluster. This is the common case, one
  tuple comparison per message;
* ``mixed``: half the messages come from another cluster. Those are skipped, and the batch the scan
  sees is half empty.

Usage::

    .venv/bin/python -m bench.bench_fleet [--messages 10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import time
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from bench.environment import machine
from pipeline.formats.wire import native
from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.headers import cluster_header
from pipeline.io.kafka.message import PartitionBatch
from pipeline.model.keys import ClusterId
from pipeline.sink.settings import SinkSettings
from pipeline.sink.sink import Sink
from pipeline.sink.source import EventSource
from pipeline.sink.synthetic import synthetic_events
from pipeline.store.memory_store import MemorySegmentStore

EU, US = ClusterId("eu"), ClusterId("us")


class _Record(NamedTuple):
    """The fields of a consumed record the sink reads (aiokafka delivers headers as a tuple)."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes], ...]


def _best_ns_per_message(work: Callable[[], object], messages: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best / messages * 1e9


def _batch(values: list[bytes | None], other_every: int) -> PartitionBatch:
    own, other = tuple(cluster_header(EU)), tuple(cluster_header(US))
    return PartitionBatch.of(
        0,
        [
            _Record(i, b"k", v, 0, other if other_every and i % other_every == 0 else own)
            for i, v in enumerate(values)
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    values: list[bytes | None] = [
        encode_event(e) for e in synthetic_events(args.messages, 1_763_700_000_000, 600_000)
    ]
    # the checks measured never reach the source (no dead letters among valid events)
    sink = Sink(cast("EventSource", None), MemorySegmentStore(), SinkSettings(), cluster=EU)
    figures: dict[str, Any] = {}
    loop = asyncio.new_event_loop()
    for name, other_every in (("own", 0), ("mixed", 2)):
        batch = _batch(values, other_every)
        check = _best_ns_per_message(
            functools.partial(sink._other_clusters_in, batch), len(values), args.repeat
        )
        scan = _best_ns_per_message(functools.partial(native.scan, values), len(values), args.repeat)
        heads = _best_ns_per_message(
            lambda b=batch: loop.run_until_complete(sink._heads(b)),  # type: ignore[misc]  # bound default
            len(values),
            args.repeat,
        )
        figures[name] = {
            "cluster_check_ns_per_message": round(check, 1),
            "wirescan_ns_per_message": round(scan, 1),
            "sink_heads_ns_per_message": round(heads, 1),
            "ratio_check_to_scan": round(check / scan, 3),
        }
    loop.close()
    result = {
        "messages": args.messages,
        "native_scan": native.NATIVE,
        **figures,
        "machine": {**machine(), "loadavg": os.getloadavg()},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
