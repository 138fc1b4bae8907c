"""The one consume loop over the one reader, against the in-memory broker: offsets are committed only
after the handler flushed, and a reader of the same group resumes after the last commit."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from aiokafka import TopicPartition

from pipeline.analytics.consumer import BatchContext, group_id_for
from pipeline.analytics.runner import ConsumerRunner
from pipeline.io.kafka.consume import ConsumeLoop, LoopSettings
from pipeline.io.kafka.message import Message
from pipeline.io.kafka.reader import TopicReader
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.events import Event
from tests.fakes.kafka import FakeKafka

SETTINGS = KafkaSettings(bootstrap="in-memory:9092")
TOPIC = "kubetape.events"


class RecordingHandler:
    def __init__(self, kafka: FakeKafka, fail_on: bytes | None = None) -> None:
        self.kafka = kafka
        self.fail_on = fail_on
        self.added: list[bytes | None] = []
        self.calls: list[str] = []

    def add(self, messages: Sequence[Message]) -> None:
        self.added += [m.value for m in messages]
        # what the group had committed when the batch arrived: never more than was flushed
        self.calls.append(
            f"add {len(messages)} committed={self.kafka.committed.get(('g', TopicPartition(TOPIC, 0)))}"
        )
        if self.fail_on is not None and self.fail_on in (m.value for m in messages):
            raise RuntimeError("handler failed")

    def flush(self) -> None:
        self.calls.append("flush")

    def close(self) -> None:
        self.calls.append("close")


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> FakeKafka:
    broker = FakeKafka().install(monkeypatch)
    broker.create(TOPIC)
    for i in range(6):
        broker.produce(TOPIC, f"m{i}".encode(), timestamp_ms=i)
    return broker


def reader() -> TopicReader:
    return TopicReader(SETTINGS, TOPIC, start="committed", end="current", group_id="g")


async def test_commits_follow_flushes_and_the_group_resumes_after_the_last_commit(kafka: FakeKafka) -> None:
    handler = RecordingHandler(kafka)
    settings = LoopSettings(max_batch=2, flush_every_messages=4, flush_every_s=3600)
    async with reader() as source:
        await ConsumeLoop(source, handler, settings).run()
    assert handler.added == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"]
    assert handler.calls == [
        "add 2 committed=None",
        "add 2 committed=None",
        "flush",
        "add 2 committed=4",
        "flush",
        "close",
    ]
    assert kafka.committed[("g", TopicPartition(TOPIC, 0))] == 6

    kafka.produce(TOPIC, b"m6")
    again = RecordingHandler(kafka)
    async with reader() as source:
        await ConsumeLoop(source, again, settings).run()
    assert again.added == [b"m6"]


async def test_a_failing_handler_is_flushed_and_closed_and_the_error_raised(kafka: FakeKafka) -> None:
    handler = RecordingHandler(kafka, fail_on=b"m3")
    settings = LoopSettings(max_batch=2, flush_every_messages=100, flush_every_s=3600)
    async with reader() as source:
        with pytest.raises(RuntimeError, match="handler failed"):
            await ConsumeLoop(source, handler, settings).run()
    assert handler.calls[-2:] == ["flush", "close"]


async def test_an_analytics_consumer_over_a_time_range_commits_to_its_group_after_each_checkpoint(
    kafka: FakeKafka,
) -> None:
    class Counting:
        name = "counting"

        def __init__(self) -> None:
            self.calls: list[str] = []

        def on_batch(self, events: Sequence[Event], context: BatchContext) -> None:
            self.calls.append(f"batch {len(events)} from {context.source}")

        def checkpoint(self) -> None:
            self.calls.append(f"checkpoint, committed={dict(kafka.committed)}")

        def close(self) -> None:
            self.calls.append("close")

    consumer = Counting()
    group = group_id_for(consumer.name)
    # m0..m5 are not events: counted as undecodable, still committed (never re-read for ever)
    async with TopicReader(SETTINGS, TOPIC, start=2, end=5, group_id=group) as source:
        stats = await ConsumerRunner(
            consumer, source, LoopSettings(max_batch=2, flush_every_messages=2)
        ).run()
    assert (stats.undecodable, stats.batches) == (3, 2)
    assert consumer.calls == [
        "batch 0 from kafka:kubetape.events",
        "checkpoint, committed={}",
        "batch 0 from kafka:kubetape.events",
        f"checkpoint, committed={{('{group}', {TopicPartition(TOPIC, 0)!r}): 4}}",
        "close",
    ]
    assert kafka.committed == {(group, TopicPartition(TOPIC, 0)): 5}
