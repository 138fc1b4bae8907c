"""The watcher's publisher on the real broker: a record the broker refuses (larger than the topic's
``max.message.bytes``) or larger than a batch is dead-lettered with its key and size, every other record
is published exactly once, and publishing goes on afterwards."""

from __future__ import annotations

import asyncio
import os
import uuid

import orjson
import pytest

from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.publisher import KafkaPublisher
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.metrics import Metrics
from tests.integration.test_watch_service import read_topic

pytestmark = pytest.mark.timeout(300)

TOPIC_LIMIT = 50_000  # the test topics' max.message.bytes


def unit(events: str, state: str, key: str, value: bytes) -> list[Record]:
    return [Record(events, key, value, 1_767_225_600_000), Record(state, key, value, 1_767_225_600_000)]


async def test_refused_records_are_dead_lettered_and_the_rest_published_once(kafka_bootstrap: str) -> None:
    settings = KafkaSettings(bootstrap=kafka_bootstrap)
    run = uuid.uuid4().hex[:8]
    events, state, dlq = f"it.pub.events.{run}", f"it.pub.state.{run}", f"it.pub.dlq.{run}"
    limit = {"max.message.bytes": str(TOPIC_LIMIT)}
    await ensure_topic(settings, events, 3, limit)
    await ensure_topic(settings, state, 3, {**limit, "cleanup.policy": "compact"})
    await ensure_topic(settings, dlq, 1)

    good = [f"apps/Deployment/ns/d{i:03}" for i in range(120)]
    refused_by_broker = "core/ConfigMap/ns/incompressible"  # random bytes: zstd cannot shrink them
    refused_before = "core/ConfigMap/ns/huge"  # beyond the producer's batch size
    units = [unit(events, state, k, orjson.dumps({"k": k})) for k in good[:60]]
    units.append(unit(events, state, refused_by_broker, os.urandom(TOPIC_LIMIT * 2)))
    units.append(unit(events, state, refused_before, b"x" * (settings.max_batch_bytes + 1)))
    units += [unit(events, state, k, orjson.dumps({"k": k})) for k in good[60:]]

    publisher = KafkaPublisher(settings, Metrics(), events_topic=events, deadletter_topic=dlq)
    async with publisher:
        for u in units:
            await publisher.submit(u)
        try:
            async with asyncio.timeout(120):
                await publisher.flush()
        except TimeoutError:
            raise AssertionError(
                f"publishing stalled: {publisher.pending_units} units pending, "
                f"{publisher.dead_lettered} dead-lettered"
            ) from None
        # publishing goes on after a refusal
        await publisher.submit(unit(events, state, "apps/Deployment/ns/after", b"{}"))
        async with asyncio.timeout(60):
            await publisher.flush()

    expected = sorted([*good, "apps/Deployment/ns/after"])
    for topic in (events, state):
        keys = sorted(key for key, _, _ in await read_topic(kafka_bootstrap, topic))
        assert keys == expected, f"{topic}: each good record exactly once, no refused one"

    described = [orjson.loads(value or b"") for _, value, _ in await read_topic(kafka_bootstrap, dlq)]
    seen = sorted((d["topic"], d["key"]) for d in described)
    assert seen == sorted(
        (topic, key) for topic in (events, state) for key in (refused_by_broker, refused_before)
    ), described
    sizes = {d["key"]: d["bytes"] for d in described}
    assert sizes[refused_by_broker] > TOPIC_LIMIT
    assert sizes[refused_before] > settings.max_batch_bytes
    for d in described:  # the broker's own refusal, and the check before sending
        assert ("MessageSizeTooLarge" if d["key"] == refused_by_broker else "max_batch_bytes") in d[
            "error"
        ], d
