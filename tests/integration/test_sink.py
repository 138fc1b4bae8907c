"""The sink against the real broker: events → segments → export, dead-lettering, idleness, rebalance,
HTTP export, and kill -9 of the ``kubetape sink`` process at random points."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiokafka import TopicPartition

from pipeline.formats.assemble import assemble_window
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.clients import new_consumer, new_producer
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.sink_member import KafkaSinkSource
from pipeline.io.metrics import Metrics
from pipeline.model.events import Event
from pipeline.model.tracer_config import TracerConfig
from pipeline.sink.compactor import CompactionSettings
from pipeline.sink.settings import SinkSettings
from pipeline.sink.sink import Sink
from pipeline.sink.synthetic import synthetic_events
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import EXPORT_ZSTD_LEVEL, ExportRequest, export_window
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.state import ObjectState
from tests.polling import eventually

REPO = Path(__file__).resolve().parents[2]
KUBETAPE = REPO / ".venv" / "bin" / "kubetape"


def recent_t0() -> int:
    # Recent event times: the broker's time-based retention would drop year-old timestamps.
    now = int(time.time() * 1000) - 3_600_000
    return now - now % 60_000


def unique_names(prefix: str) -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"it.{prefix}.{tag}", f"it.{prefix}.group.{tag}", f"it.{prefix}.dlq.{tag}"


async def produce(bootstrap: str, topic: str, events: list[Event], extra: list[bytes] | None = None) -> None:
    producer = new_producer(KafkaSettings(bootstrap=bootstrap))
    await producer.start()
    try:
        for e in events:
            await producer.send(topic, encode_event(e), key=e.key.encode(), timestamp_ms=e.ts_ms)
        for value in extra or []:
            await producer.send(topic, value, key=b"core/Pod/ns/garbage", partition=0)
        await producer.flush()
    finally:
        await producer.stop()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = new_consumer(KafkaSettings(bootstrap=bootstrap), group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: int(o) for tp, o in ends.items()}
    finally:
        await consumer.stop()


async def group_committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    consumer = new_consumer(KafkaSettings(bootstrap=bootstrap), group_id=group)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()


async def wait_committed(bootstrap: str, group: str, topic: str, partitions: int, within: float = 90) -> None:
    ends = await end_offsets(bootstrap, topic, partitions)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        committed = await group_committed(bootstrap, group, topic, partitions)
        if all((committed[p] or 0) >= ends[p] for p in range(partitions)):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"group {group} did not commit up to {ends} within {within}s: {committed}")


def direct_trace(events: list[Event], start_ms: int, end_ms: int) -> bytes:
    state = ObjectState()
    unique = [e for e in sorted(events, key=lambda e: e.ts_ms) if state.offer(e)]
    trace = assemble_window(
        None, unique, start_ms, end_ms, config=TracerConfig.default(), suppress_owned=True
    )
    return encode_segment(trace, EXPORT_ZSTD_LEVEL)


async def _metric(sink: Sink, name: str) -> float:
    return sink.metrics.value(name)


def export_bytes(segment_dir: Path, start_ms: int, end_ms: int) -> bytes:
    return export_window(SegmentCatalog(LocalSegmentStore(segment_dir)), ExportRequest(start_ms, end_ms)).data


@contextlib.asynccontextmanager
async def running_sink_loop(
    bootstrap: str, topic: str, group: str, dlq: str, *, segment_dir: Path, idle_close_s: float = 2.0
) -> AsyncIterator[tuple[Sink, asyncio.Task[None]]]:
    """A sink on ``topic`` writing to ``segment_dir``, and the task of its loop (stopped on exit)."""
    settings = SinkSettings(
        CompactionSettings(topic=topic, idle_close_s=idle_close_s, keyframe_every=3), 2_000, 200
    )
    source = KafkaSinkSource(KafkaSettings(bootstrap=bootstrap), topic, group_id=group, deadletter_topic=dlq)
    sink = Sink(source, LocalSegmentStore(segment_dir), settings, Metrics())
    source.on_assigned = sink.on_assigned
    source.on_revoked = sink.on_revoked
    stop = asyncio.Event()
    async with source:
        task = asyncio.create_task(sink.run(stop), name=f"sink-{group}")
        try:
            yield sink, task
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)


@contextlib.asynccontextmanager
async def running_sink(
    bootstrap: str, topic: str, group: str, dlq: str, *, segment_dir: Path, idle_close_s: float = 2.0
) -> AsyncIterator[Sink]:
    loop = running_sink_loop(bootstrap, topic, group, dlq, segment_dir=segment_dir, idle_close_s=idle_close_s)
    async with loop as (sink, _task):
        yield sink


async def test_sink_events_to_segments_export_equals_direct_trace_and_dead_letters(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic, group, dlq = unique_names("sink")
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    await ensure_topic(kafka, topic, 3)
    await ensure_topic(kafka, dlq, 1)
    t0 = recent_t0()
    events = synthetic_events(2_000, t0, 300_000)
    await produce(kafka_bootstrap, topic, events + events[:300], extra=[b"\xc1not-an-event"])
    async with running_sink(kafka_bootstrap, topic, group, dlq, segment_dir=tmp_path) as sink:
        await wait_committed(kafka_bootstrap, group, topic, 3)
        letters_sent = sink.metrics.value("sink_deadletter_total")
    assert export_bytes(tmp_path, t0, t0 + 300_000) == direct_trace(events, t0, t0 + 300_000)
    assert export_bytes(tmp_path, t0 + 100_000, t0 + 200_000) == direct_trace(
        events, t0 + 100_000, t0 + 200_000
    )

    consumer = new_consumer(kafka, dlq, group_id=None)
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=5_000)
        dead = [m for ms in batches.values() for m in ms]
    finally:
        await consumer.stop()
    # Dead letters are at least once: a rebalance between a letter and the commit past it (a busy
    # machine) makes the next owner meet the message again. Every letter is the one refused message,
    # named by its source partition and offset, so a reader drops repeats by that position.
    assert 1 <= len(dead) == letters_sent, (len(dead), letters_sent)
    positions = {
        (dict(m.headers)["kubetape.source.partition"], dict(m.headers)["kubetape.source.offset"])
        for m in dead
    }
    assert len(positions) == 1, positions
    for letter in dead:
        headers = dict(letter.headers)
        assert headers["kubetape.source.partition"] == b"0"
        assert letter.value == b"\xc1not-an-event"
        assert b"undecodable" in headers["kubetape.error"]


async def test_an_idle_topic_closes_its_segment_by_wall_clock(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic, group, dlq = unique_names("idle")
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 1)
    t0 = recent_t0()
    idle_sink = running_sink(kafka_bootstrap, topic, group, dlq, segment_dir=tmp_path, idle_close_s=1.0)
    async with idle_sink as sink:
        await eventually(
            lambda: _metric(sink, "sink_assigned_partitions"), lambda n: n == 1, "the sink to join its group"
        )
        await produce(kafka_bootstrap, topic, synthetic_events(5, t0, 1_000))  # same window: stays open
        await wait_committed(kafka_bootstrap, group, topic, 1, within=30)
        # committed while the sink still runs: the segment was closed by idleness, not by shutdown
        written = await asyncio.to_thread(lambda: sorted(p.name for p in tmp_path.glob("*.kseg")))
        assert written == ["p0000-000000000000000.kseg"]


async def test_a_rebalance_between_two_sinks_loses_and_duplicates_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic, group, dlq = unique_names("rebalance")
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 4)
    t0 = recent_t0()
    events = synthetic_events(3_000, t0, 600_000)
    first, second = events[:1_500], events[1_500:]
    async with running_sink(kafka_bootstrap, topic, group, dlq, segment_dir=tmp_path) as sink:
        await produce(kafka_bootstrap, topic, first)
        # the second sink joins while the first is consuming, so that partitions move mid-stream
        await eventually(
            lambda: _metric(sink, "sink_messages_total"), lambda n: n > 0, "the first sink to consume"
        )
        async with running_sink(kafka_bootstrap, topic, group, dlq, segment_dir=tmp_path):
            await produce(kafka_bootstrap, topic, second)
            await wait_committed(kafka_bootstrap, group, topic, 4)
    assert export_bytes(tmp_path, t0, t0 + 600_000) == direct_trace(events, t0, t0 + 600_000)


def _start_sink_process(
    bootstrap: str,
    names: tuple[str, str, str],
    *,
    segment_dir: Path,
    log: Path,
    token: str = "",
    extra: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    topic, group, dlq = names
    args = [
        str(KUBETAPE), "sink", "--bootstrap", bootstrap, "--topic", topic, "--group", group,
        "--deadletter-topic", dlq, "--segment-dir", str(segment_dir), "--http-port", "0",
        "--idle-close", "1s", "--keyframe-every", "3", "--batch", "700", "--partitions", "3", *extra,
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=out, env={**os.environ, "KUBETAPE_TOKEN": token})


async def test_kill_9_at_random_points_gives_a_byte_identical_export(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    names = topic, group, _dlq = unique_names("crash")
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 3)
    t0 = recent_t0()
    events = synthetic_events(6_000, t0, 900_000)
    segment_dir, log = tmp_path / "segments", tmp_path / "sink.log"
    rng = random.Random(11)
    chunks = [events[i : i + 1_000] for i in range(0, len(events), 1_000)]
    process = _start_sink_process(kafka_bootstrap, names, segment_dir=segment_dir, log=log)
    try:
        kills = 0
        for index, chunk in enumerate(chunks):
            written_before = count_lines(log, "segment written")
            await produce(kafka_bootstrap, topic, chunk)
            if index % 2:
                # right after a segment became durable: mid-batch, before its offsets are committed
                await wait_for_lines(log, "segment written", written_before + 1)
            else:
                await asyncio.sleep(rng.uniform(0.3, 3.0))  # anywhere: joining, fetching, encoding
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
            process = _start_sink_process(kafka_bootstrap, names, segment_dir=segment_dir, log=log)
        await wait_committed(kafka_bootstrap, group, topic, 3, within=120)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert kills == len(chunks)
    # some kills land during start-up (before the sink even joined), the odd ones right after a write
    assert count_lines(log, "sink started") >= len(chunks) // 2
    assert export_bytes(segment_dir, t0, t0 + 900_000) == direct_trace(events, t0, t0 + 900_000)
    assert not list(segment_dir.glob(".*.tmp"))


async def test_export_over_http_needs_the_bearer_token(kafka_bootstrap: str, tmp_path: Path) -> None:
    names = topic, group, _dlq = unique_names("http")
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 1)
    t0 = recent_t0()
    events = synthetic_events(200, t0, 60_000)
    await produce(kafka_bootstrap, topic, events)
    segment_dir, log = tmp_path / "segments", tmp_path / "sink.log"
    process = _start_sink_process(kafka_bootstrap, names, segment_dir=segment_dir, log=log, token="s3cret")
    try:
        await wait_committed(kafka_bootstrap, group, topic, 1)
        port = logged_http_port(log)
        body = {"start_ms": t0, "end_ms": t0 + 60_000, "format": "simkube"}
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{port}"
            async with session.post(f"{url}/export", json=body) as resp:
                assert resp.status == 401
            auth = {"Authorization": "Bearer s3cret"}
            async with session.post(f"{url}/export", json=body, headers=auth) as resp:
                assert resp.status == 200
                data = await resp.read()
            async with session.post(f"{url}/export", json={"start_ms": 5}, headers=auth) as resp:
                assert resp.status == 400
            async with session.get(f"{url}/metrics") as resp:
                assert "kubetape_sink_segments_written_total" in await resp.text()
        from pipeline.formats.simkube import read_simkube_trace, simkube_compatibility_problems

        assert simkube_compatibility_problems(read_simkube_trace(data, "http export")) == []
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


async def test_the_sink_s_retention_removes_expired_segments_and_later_ranges_still_export(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``kubetape sink --retention`` as a user runs it: segments wholly older than the retention go, a
    keyframe before the cutoff stays as the anchor, and a range after the cutoff exports as before."""
    names = topic, group, _dlq = unique_names("retention")
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 1)
    t0 = recent_t0()  # an hour ago: events from 60 to 20 minutes ago, one segment per minute
    events = synthetic_events(2_400, t0, 40 * 60_000)
    await produce(kafka_bootstrap, topic, events)
    segment_dir, log = tmp_path / "segments", tmp_path / "sink.log"
    process = _start_sink_process(kafka_bootstrap, names, segment_dir=segment_dir, log=log)
    try:
        await wait_committed(kafka_bootstrap, group, topic, 1)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, _tail(log)
    written = sorted(p.name for p in segment_dir.glob("*.kseg"))
    window = (t0 + 35 * 60_000, t0 + 40 * 60_000)  # after the cutoff (30 minutes ago) by 5 minutes
    exported = export_bytes(segment_dir, *window)

    # a restarted sink with retention checks at once, before it has consumed anything new
    process = _start_sink_process(
        kafka_bootstrap, names, segment_dir=segment_dir, log=log, extra=("--retention", "30m")
    )
    try:
        await wait_for_lines(log, "retention removed segments", 1)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, _tail(log)
    kept = sorted(p.name for p in segment_dir.glob("*.kseg"))
    assert set(kept) < set(written), (written, kept)
    # about half the hour-old history went; the anchor keyframe and everything after it stayed
    assert len(written) - len(kept) >= len(written) // 4, (len(written), len(kept))
    assert kept == written[len(written) - len(kept) :], "only the oldest segments are removed"
    assert export_bytes(segment_dir, *window) == exported == direct_trace(events, *window)


def _tail(log: Path) -> str:
    return log.read_text()[-2000:] if log.exists() else "(no log)"


def count_lines(log: Path, message: str) -> int:
    return log.read_text().count(f'"msg":"{message}"') if log.exists() else 0


async def wait_for_lines(log: Path, message: str, count: int, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while count_lines(log, message) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"no {message!r} line #{count} in {within}s: {_tail(log)}")
        await asyncio.sleep(0.02)


def logged_http_port(log: Path) -> int:
    import json

    for _ in range(100):
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("msg") == "sink started":
                    return int(record["http_port"])
        time.sleep(0.1)
    raise AssertionError(f"the sink did not log its HTTP port: {log.read_text()[-2000:]}")
