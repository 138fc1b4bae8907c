"""The watcher's io edges without a broker or cluster: watch-line decoding, publisher backpressure, and
the watcher on the shared in-memory cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import orjson
import pytest

from pipeline.formats.wire.codec import decode_event
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.publisher import KafkaPublisher
from pipeline.io.kafka.settings import EVENTS_TOPIC, STATE_TOPIC, KafkaSettings
from pipeline.io.kube.types import ApiResource
from pipeline.io.kube.watch import decode_watch_line
from pipeline.io.metrics import Metrics
from pipeline.model.errors import FormatError, GoneError, WatchBrokenError
from pipeline.model.tracer_config import TracerConfig
from pipeline.watch.watcher import Watcher, WatchSettings
from tests.fakes.cluster import MemoryCluster
from tests.polling import eventually

PODS = ApiResource("v1", "Pod", "pods", True)
T = TypeVar("T")


def test_watch_lines_decode_into_plain_dicts_with_type_meta() -> None:
    line = orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": "p", "resourceVersion": "7"}}})
    event = decode_watch_line(line, PODS)
    assert (event.type, event.resource_version) == ("ADDED", "7")
    assert event.obj["apiVersion"] == "v1"
    assert event.obj["kind"] == "Pod"


def test_410_error_event_means_expired_and_other_errors_mean_broken() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    with pytest.raises(GoneError, match="too old"):
        decode_watch_line(orjson.dumps(gone), PODS)
    other = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd down"}}
    with pytest.raises(WatchBrokenError, match="etcd down"):
        decode_watch_line(orjson.dumps(other), PODS)
    with pytest.raises(WatchBrokenError, match="not JSON"):
        decode_watch_line(b"{truncated", PODS)
    with pytest.raises(FormatError, match="unknown shape"):
        decode_watch_line(orjson.dumps({"type": "WEIRD", "object": {}}), PODS)


class FakeBatch:
    def __init__(self) -> None:
        self.keys: list[str] = []

        self.closed = False

    def append(
        self, *, key: bytes, value: bytes | None, timestamp: int, headers: list[tuple[str, bytes]]
    ) -> object:
        assert not self.closed, "a batch handed to the producer is never appended to"
        self.keys.append(key.decode())
        return object()

    def close(self) -> None:
        self.closed = True


class StuckProducer:
    """A producer whose broker never answers: every batch waits forever (until ``never`` is set)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}

    def create_batch(self) -> FakeBatch:
        return FakeBatch()

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> Any:
        # an open batch would wait linger_ms inside aiokafka before going out
        assert batch.closed, "batches are closed before they are sent, so they go out at once"
        self.sent += [(topic, key) for key in batch.keys]
        return self.never


async def test_unreachable_broker_blocks_submit_instead_of_growing_memory() -> None:
    publisher = KafkaPublisher(KafkaSettings("127.0.0.1:1"), Metrics(), max_pending_units=3)
    producer = StuckProducer()
    publisher._producer = producer  # the seam under test is the queue, not aiokafka
    await publisher.start()
    unit = [Record(EVENTS_TOPIC, "k", b"v", 1), Record(STATE_TOPIC, "k", b"v", 1)]
    for _ in range(4):  # one is taken by the sender (stuck), three fill the queue
        await asyncio.wait_for(publisher.submit(unit), 1)
    blocked = asyncio.create_task(publisher.submit(unit))
    await asyncio.sleep(0.05)
    assert not blocked.done(), "submit must wait while the queue is full (backpressure)"
    assert publisher.pending_units == 3
    # the state record waits for the events record's acknowledgement
    assert producer.sent == [(EVENTS_TOPIC, "k")]
    producer.never.set_result(None)  # the broker answers again
    await asyncio.wait_for(blocked, 1)
    await asyncio.wait_for(publisher.flush(), 1)
    assert publisher.pending_units == 0
    assert producer.sent.count((STATE_TOPIC, "k")) == 5
    await publisher.stop()


async def test_waiting_changes_without_acknowledgement_are_reported_for_readiness() -> None:
    now = [100.0]
    publisher = KafkaPublisher(KafkaSettings("127.0.0.1:1"), Metrics(), clock=lambda: now[0])
    producer = StuckProducer()
    publisher._producer = producer  # the seam under test is the acknowledgement clock, not aiokafka
    await publisher.start()
    now[0] = 160.0  # a long idle time is no outage: nothing waits for Kafka
    assert publisher.seconds_without_ack() == 0.0
    await publisher.submit([Record(EVENTS_TOPIC, "k", b"v", 1), Record(STATE_TOPIC, "k", b"v", 1)])
    assert publisher.seconds_without_ack() == 0.0
    now[0] = 167.5  # the broker has not answered since the change was handed over
    assert publisher.seconds_without_ack() == 7.5
    producer.never.set_result(None)  # the broker answers again
    await asyncio.wait_for(publisher.flush(), 1)
    assert publisher.seconds_without_ack() == 0.0
    await publisher.stop()


class ManualProducer(StuckProducer):
    """A producer whose every batch is acknowledged only when the test says so."""

    def __init__(self) -> None:
        super().__init__()
        self.acks: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> Any:
        await super().send_batch(batch, topic, partition=partition)
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in batch.keys:
            self.acks[(topic, key)] = ack
        return ack


async def _until(condition: Any) -> None:
    async with asyncio.timeout(1):
        while not condition():  # noqa: ASYNC110 - polling a fake's state, not waiting on an event
            await asyncio.sleep(0)


async def test_next_events_go_out_while_earlier_state_waits_but_never_before_their_own() -> None:
    publisher = KafkaPublisher(KafkaSettings("127.0.0.1:1"), Metrics())
    producer = ManualProducer()
    publisher._producer = producer  # the seam under test is the ordering of sends, not aiokafka
    await publisher.start()
    await publisher.submit([Record(EVENTS_TOPIC, "a", b"1", 1), Record(STATE_TOPIC, "a", b"1", 1)])
    await _until(lambda: (EVENTS_TOPIC, "a") in producer.acks)
    producer.acks[(EVENTS_TOPIC, "a")].set_result(None)
    await _until(lambda: (STATE_TOPIC, "a") in producer.acks)
    # a's state is not acknowledged yet; b's event goes out anyway (no round trip waited for)...
    await publisher.submit([Record(EVENTS_TOPIC, "b", b"2", 2), Record(STATE_TOPIC, "b", b"2", 2)])
    await _until(lambda: (EVENTS_TOPIC, "b") in producer.acks)
    producer.acks[(EVENTS_TOPIC, "b")].set_result(None)
    await asyncio.sleep(0.05)
    # ...but b's state follows a's state, and only once b's event is in Kafka
    assert (STATE_TOPIC, "b") not in producer.acks
    producer.acks[(STATE_TOPIC, "a")].set_result(None)
    await _until(lambda: (STATE_TOPIC, "b") in producer.acks)
    producer.acks[(STATE_TOPIC, "b")].set_result(None)
    await asyncio.wait_for(publisher.flush(), 1)
    assert producer.sent == [(EVENTS_TOPIC, "a"), (STATE_TOPIC, "a"), (EVENTS_TOPIC, "b"), (STATE_TOPIC, "b")]
    await publisher.stop()


QUICK: dict[str, float] = {"timeout_s": 5.0, "interval_s": 0.01}


def _now(read: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    async def observe() -> T:
        return read()

    return observe


class ListBus:
    def __init__(self) -> None:
        self.records: list[Record] = []

    async def submit(self, unit: Sequence[Record]) -> None:
        self.records.extend(unit)

    def events(self) -> list[tuple[str, str]]:
        decoded = [decode_event(r.value) for r in self.records if r.topic == EVENTS_TOPIC and r.value]
        return [(e.type.value, e.key) for e in decoded]


async def test_the_watcher_records_an_objects_life_on_the_shared_in_memory_cluster() -> None:
    cluster, bus = MemoryCluster(), ListBus()
    config = TracerConfig.from_mapping({"trackedObjects": {"apps/v1.Deployment": {}}}, "test")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
    }
    cluster.add(deployment)  # before the watcher starts: it comes from the list
    watcher = Watcher(config, cluster, bus, Metrics(), settings=WatchSettings(resume_every_s=0.0))
    task = asyncio.create_task(watcher.run())
    try:
        await eventually(_now(lambda: watcher.ready), bool, "the watcher to list and watch", **QUICK)
        await cluster.merge_patch("apps/v1", "Deployment", "shop", "web", {"spec": {"replicas": 3}})
        await cluster.delete("apps/v1", "Deployment", "shop", "web")
        key = "apps/Deployment/shop/web"
        expected = [("applied", key), ("applied", key), ("deleted", key)]
        await eventually(_now(bus.events), expected.__eq__, "the object's three events", **QUICK)
    finally:
        await watcher.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
