"""Sink benchmark on the real broker; prints one JSON document.

One topic (6 partitions) is filled with N synthetic events spread over one hour of event time. Then, in
the same run and on the same data:

* ``raw_consumer``: a plain aiokafka consumer group drains the topic (``getmany``, no decoding);
* ``ingest_only_consumer``: the same, plus the sink's in-memory work per batch (the C check of every
  message and the fold into per-partition compactors, segments built but never written): the ceiling
  of this sink before anything touches the disk;
* ``decode_only_consumer``: the same, plus a full :func:`~pipeline.model.events.decode_event` per
  message, for comparison;
* ``sink``: the in-process sink (check, dedupe, compact, zstd, atomic fsynced writes, commits) drains
  it into a local segment store until every offset is inside a durable segment, with the default
  60 s windows (360 segments here) and again with 10-minute windows (36): the difference is the
  fixed cost of each durable segment (encode, create, fsync, rename);
* ``export``: the one-hour window exported from that store (kubetape and SimKube v2).

Rates count from the first message received to the last (group joins are excluded from both).
Targets (issue 5): sink >= 70 % of the raw consumer, >= 20k events/s; export of 100k events < 2 s.
CPU figures (process CPU per event; export: its thread's CPU) are printed beside the wall-clock ones,
with the load average: on a shared machine, wall-clock times stretch with the load, CPU much less.

Usage::

    .venv/bin/python -m bench.bench_sink                  # starts a private Kafka (~30 s)
    .venv/bin/python -m bench.bench_sink --bootstrap H:P  # reuse a running broker
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from pipeline.io.kafka import KafkaSettings, ensure_topic, new_consumer, new_producer
from pipeline.io.metrics import Metrics
from pipeline.io.segment_store import LocalSegmentStore
from pipeline.io.sink_consumer import KafkaSinkSource, PartitionBatch
from pipeline.model import wirescan
from pipeline.model.events import decode_event, encode_event
from pipeline.sink import synthetic
from pipeline.sink.catalog import SegmentCatalog
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.export import ExportFormat, ExportRequest, export_window
from pipeline.sink.service import tune_gc_for_throughput
from pipeline.sink.sink import Sink, SinkSettings

PARTITIONS = 6


async def fill_topic(bootstrap: str, topic: str, n: int, start_ms: int) -> dict[int, int]:
    synthetic.FAST_HASHES = True
    events = synthetic.synthetic_events(n, start_ms, 3_600_000)
    producer = new_producer(KafkaSettings(bootstrap, client_id="bench-sink-producer", linger_ms=50))
    await producer.start()
    try:
        pending = []
        for e in events:
            pending.append(
                await producer.send(topic, encode_event(e), key=e.key.encode(), timestamp_ms=e.ts_ms)
            )
            if len(pending) >= 5_000:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    consumer = new_consumer(KafkaSettings(bootstrap), group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        await consumer.stop()
    return {tp.partition: int(o) for tp, o in ends.items()}


async def bench_raw(
    bootstrap: str,
    topic: str,
    total: int,
    check: Callable[[bytes], object] | None = None,
    batch_check: Callable[[int, list[Any]], object] | None = None,
) -> dict[str, Any]:
    """Drain the topic with a plain consumer group; ``check`` is applied to every message value,
    ``batch_check`` to each partition's records of a batch."""
    consumer = new_consumer(KafkaSettings(bootstrap), topic, group_id=f"bench-raw-{uuid.uuid4().hex[:6]}")
    await consumer.start()
    seen, first = 0, None
    cpu = time.process_time()
    try:
        while seen < total:
            batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
            got = sum(len(ms) for ms in batches.values())
            if got and first is None:
                first = time.perf_counter()
                cpu = time.process_time()
            if check is not None:
                for records in batches.values():
                    for r in records:
                        check(r.value)
            if batch_check is not None:
                for tp, records in batches.items():
                    batch_check(tp.partition, records)
            seen += got
        await consumer.commit()
        elapsed = time.perf_counter() - (first or time.perf_counter())
        cpu = time.process_time() - cpu
    finally:
        await consumer.stop()
    return {
        "events": seen,
        "seconds": round(elapsed, 3),
        "events_per_s": round(seen / elapsed),
        "cpu_us_per_event": round(cpu / seen * 1e6, 2),
    }


async def bench_sink(
    bootstrap: str, topic: str, ends: dict[int, int], store_dir: Path, window_ms: int = 60_000
) -> dict[str, Any]:
    settings = SinkSettings(
        CompactionSettings(topic=topic, window_ms=window_ms, keyframe_every=10), batch_max_records=10_000
    )
    source = KafkaSinkSource(KafkaSettings(bootstrap), topic, group_id=f"bench-sink-{uuid.uuid4().hex[:6]}")
    metrics = Metrics()
    sink = Sink(source, LocalSegmentStore(store_dir), settings, metrics)
    source.on_assigned = sink.on_assigned
    source.on_revoked = sink.on_revoked
    phases = _time_phases(source, sink)
    first = None
    cpu = time.process_time()
    async with source:
        while len(sink.compactors) < PARTITIONS or any(
            sink.compactors[p].consumed_offset < end for p, end in ends.items()
        ):
            if await sink.run_round() and first is None:
                first = time.perf_counter()
                cpu = time.process_time()
        consumed_at = time.perf_counter()
        await sink.flush_all()  # the open segments too: every event durable, every offset committed
        phases["final_flush"] = time.perf_counter() - consumed_at
        elapsed = time.perf_counter() - (first or time.perf_counter())
        cpu = time.process_time() - cpu  # all threads: zstd and fsync calls of the writers included
    sink.close()
    stored = metrics.value("sink_events_stored_total")
    seg_bytes = metrics.value("sink_segment_bytes_total")
    return {
        "events_stored": int(stored),
        "seconds": round(elapsed, 3),
        "events_per_s": round(stored / elapsed),
        "cpu_us_per_event": round(cpu / stored * 1e6, 2),
        "segments": int(metrics.value("sink_segments_written_total")),
        "bytes_per_event": round(seg_bytes / stored, 1),
        "phase_seconds": {k: round(v, 3) for k, v in phases.items()},
    }


def _ingest_check() -> Callable[[int, list[Any]], object]:
    """What the sink does with a batch in memory, without writing: the C scan and the fold into
    per-partition compactors (segments are closed and built, never encoded or stored)."""
    compactors: dict[int, PartitionCompactor] = {}

    def check(partition: int, records: list[Any]) -> object:
        batch = PartitionBatch.of(partition, records)
        heads, undecided = wirescan.scan(batch.values)
        assert not undecided, "the benchmark's events are all valid"
        compactor = compactors.setdefault(partition, PartitionCompactor(partition, CompactionSettings()))
        return compactor.add_batch(batch.offsets, heads, time.monotonic())

    return check


def _time_phases(source: KafkaSinkSource, sink: Sink) -> dict[str, float]:
    """Wrap the loop's awaits with timers: where a round's time goes (fetch, write, commit)."""
    phases = {"getmany": 0.0, "write_wait": 0.0, "commit": 0.0}

    def timed(name: str, fn: Any) -> Any:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                phases[name] += time.perf_counter() - began

        return wrapper

    source.getmany = timed("getmany", source.getmany)  # type: ignore[method-assign]
    source.commit = timed("commit", source.commit)  # type: ignore[method-assign]
    sink._reap = timed("write_wait", sink._reap)  # type: ignore[method-assign]
    return phases


def bench_export(store_dir: Path, start_ms: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fmt in ExportFormat:
        catalog = SegmentCatalog(LocalSegmentStore(store_dir))
        began, cpu = time.perf_counter(), time.thread_time()
        result = export_window(catalog, ExportRequest(start_ms, start_ms + 3_600_000, fmt))
        out[fmt.value] = {
            "seconds": round(time.perf_counter() - began, 3),
            "cpu_seconds": round(time.thread_time() - cpu, 3),
            "events": result.events,
            "bytes": len(result.data),
        }
    return out


@contextlib.contextmanager
def _broker(args: argparse.Namespace) -> Iterator[str]:
    if args.bootstrap:
        yield args.bootstrap
        return
    from pipeline.stack.stack import LocalStack

    with tempfile.TemporaryDirectory(prefix="kubetape-bench-") as tmp:
        stack = LocalStack(Path(tmp))
        info = stack.up([])
        try:
            yield info.bootstrap
        finally:
            stack.down()


async def _main(bootstrap: str, n: int) -> dict[str, Any]:
    tune_gc_for_throughput()  # as the sink service does
    topic = f"bench.sink.{uuid.uuid4().hex[:8]}"
    await ensure_topic(KafkaSettings(bootstrap), topic, PARTITIONS)
    now = int(time.time() * 1000) - 3_600_000
    start_ms = now - now % 60_000
    ends = await fill_topic(bootstrap, topic, n, start_ms)
    total = sum(ends.values())
    raw = await bench_raw(bootstrap, topic, total)
    ingest_only = await bench_raw(bootstrap, topic, total, batch_check=_ingest_check())
    decode_only = await bench_raw(bootstrap, topic, total, decode_event)
    with tempfile.TemporaryDirectory(prefix="kubetape-bench-segments-") as tmp:
        sink = await bench_sink(bootstrap, topic, ends, Path(tmp))
        export = await asyncio.to_thread(bench_export, Path(tmp), start_ms)
    with tempfile.TemporaryDirectory(prefix="kubetape-bench-segments-") as tmp:
        sink_10min = await bench_sink(bootstrap, topic, ends, Path(tmp), window_ms=600_000)
    return {
        "benchmark": "sink",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "events": n,
        "partitions": PARTITIONS,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "raw_consumer": raw,
        "ingest_only_consumer": ingest_only,
        "decode_only_consumer": decode_only,
        "sink": sink,
        "sink_10min_windows": sink_10min,
        "sink_vs_raw": round(sink["events_per_s"] / raw["events_per_s"], 3),
        "sink_10min_windows_vs_raw": round(sink_10min["events_per_s"] / raw["events_per_s"], 3),
        "ingest_only_vs_raw": round(ingest_only["events_per_s"] / raw["events_per_s"], 3),
        "decode_only_vs_raw": round(decode_only["events_per_s"] / raw["events_per_s"], 3),
        "sink_cpu_vs_raw_cpu": round(sink["cpu_us_per_event"] / raw["cpu_us_per_event"], 2),
        "export_one_hour": export,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default=None, help="a running broker (default: start a private one)")
    parser.add_argument("--events", type=int, default=100_000, help="events in the topic (100000)")
    args = parser.parse_args()
    with _broker(args) as bootstrap:
        result = asyncio.run(_main(bootstrap, args.events))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
