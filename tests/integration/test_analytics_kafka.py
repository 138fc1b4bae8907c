"""Analytics consumers on the real broker: their own groups leave the sink's untouched, a restarted
consumer resumes from its checkpoint, and the metrics service serves live series behind a token."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from pipeline.analytics.builtin_timeline import TimelineConsumer
from pipeline.analytics.consumer import group_id_for
from pipeline.analytics.runner import ConsumerRunner, usage_group_id
from pipeline.analytics.timeline import fold_events
from pipeline.analytics.timeline_store import read_timeline
from pipeline.formats.trace import initial_events, read_trace
from pipeline.formats.wire.codec import encode_event
from pipeline.formats.wire.usage import encode_usage
from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.clients import new_consumer, new_producer
from pipeline.io.kafka.consume import LoopSettings
from pipeline.io.kafka.reader import TopicReader
from pipeline.io.kafka.settings import DEFAULT_SINK_GROUP, KafkaSettings
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey, key_of
from pipeline.model.usage import ContainerUsage, UsageSample
from pipeline.stack.ports import free_port
from services.cli import main
from tests.polling import eventually_sync

REPO_ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3


async def produce(bootstrap: str, topic: str, events: list[Event]) -> None:
    producer = new_producer(KafkaSettings(bootstrap=bootstrap))
    await producer.start()
    try:
        for event in events:  # as the watcher publishes: key = object key, timestamp = event time
            await producer.send(topic, encode_event(event), key=event.key.encode(), timestamp_ms=event.ts_ms)
        await producer.flush()
    finally:
        await producer.stop()


async def committed(bootstrap: str, topic: str, group: str) -> dict[int, int | None]:
    consumer = new_consumer(KafkaSettings(bootstrap=bootstrap), group_id=group)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = new_consumer(KafkaSettings(bootstrap=bootstrap), group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def caught_up(bootstrap: str, topic: str, group: str) -> bool:
    """Whether ``group`` committed the end of every partition that holds messages."""
    ends = {p: end for p, end in (await end_offsets(bootstrap, topic)).items() if end}
    return {p: o for p, o in (await committed(bootstrap, topic, group)).items() if o is not None} == ends


async def commit_as_sink(bootstrap: str, topic: str, offsets: dict[int, int]) -> None:
    """The sink's group position, as a sink that has made these offsets durable would leave it."""
    consumer = new_consumer(KafkaSettings(bootstrap=bootstrap), group_id=DEFAULT_SINK_GROUP)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in offsets])
        await consumer.commit({TopicPartition(topic, p): o for p, o in offsets.items()})
    finally:
        await consumer.stop()


def later_events(after_ms: int) -> list[Event]:
    """Bare pods and ConfigMaps well after the trace (beyond the consumer's allowed lateness)."""
    out = []
    for i in range(5):
        at = after_ms + 60_000 + i * 2_000
        key = ObjectKey(f"core/Pod/testing/later-{i}")
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"later-{i}", "namespace": "testing"}}
        out.append(Event.applied(at, key, obj, 0))
        out.append(
            Event.pod_lifecycle(
                at + 1000, key, owner_key=key, pod_spec_hash=1, start_ms=at + 1000, end_ms=at + 9000
            )
        )
    return out


async def run_timeline(bootstrap: str, topic: str, out: Path) -> tuple[int, TimelineConsumer]:
    consumer = TimelineConsumer(out)
    source = TopicReader(
        KafkaSettings(bootstrap=bootstrap),
        topic,
        start="committed",
        group_id=group_id_for(consumer.name),
        end=int(time.time() * 1000) + 3_600_000,  # everything there now
    )
    async with source:
        stats = await ConsumerRunner(consumer, source, LoopSettings(fetch_timeout_ms=200)).run()
    return stats.events, consumer


async def test_a_timeline_consumer_resumes_from_its_checkpoint_and_leaves_the_sink_group_alone(
    kafka_bootstrap: str, simkube_traces: Path, tmp_path: Path
) -> None:
    topic = f"it.analytics.{uuid.uuid4().hex[:8]}"
    assert await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, partitions=PARTITIONS)
    first = initial_events(read_trace(simkube_traces / "bare-pods.sktrace"), time_ordered=True)
    second = later_events(max(e.pod_end_ms or e.ts_ms for e in first))
    await produce(kafka_bootstrap, topic, first)
    sink_position = {0: 1, 1: 0, 2: 2}
    await commit_as_sink(kafka_bootstrap, topic, sink_position)

    out = tmp_path / "timeline"
    consumed, _ = await run_timeline(kafka_bootstrap, topic, out)
    assert consumed == len(first)
    rows_before_restart = read_timeline(out / "timeline.parquet")
    group = group_id_for("timeline")
    assert await caught_up(kafka_bootstrap, topic, group)

    await produce(kafka_bootstrap, topic, second)
    consumed, consumer = await run_timeline(kafka_bootstrap, topic, out)
    assert consumed == len(second)  # resumed at the committed offsets: nothing twice, nothing lost
    assert await caught_up(kafka_bootstrap, topic, group)
    assert await committed(kafka_bootstrap, topic, DEFAULT_SINK_GROUP) == sink_position

    # the resumed timeline is the one a single pass over everything gives, up to the emitted seconds
    written = read_timeline(out / "timeline.parquet")
    assert written == consumer.rows
    expected = fold_events([*first, *second]).rows
    assert written
    assert written == expected[: len(written)]
    assert len(written) > len(rows_before_restart)  # the later pods' seconds came after the restart
    assert written[: len(rows_before_restart)] == rows_before_restart


def http_get(url: str, token: str | None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:  # not listening yet
        return 0, ""


def test_the_metrics_service_serves_live_series_only_with_the_token(
    kafka_bootstrap: str, simkube_traces: Path, tmp_path: Path
) -> None:
    topic = f"it.analytics-metrics.{uuid.uuid4().hex[:8]}"
    assert asyncio.run(ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, partitions=PARTITIONS))
    events = initial_events(read_trace(simkube_traces / "bare-pods.sktrace"), time_ordered=True)
    asyncio.run(produce(kafka_bootstrap, topic, events))
    port, token = free_port(), uuid.uuid4().hex
    log = (tmp_path / "metrics.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "analytics",
            "run",
            "metrics",
            "--bootstrap",
            kafka_bootstrap,
            "--topic",
            topic,
            "--http-port",
            str(port),
            "--out",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "KUBETAPE_TOKEN": token},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        # the service starts a Python process, joins Kafka and folds the topic: on a loaded machine that
        # takes far longer than on an idle one, so wait for the condition (the process log on failure)
        applied = 'kubetape_analytics_events_total{kind="Pod",type="applied"} 4'
        try:
            _, body = eventually_sync(
                lambda: http_get(url, token),
                lambda answer: answer[0] == 200 and applied in answer[1],
                f"{applied!r} at {url}",
                timeout_s=180,
            )
        except AssertionError as exc:
            log.flush()
            raise AssertionError(
                f"{exc}\nservice log:\n{(tmp_path / 'metrics.log').read_text()[-3000:]}"
            ) from None
        assert 'kubetape_analytics_objects{kind="Pod",namespace="testing"} 4' in body
        assert "kubetape_analytics_consumer_lag_messages 0" in body
        assert http_get(url, None)[0] == 401
        assert http_get(url, "wrong")[0] == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        log.close()
    assert code == 0, (tmp_path / "metrics.log").read_text()
    # the service committed its position on the way out, in its own group
    assert asyncio.run(caught_up(kafka_bootstrap, topic, group_id_for("metrics")))


def test_the_timeline_takes_its_usage_columns_from_the_usage_topic_under_its_own_group(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kubetape analytics run timeline`` over a range of both topics: the load of the usage topic fills
    the owner's usage columns, and the usage offsets are committed in the timeline's usage group."""
    settings = KafkaSettings(bootstrap=kafka_bootstrap)
    events_topic, usage_topic = (f"it.analytics-{what}.{uuid.uuid4().hex[:8]}" for what in ("ev", "usage"))
    for topic in (events_topic, usage_topic):
        assert asyncio.run(ensure_topic(settings, topic, partitions=PARTITIONS))
    start = (int(time.time()) - 120) * 1000  # dated now, on a whole second
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}} for i in range(2)]
    # the second node moves the fold's clock 40 s on: seconds up to 10 are complete (30 s lateness)
    asyncio.run(
        produce(
            kafka_bootstrap,
            events_topic,
            [Event.applied(start + i * 40_000, key_of(n), n, 0) for i, n in enumerate(nodes)],
        )
    )
    web = ObjectKey("apps/Deployment/it-usage/web")
    samples = [
        UsageSample(start, web, "a", 2, (ContainerUsage("app", 300, 1_000),)),
        UsageSample(start + 5_000, web, "a", 0, (), gap=True),
    ]
    asyncio.run(produce_usage(kafka_bootstrap, usage_topic, samples))
    out = tmp_path / "timeline"
    args = ["analytics", "run", "timeline", "--bootstrap", kafka_bootstrap, "--topic", events_topic]
    args += [
        "--usage-topic",
        usage_topic,
        "--from",
        str(start),
        "--to",
        str(start + 60_000),
        "--out",
        str(out),
    ]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["usage_samples"] == 2
    rows = {r.second: r for r in read_timeline(out / "timeline.parquet") if r.owner == web}
    assert (rows[4].cpu_used_m, rows[4].memory_used_bytes, rows[4].usage_pods) == (300.0, 1_000.0, 2)
    assert rows[5].cpu_used_m is None  # the gap: unknown, not zero
    group = usage_group_id(group_id_for("timeline"))
    assert asyncio.run(caught_up(kafka_bootstrap, usage_topic, group))


async def produce_usage(bootstrap: str, topic: str, samples: list[UsageSample]) -> None:
    producer = new_producer(KafkaSettings(bootstrap=bootstrap))
    await producer.start()
    try:
        for s in samples:  # as the watcher publishes: key = owner, timestamp = sample time
            await producer.send(topic, encode_usage(s), key=s.owner_key.encode(), timestamp_ms=s.ts_ms)
        await producer.flush()
    finally:
        await producer.stop()
