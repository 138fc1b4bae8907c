"""The segment store against the real broker: a stale sink is fenced out (in a local directory and in the
stack's S3 server), a recreated topic is refused."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from pipeline.io.kafka.admin import admin_client, ensure_topic
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.sink_member import KafkaSinkSource
from pipeline.io.metrics import Metrics
from pipeline.sink.compactor import CompactionSettings
from pipeline.sink.settings import SinkSettings
from pipeline.sink.sink import Sink
from pipeline.sink.source import TopicIdentityError
from pipeline.sink.synthetic import applied, deployment
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportRequest, export_window
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.store_url import open_segment_store
from tests.integration.test_sink import direct_trace, produce, recent_t0, unique_names, wait_committed


def _events(t0: int, n: int, tag: str) -> list:  # type: ignore[type-arg]
    return [applied(t0 + i * 100, deployment("ns", f"{tag}-{i}", 1), 1_000 + i) for i in range(n)]


def _sink(
    bootstrap: str,
    topic: str,
    group: str,
    dlq: str,
    segment_store: str | Path,
    *,
    idle_close_s: float,
    batch: int = 2_000,
) -> Sink:
    settings = SinkSettings(
        CompactionSettings(topic=topic, idle_close_s=idle_close_s), batch_max_records=batch
    )
    source = KafkaSinkSource(KafkaSettings(bootstrap=bootstrap), topic, group_id=group, deadletter_topic=dlq)
    sink = Sink(source, open_segment_store(segment_store), settings, Metrics())
    source.on_assigned = sink.on_assigned
    source.on_revoked = sink.on_revoked
    return sink


async def _rounds_until(sink: Sink, consumed: int, within: float = 60) -> None:
    deadline, total = time.monotonic() + within, 0
    while total < consumed:
        assert time.monotonic() < deadline, f"consumed {total} of {consumed} in {within}s"
        total += await sink.run_round()


@pytest.fixture(params=["local", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path) if request.param == "local" else str(request.getfixturevalue("s3_url"))


async def test_a_sink_cut_off_from_its_group_cannot_overwrite_the_new_owners_segment(
    kafka_bootstrap: str, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A holds offsets 0-149 open when it is cut off from the group (its revocation never runs); B
    takes the partition, writes 0-299 and commits 300; A's late flush is refused by the store and the
    export holds all 300 events."""
    topic, group, dlq = unique_names("fence")
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    await ensure_topic(kafka, topic, 1)
    await ensure_topic(kafka, dlq, 1)
    t0 = recent_t0()
    events = _events(t0, 300, "d")
    await produce(kafka_bootstrap, topic, events[:150])
    a = _sink(
        kafka_bootstrap, topic, group, dlq, store_url, idle_close_s=600.0, batch=150
    )  # holds 0-149 open
    a_source = a.source
    assert isinstance(a_source, KafkaSinkSource)

    async def cut_off(partitions: list[int]) -> None:
        del partitions  # A never hears that it lost the partition

    await a_source.start()
    try:
        await _rounds_until(a, 150)
        assert a.compactors[0].has_open_segment
        a_source.on_revoked = cut_off
    finally:
        await a_source.stop()
    await produce(kafka_bootstrap, topic, events[150:])
    b = _sink(kafka_bootstrap, topic, group, dlq, store_url, idle_close_s=1.0)
    stop = asyncio.Event()
    async with b.source:  # type: ignore[attr-defined]
        task = asyncio.create_task(b.run(stop))
        await wait_committed(kafka_bootstrap, group, topic, 1)
        stop.set()
        await asyncio.wait_for(task, 60)
    with caplog.at_level(logging.WARNING, logger="kubetape.sink"):
        await a.flush_all()  # A wakes up and writes what it held: refused
    a.close()
    b.close()
    assert "stale segment write refused" in caplog.text
    assert 0 not in a.compactors
    result = export_window(SegmentCatalog(open_segment_store(store_url)), ExportRequest(t0, t0 + 60_000))
    assert result.events == 300
    assert result.data == direct_trace(events, t0, t0 + 60_000)


async def test_a_recreated_topic_is_refused_instead_of_its_events_being_dropped(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The store holds 500 offsets of a topic that is then deleted and recreated with 300 new events:
    the sink refuses to start (it used to drop all 300 as redeliveries and commit past them). The new
    topic's Kafka topic id differs from the one the store recorded, which is what names the cause."""
    topic, group, dlq = unique_names("recreated")
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    await ensure_topic(kafka, topic, 1)
    await ensure_topic(kafka, dlq, 1)
    t0 = recent_t0()
    await produce(kafka_bootstrap, topic, _events(t0, 500, "old"))
    first = _sink(kafka_bootstrap, topic, group, dlq, tmp_path, idle_close_s=1.0)
    stop = asyncio.Event()
    async with first.source:  # type: ignore[attr-defined]
        task = asyncio.create_task(first.run(stop))
        await wait_committed(kafka_bootstrap, group, topic, 1)
        stop.set()
        await asyncio.wait_for(task, 60)
    first.close()
    async with admin_client(kafka) as admin:
        await admin.delete_topics([topic])
        deadline = time.monotonic() + 60
        while topic in await admin.list_topics():  # the broker deletes asynchronously
            assert time.monotonic() < deadline, f"topic {topic} still listed 60 s after its deletion"
            await asyncio.sleep(0.5)
    await ensure_topic(kafka, topic, 1)
    await produce(kafka_bootstrap, topic, _events(t0 + 120_000, 300, "new"))
    second = _sink(kafka_bootstrap, topic, group, dlq, tmp_path, idle_close_s=1.0)
    stop = asyncio.Event()
    async with second.source:  # type: ignore[attr-defined]
        with pytest.raises(
            TopicIdentityError,
            match=r"filled from kafka:.*@.*, but this sink reads .*the topic was recreated",
        ):
            await asyncio.wait_for(second.run(stop), 60)
    second.close()
    names = [s.name for s in LocalSegmentStore(tmp_path).list()]
    assert names == ["p0000-000000000000000.kseg"]  # nothing of the new topic was mixed in
