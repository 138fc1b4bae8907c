"""Sink benchmark on the real broker; prints one JSON document.

One topic (6 partitions) is filled with N synthetic events spread over one hour of event time. Then, in
the same run and on the same data:

* ``raw_consumer``: a plain aiokafka consumer group drains the topic (``getmany``, no decoding);
* ``ingest_only_consumer``: the same, plus the sink's in-memory work per batch (the C check of every
  message and the fold into per-partition compactors, segments built but never written): the ceiling
  of this sink before anything touches the disk;
* ``decode_only_consumer``: the same, plus a full :func:`~pipeline.formats.wire.codec.decode_event` per
  message, for comparison;
* ``sink``: the in-process sink (check, dedupe, compact, zstd, atomic fsynced writes, commits) drains
  it into a local segment store until every offset is inside a durable segment, with the default
  60 s windows (360 segments here) and again with 10-minute windows (36): the difference is the
  fixed cost of each durable segment (encode, create, fsync, rename); and once more writing segment
  format 3 (delta-coded; ``sink_delta_format``) beside the default (format 2, events whole): what delta
  coding costs the sink;
* ``export``: the one-hour window exported from that store (kubetape and SimKube v2).

Rates count from the first message received to the last (group joins are excluded from both).
Targets (issue 5): sink >= 70 % of the raw consumer, >= 20k events/s; export of 100k events < 2 s.
CPU figures (process CPU per event; export: its thread's CPU) are printed beside the wall-clock ones,
with the load average: on a shared machine, wall-clock times stretch with the load, CPU much less.

``--churn``: a day of Job churn instead (50 short pods a minute for 24 h of event time: each pod
created, its lifecycle ended 20 s later, deleted 10 s after that; 216k events). It reports the keyframe
bytes and the sink's RSS after the first hour of the day and at its end (both must stay flat: the
state holds live objects and 10 minutes of churn, not history), and the sink's rate as a ratio of the
raw consumer's in the same run.

``--parts``: where the sink's own CPU goes, without a broker: the same workload's messages (split over
the partitions by key) go through the sink's in-memory steps one batch at a time, each timed apart
(process CPU per event): taking offsets and values from the records, the C check (scan), the C fold
and the Python rules it leaves, closing segments (the wire segment built, the keyframes sorted, the
state settled) and encoding them (msgpack and zstd, what the writer threads do). It is a profile, not a
rate: compare parts within one run.

``--security-ratio``: the cost of TLS and SASL. Two private brokers, one plaintext and one secured
(SASL_SSL with SCRAM-SHA-512, the local stack's ``--kafka-security sasl-ssl``), get the same N events; the
raw consumer and the sink drain each in the same run, and the ratios secured / plaintext are printed.

Usage::

    .venv/bin/python -m bench.bench_sink                  # starts a private Kafka (~30 s)
    .venv/bin/python -m bench.bench_sink --bootstrap H:P  # reuse a running broker
    .venv/bin/python -m bench.bench_sink --churn          # a day of Job churn
    .venv/bin/python -m bench.bench_sink --parts          # the sink's CPU per step, no broker
    .venv/bin/python -m bench.bench_sink --security-ratio # SASL_SSL beside plaintext (~2 min of brokers)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from aiokafka import TopicPartition

from bench.environment import machine, private_brokers, private_stack
from pipeline.formats.segment.header import DEFAULT_WRITE_VERSION
from pipeline.formats.wire import native
from pipeline.formats.wire.codec import decode_event, encode_event
from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.clients import new_consumer, new_producer
from pipeline.io.kafka.message import PartitionBatch
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.sink_member import KafkaSinkSource
from pipeline.io.metrics import Metrics
from pipeline.sink import compactor as compactor_module
from pipeline.sink import synthetic
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.service import tune_gc_for_throughput
from pipeline.sink.settings import SinkSettings
from pipeline.sink.sink import Sink
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportFormat, ExportRequest, export_window
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.segment_store import SegmentStore
from pipeline.store.state import ObjectState

PARTITIONS = 6


Broker = str | KafkaSettings
"""A bootstrap address (plaintext) or full settings (a secured broker: ``--security-ratio``)."""


def _kafka(broker: Broker) -> KafkaSettings:
    return broker if isinstance(broker, KafkaSettings) else KafkaSettings(broker)


async def fill_new_topic(bootstrap: Broker, name: str, n: int) -> tuple[str, int, dict[int, int]]:
    """A new topic ``bench.NAME.<random>`` of :data:`PARTITIONS` partitions filled with ``n`` synthetic
    events over the last hour (from a whole minute on): (topic, its first minute in ms, end offset by
    partition)."""
    topic = f"bench.{name}.{uuid.uuid4().hex[:8]}"
    await ensure_topic(_kafka(bootstrap), topic, PARTITIONS)
    now = int(time.time() * 1000) - 3_600_000
    start_ms = now - now % 60_000
    synthetic.FAST_HASHES = True
    ends = await _fill_with(bootstrap, topic, synthetic.synthetic_events(n, start_ms, 3_600_000))
    return topic, start_ms, ends


async def bench_raw(
    bootstrap: Broker,
    topic: str,
    total: int,
    check: Callable[[bytes], object] | None = None,
    batch_check: Callable[[int, list[Any]], object] | None = None,
) -> dict[str, Any]:
    """Drain the topic with a plain consumer group; ``check`` is applied to every message value,
    ``batch_check`` to each partition's records of a batch."""
    consumer = new_consumer(_kafka(bootstrap), topic, group_id=f"bench-raw-{uuid.uuid4().hex[:6]}")
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
    bootstrap: Broker,
    topic: str,
    ends: dict[int, int],
    store: Path | SegmentStore,
    *,
    window_ms: int = 60_000,
    segment_format: int = DEFAULT_WRITE_VERSION,
) -> dict[str, Any]:
    settings = SinkSettings(
        CompactionSettings(topic=topic, window_ms=window_ms, keyframe_every=10),
        batch_max_records=10_000,
        segment_format=segment_format,
    )
    source = KafkaSinkSource(_kafka(bootstrap), topic, group_id=f"bench-sink-{uuid.uuid4().hex[:6]}")
    metrics = Metrics()
    sink = Sink(source, LocalSegmentStore(store) if isinstance(store, Path) else store, settings, metrics)
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
        heads, undecided = native.scan(batch.values)
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


def bench_export(
    store: Path | Callable[[], SegmentStore],
    start_ms: int,
    formats: tuple[ExportFormat, ...] = tuple(ExportFormat),
) -> dict[str, Any]:
    """Export the hour from ``start_ms`` in each of ``formats``, each from a fresh catalog of ``store``
    (a directory, or a function opening a new client: nothing is cached from an earlier run)."""
    out: dict[str, Any] = {}
    for fmt in formats:
        catalog = SegmentCatalog(LocalSegmentStore(store) if isinstance(store, Path) else store())
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
    with private_stack([]) as (_, info):
        yield info.bootstrap


async def _main(bootstrap: Broker, n: int) -> dict[str, Any]:
    tune_gc_for_throughput()  # as the sink service does
    topic, start_ms, ends = await fill_new_topic(bootstrap, "sink", n)
    total = sum(ends.values())
    raw = await bench_raw(bootstrap, topic, total)
    ingest_only = await bench_raw(bootstrap, topic, total, batch_check=_ingest_check())
    decode_only = await bench_raw(bootstrap, topic, total, decode_event)
    with tempfile.TemporaryDirectory(prefix="kubetape-bench-segments-") as tmp:
        sink = await bench_sink(bootstrap, topic, ends, Path(tmp))
        export = await asyncio.to_thread(bench_export, Path(tmp), start_ms)
    with tempfile.TemporaryDirectory(prefix="kubetape-bench-segments-") as tmp:
        sink_10min = await bench_sink(bootstrap, topic, ends, Path(tmp), window_ms=600_000)
    with tempfile.TemporaryDirectory(prefix="kubetape-bench-segments-") as tmp:
        sink_v3 = await bench_sink(bootstrap, topic, ends, Path(tmp), segment_format=3)
    return {
        "benchmark": "sink",
        "machine": machine(),
        "events": n,
        "partitions": PARTITIONS,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "raw_consumer": raw,
        "ingest_only_consumer": ingest_only,
        "decode_only_consumer": decode_only,
        "sink": sink,
        "sink_10min_windows": sink_10min,
        "sink_delta_format": sink_v3,
        "sink_delta_format_vs_sink": round(sink_v3["events_per_s"] / sink["events_per_s"], 3),
        "sink_delta_format_cpu_vs_sink_cpu": round(sink_v3["cpu_us_per_event"] / sink["cpu_us_per_event"], 2),
        "sink_vs_raw": round(sink["events_per_s"] / raw["events_per_s"], 3),
        "sink_10min_windows_vs_raw": round(sink_10min["events_per_s"] / raw["events_per_s"], 3),
        "ingest_only_vs_raw": round(ingest_only["events_per_s"] / raw["events_per_s"], 3),
        "decode_only_vs_raw": round(decode_only["events_per_s"] / raw["events_per_s"], 3),
        "sink_cpu_vs_raw_cpu": round(sink["cpu_us_per_event"] / raw["cpu_us_per_event"], 2),
        "export_one_hour": export,
    }


async def _drain_both(plain: KafkaSettings, secured: KafkaSettings, n: int) -> dict[str, Any]:
    tune_gc_for_throughput()
    out: dict[str, Any] = {}
    for name, kafka in (("plaintext", plain), ("sasl_ssl", secured)):
        topic, _start_ms, ends = await fill_new_topic(kafka, f"security-{name}", n)
        raw = await bench_raw(kafka, topic, sum(ends.values()))
        with tempfile.TemporaryDirectory(prefix="kubetape-bench-segments-") as tmp:
            sink = await bench_sink(kafka, topic, ends, Path(tmp))
        out[name] = {"raw_consumer": raw, "sink": sink}
    return {
        "benchmark": "sink_security",
        "machine": machine(),
        "events": n,
        "partitions": PARTITIONS,
        "load_average_1m": round(os.getloadavg()[0], 2),
        **out,
        "raw_sasl_ssl_vs_plaintext": round(
            out["sasl_ssl"]["raw_consumer"]["events_per_s"]
            / out["plaintext"]["raw_consumer"]["events_per_s"],
            3,
        ),
        "sink_sasl_ssl_vs_plaintext": round(
            out["sasl_ssl"]["sink"]["events_per_s"] / out["plaintext"]["sink"]["events_per_s"], 3
        ),
    }


def _security_ratio(n: int) -> dict[str, Any]:
    with private_brokers() as (plain, secured):
        return asyncio.run(_drain_both(plain, secured, n))


def churn_events(start_ms: int, minutes: int, per_minute: int) -> list[Any]:
    """A day of Job churn: every pod is created, ends 20 s later, and is deleted 10 s after that."""
    from pipeline.model.events import Event
    from pipeline.model.keys import object_key

    events = []
    for minute in range(minutes):
        job = object_key("batch/v1", "Job", "batch", f"job-{minute}")
        for i in range(per_minute):
            name = f"job-{minute}-{i}"
            at = start_ms + minute * 60_000 + i * (60_000 // per_minute)
            key, uid = object_key("v1", "Pod", "batch", name), f"uid-{minute}-{i}"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "batch", "labels": {"job-name": f"job-{minute}"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
            }
            rv = str(minute * per_minute * 3 + i * 3 + 1)
            events.append(Event.applied(at, key, pod, 1, uid=uid, resource_version=rv))
            events.append(
                Event.pod_lifecycle(
                    at + 20_000, key, owner_key=job, pod_spec_hash=7, start_ms=at, end_ms=at + 20_000, uid=uid
                )
            )
            events.append(Event.deleted(at + 30_000, key, pod, uid=uid, resource_version=str(int(rv) + 2)))
    events.sort(key=lambda e: e.ts_ms)
    return events


async def _fill_with(bootstrap: Broker, topic: str, events: list[Any]) -> dict[int, int]:
    producer = new_producer(
        dataclasses.replace(_kafka(bootstrap), client_id="bench-sink-producer", linger_ms=50)
    )
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
    consumer = new_consumer(_kafka(bootstrap), group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        await consumer.stop()
    return {tp.partition: int(o) for tp, o in ends.items()}


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def _churn(bootstrap: Broker, minutes: int, per_minute: int) -> dict[str, Any]:
    tune_gc_for_throughput()
    topic = f"bench.churn.{uuid.uuid4().hex[:8]}"
    await ensure_topic(_kafka(bootstrap), topic, PARTITIONS)
    now = int(time.time() * 1000) - 3_600_000
    start_ms = now - now % 60_000 - minutes * 60_000
    events = churn_events(start_ms, minutes, per_minute)
    ends = await _fill_with(bootstrap, topic, events)
    del events
    total = sum(ends.values())
    raw = await bench_raw(bootstrap, topic, total)
    settings = SinkSettings(CompactionSettings(topic=topic, keyframe_every=10), batch_max_records=10_000)
    source = KafkaSinkSource(_kafka(bootstrap), topic, group_id=f"bench-churn-{uuid.uuid4().hex[:6]}")
    metrics = Metrics()
    with tempfile.TemporaryDirectory(prefix="kubetape-bench-churn-") as tmp:
        sink = Sink(source, LocalSegmentStore(Path(tmp)), settings, metrics)
        source.on_assigned = sink.on_assigned
        source.on_revoked = sink.on_revoked
        first, rss_first_hour = None, None
        async with source:
            while len(sink.compactors) < PARTITIONS or any(
                sink.compactors[p].consumed_offset < end for p, end in ends.items()
            ):
                if await sink.run_round() and first is None:
                    first = time.perf_counter()
                if (
                    rss_first_hour is None
                    and len(sink.compactors) == PARTITIONS
                    and all(
                        sink.compactors[p].consumed_offset * minutes >= end * 60 for p, end in ends.items()
                    )
                ):  # an hour of the day consumed
                    rss_first_hour = _rss_mib()
            elapsed = time.perf_counter() - (first or time.perf_counter())
            await sink.flush_all()
        rss_end = _rss_mib()
        state = {
            "objects": sum(len(c.state.objects) for c in sink.compactors.values()),
            "lifecycles": sum(len(c.state.lifecycles) for c in sink.compactors.values()),
            "tombstones": sum(len(c.state.tombstones) for c in sink.compactors.values()),
        }
        sink.close()
        catalog = SegmentCatalog(LocalSegmentStore(Path(tmp)))
        catalog.refresh()
        keyframes = [
            (e.header.keyframe_at_ms or 0, s.size)
            for e in catalog.entries()
            if e.header.keyframe_at_ms is not None
            for s in catalog.store.list()
            if s.name == e.name
        ]
    hour_one = [size for t, size in keyframes if start_ms + 1_800_000 <= t < start_ms + 3_600_000]
    last_hour = [size for t, size in keyframes if t >= start_ms + (minutes - 60) * 60_000]
    stored = metrics.value("sink_events_stored_total")
    return {
        "benchmark": "sink_job_churn",
        "minutes": minutes,
        "pods_per_minute": per_minute,
        "events": total,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "raw_consumer": raw,
        "sink": {
            "events_stored": int(stored),
            "seconds": round(elapsed, 3),
            "events_per_s": round(stored / elapsed),
        },
        "sink_vs_raw": round(stored / elapsed / raw["events_per_s"], 3),
        "keyframe_bytes_mean": {
            "first_hour": round(sum(hour_one) / max(len(hour_one), 1)),
            "last_hour": round(sum(last_hour) / max(len(last_hour), 1)),
        },
        "sink_rss_mib": {"after_first_hour": rss_first_hour, "end_of_day": rss_end},
        "state_at_end": state,
    }


class _Record(NamedTuple):
    """What the sink reads of a fetched record (aiokafka's ConsumerRecord has these fields)."""

    offset: int
    key: bytes
    value: bytes
    timestamp: int
    headers: tuple[tuple[str, bytes], ...]


def parts_profile(n: int, *, window_ms: int = 60_000, batch: int = 10_000) -> dict[str, Any]:
    """The sink's in-memory steps on ``n`` synthetic events, each step's process CPU per event."""
    tune_gc_for_throughput()
    synthetic.FAST_HASHES = True
    start_ms = 1_700_000_000_000 - 1_700_000_000_000 % 60_000
    by_partition: dict[int, list[_Record]] = {p: [] for p in range(PARTITIONS)}
    for e in synthetic.synthetic_events(n, start_ms, 3_600_000):
        records = by_partition[zlib.crc32(e.key.encode()) % PARTITIONS]
        records.append(_Record(len(records), e.key.encode(), encode_event(e), e.ts_ms, ()))
    cpu = dict.fromkeys(("records", "scan", "fold", "close", "build", "keyframe", "settle", "encode"), 0.0)

    def timed(part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu[part] += time.process_time() - began

        return wrapper

    settings = CompactionSettings(window_ms=window_ms, keyframe_every=10)  # as bench_sink's sink
    compactors = {p: PartitionCompactor(p, settings) for p in range(PARTITIONS)}
    for c in compactors.values():
        c._settling.settle = timed("settle", c._settling.settle)  # type: ignore[method-assign]
        c._close = timed("close", c._close)  # type: ignore[method-assign]
    module = compactor_module.__dict__  # the compactor's own name for it: patched for this run only
    build, keyframe_heads = module["build_wire_segment"], ObjectState.keyframe_heads
    module["build_wire_segment"] = timed("build", build)
    ObjectState.keyframe_heads = timed("keyframe", keyframe_heads)  # type: ignore[method-assign]
    closed = []
    per_round = max(batch // PARTITIONS, 1)
    try:
        for first in range(0, max(map(len, by_partition.values())), per_round):
            for p, records in by_partition.items():
                if not records[first : first + per_round]:
                    continue
                began = time.process_time()
                batch_of = PartitionBatch.of(p, records[first : first + per_round])
                cpu["records"] += time.process_time() - began
                heads, undecided = timed("scan", native.scan)(batch_of.values)
                assert not undecided, "the benchmark's events are all valid"
                closed += timed("fold", compactors[p].add_batch)(batch_of.offsets, heads, 0.0)
        closed += [seg for comp in compactors.values() if (seg := comp.flush()) is not None]
    finally:
        module["build_wire_segment"] = build
        ObjectState.keyframe_heads = keyframe_heads  # type: ignore[method-assign]
    for c in closed:
        timed("encode", c.encode)(3, DEFAULT_WRITE_VERSION)
    # add_batch opens (a keyframe: the state sorted) and closes segments too: each part counted once
    cpu["fold"] -= cpu["close"] + cpu["keyframe"]
    cpu["close"] -= cpu["build"] + cpu["settle"]
    return {
        "benchmark": "sink_parts",
        "machine": machine(),
        "events": n,
        "partitions": PARTITIONS,
        "segments": len(closed),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpu_us_per_event": {k: round(v / n * 1e6, 2) for k, v in cpu.items()},
        "cpu_us_per_event_total": round(sum(cpu.values()) / n * 1e6, 2),
        "note": "fold: the C fold and the Python rules it leaves; close: closing a segment minus "
        "building it and settling the state; keyframe: the state sorted for a keyframe; encode runs on "
        "the writer threads in the sink",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default=None, help="a running broker (default: start a private one)")
    parser.add_argument("--events", type=int, default=100_000, help="events in the topic (100000)")
    parser.add_argument("--churn", action="store_true", help="a day of Job churn (keyframes, RSS, rate)")
    parser.add_argument(
        "--security-ratio", action="store_true", help="SASL_SSL beside plaintext: raw consumer and sink rates"
    )
    parser.add_argument("--parts", action="store_true", help="the sink's CPU per step, no broker")
    parser.add_argument("--churn-minutes", type=int, default=1440, help="minutes of churn (1440: a day)")
    parser.add_argument("--pods-per-minute", type=int, default=50, help="short pods a minute (50)")
    args = parser.parse_args()
    if args.parts:
        print(json.dumps(parts_profile(args.events), indent=2))
        return
    if args.security_ratio:
        print(json.dumps(_security_ratio(args.events), indent=2))
        return
    with _broker(args) as bootstrap:
        if args.churn:
            result = asyncio.run(_churn(bootstrap, args.churn_minutes, args.pods_per_minute))
        else:
            result = asyncio.run(_main(bootstrap, args.events))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
