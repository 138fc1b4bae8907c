"""The recorded load is stored whatever the order of starts: the real sink service started on a Kafka where
the usage topic does not exist yet stores the samples the watcher's publisher sends once it is there,
whether the sink creates the topic itself (``--topics create``) or only waits for it (``--topics check``,
where the watcher creates it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest

from pipeline.formats.segment.content import usage_order
from pipeline.formats.wire.usage import encode_usage
from pipeline.io.http import HttpSettings
from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.publisher import KafkaPublisher
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.topics import describe_topics
from pipeline.model.keys import ClusterId, ObjectKey
from pipeline.model.usage import ContainerUsage, UsageSample
from pipeline.sink.compactor import CompactionSettings
from pipeline.sink.service import SinkServiceSettings, run_sink_service
from pipeline.sink.settings import SinkSettings
from pipeline.store.segment_store import SegmentStore
from pipeline.store.store_url import LocalLocation, cluster_store_location, open_segment_store
from pipeline.store.usage_history import stored_usage, usage_store_location
from tests.polling import eventually

SINK_PARTITIONS = 2
"""The sink's ``--partitions``: not the watcher's 3 nor the broker's default 1, so the topic tells who
made it."""
WATCHER_PARTITIONS = 3


def recent_samples() -> list[UsageSample]:
    """Four samples of two owners, as the watcher's sampler publishes them (recent: within retention)."""
    t0 = int(time.time() * 1000) - 60_000
    owners = (ObjectKey("apps/Deployment/shop/web"), ObjectKey("apps/Deployment/shop/api"))
    return [
        UsageSample(t0 + ts, owner, "5d8f7", 2, (ContainerUsage("app", 360, 128 << 20),))
        for ts in (0, 15_000)
        for owner in owners
    ]


@contextlib.asynccontextmanager
async def running_sink(settings: SinkServiceSettings) -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(run_sink_service(settings, stop), name="sink-service")
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def publish_as_the_watcher(
    kafka: KafkaSettings, cluster: ClusterId, names: dict[str, str], samples: list[UsageSample]
) -> None:
    """What the watcher does: create its topics if missing (as ``ensure_watcher_topics`` does, under this
    test's names), then publish each sample keyed by its owner through its publisher."""
    for topic in (names["events"], names["usage"]):
        await ensure_topic(kafka, topic, WATCHER_PARTITIONS)
    publisher = KafkaPublisher(
        kafka, events_topic=names["events"], deadletter_topic=names["dlq"], cluster=cluster
    )
    async with publisher:
        await publisher.submit(
            [Record(names["usage"], s.owner_key, encode_usage(s), s.ts_ms) for s in samples]
        )
        await publisher.flush()


async def partitions_of(kafka: KafkaSettings, topic: str) -> int:
    """The topic's partitions (0: it does not exist), asked so that the broker does not create it."""
    described = (await describe_topics(kafka, [topic]))[topic]
    return int(described["partitions"]) if described["exists"] else 0


@pytest.mark.parametrize("topics", ["create", "check"])
async def test_a_sink_started_before_the_usage_topic_stores_the_load_the_watcher_publishes(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, topics: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    names = {what: f"it.usage-late-{what}.{tag}" for what in ("events", "usage", "dlq")}
    cluster = ClusterId(f"it-usage-late-{tag}")
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    if topics == "check":  # production: the events topics exist (`kubetape topics create`), the load's not
        for topic, partitions in ((names["events"], WATCHER_PARTITIONS), (names["dlq"], 1)):
            await ensure_topic(kafka, topic, partitions)
            # `--topics check` looks once: a topic just created shows in the metadata a moment later
            await eventually(partial(partitions_of, kafka, topic), lambda n: n > 0, f"topic {topic} to show")
    assert await partitions_of(kafka, names["usage"]) == 0
    location = LocalLocation(tmp_path / "store")
    settings = SinkServiceSettings(
        kafka=kafka,
        segment_store=location,
        sink=SinkSettings(compaction=CompactionSettings(topic=names["events"])),
        http=HttpSettings(port=0),
        group_id=f"it-usage-late-{tag}",
        deadletter_topic=names["dlq"],
        partitions=SINK_PARTITIONS,
        create_topics=topics == "create",
        cluster=cluster,
        usage_topic=names["usage"],
        usage_flush_s=1.0,
    )
    samples = recent_samples()
    with caplog.at_level(logging.INFO, "kubetape.sink"):
        async with running_sink(settings) as sink:

            async def started() -> list[str]:
                assert not sink.done(), sink
                return [r.getMessage() for r in caplog.records]

            if topics == "create":
                # the sink makes the topic with its own settings; the watcher then finds it as it is
                await eventually(started, lambda lines: "sink started" in lines, "the sink to start")

                await eventually(
                    lambda: partitions_of(kafka, names["usage"]),
                    lambda n: n == SINK_PARTITIONS,
                    "the sink to create the usage topic (its partitions)",
                )
            else:
                # the sink started and saw no usage topic before the watcher made one
                await eventually(
                    started,
                    lambda lines: any("the recorded load is not stored" in line for line in lines),
                    "the sink to find no usage topic",
                )
            await publish_as_the_watcher(kafka, cluster, names, samples)
            if topics == "create":
                assert await partitions_of(kafka, names["usage"]) == SINK_PARTITIONS

            store = _usage_store(location, cluster)

            async def stored() -> list[UsageSample]:
                assert not sink.done(), sink
                return sorted(await asyncio.to_thread(stored_usage, store, 1 << 62), key=usage_order)

            held = await eventually(
                stored, lambda got: len(got) >= len(samples), "the sink to store the 4 samples", timeout_s=90
            )
    # at least once: a sample delivered twice (a rebalance) would be stored twice, and read once by exports
    assert sorted(set(held), key=usage_order) == sorted(samples, key=usage_order)


def _usage_store(location: LocalLocation, cluster: ClusterId) -> SegmentStore:
    return open_segment_store(usage_store_location(cluster_store_location(location, cluster)))
