"""The publisher against a scripted in-memory producer: a record the broker refuses is dead-lettered
with its key and size and publishing goes on; a failed batch is resent alone (with the later batches of
its partition), never the records other partitions already acknowledged."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, OutOfOrderSequenceNumber

from pipeline.io.kafka.headers import CLUSTER_HEADER
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.publisher import KafkaPublisher
from pipeline.io.kafka.settings import DEADLETTER_TOPIC, EVENTS_TOPIC, STATE_TOPIC, KafkaSettings
from pipeline.io.kafka.tls import ClientTLS
from pipeline.io.metrics import Metrics
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId


class FakeBatch:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: list[tuple[bytes, bytes | None, int]] = []
        self.headers: list[list[tuple[str, bytes]]] = []
        self.size = 0

    def append(
        self, *, key: bytes, value: bytes | None, timestamp: int, headers: list[tuple[str, bytes]]
    ) -> object | None:
        size = len(key) + len(value or b"")
        if self.items and self.size + size > self.limit:
            return None  # as aiokafka: a full batch refuses, an empty one takes anything
        self.items.append((key, value, timestamp))
        self.headers.append(headers)
        self.size += size
        return object()

    def close(self) -> None:
        pass


class FakeProducer:
    """Partitions by the publisher's choice; ``broker_limit`` refuses batches larger than it (as
    ``max.message.bytes``); ``fail`` may fail a batch once with any error. As aiokafka's idempotent
    producer, a refused batch leaves a gap in its partition's sequence numbers: every later batch of
    that partition is refused as out of order until the producer is started anew."""

    def __init__(self, partitions: int = 3, broker_limit: int = 10_000, batch_bytes: int = 1 << 20) -> None:
        self.partitions = partitions
        self.broker_limit = broker_limit
        self.batch_bytes = batch_bytes
        self.log: dict[tuple[str, int], list[str]] = {}  # acknowledged keys per partition, in order
        self.headers: list[list[tuple[str, bytes]]] = []  # of every acknowledged record
        self.deadletters: list[tuple[bytes, dict[str, Any], dict[str, bytes]]] = []
        self.attempts = 0
        self.starts = 0
        self.gaps: set[tuple[str, int]] = set()
        self.fail: Callable[[str, int, FakeBatch], Exception | None] = lambda _t, _p, _b: None
        self.client: object = None  # aiokafka's producer keeps its TLS context there (a test sets one)

    async def start(self) -> None:
        self.starts += 1
        self.gaps.clear()  # a new producer id: sequences start from zero

    async def stop(self) -> None:
        pass

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))

    def create_batch(self) -> FakeBatch:
        return FakeBatch(self.batch_bytes)

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        self.attempts += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        error = self.fail(topic, partition, batch)
        if error is None and (topic, partition) in self.gaps:
            error = OutOfOrderSequenceNumber()
        if error is None and batch.size > self.broker_limit:
            error = MessageSizeTooLargeError()
            self.gaps.add((topic, partition))
        if error is not None:
            future.set_exception(error)
        else:
            self.log.setdefault((topic, partition), []).extend(k.decode() for k, _, _ in batch.items)
            self.headers += batch.headers
            future.set_result(None)
        return future

    async def send_and_wait(
        self, topic: str, *, value: bytes, key: bytes, headers: Any, timestamp_ms: int
    ) -> None:
        assert topic == DEADLETTER_TOPIC
        self.deadletters.append((key, orjson.loads(value), dict(headers)))

    def delivered(self, topic: str) -> list[str]:
        return sorted(k for (t, _), keys in self.log.items() if t == topic for k in keys)


async def publisher_with(
    producer: FakeProducer, max_batch_bytes: int = 1 << 20, cluster: ClusterId = DEFAULT_CLUSTER
) -> KafkaPublisher:
    settings = KafkaSettings("unused:9092", max_batch_bytes=max_batch_bytes)
    return KafkaPublisher(settings, Metrics(), producer_factory=lambda _settings: producer, cluster=cluster)


def unit(key: str, size: int = 10) -> list[Record]:
    value = b"x" * size
    return [Record(EVENTS_TOPIC, key, value, 1000), Record(STATE_TOPIC, key, value, 1000)]


async def publish(pub: KafkaPublisher, units: list[list[Record]]) -> None:
    async with pub:
        for u in units:
            await pub.submit(u)
        async with asyncio.timeout(5):
            await pub.flush()


async def test_a_record_the_broker_refuses_is_dead_lettered_and_publishing_goes_on() -> None:
    producer = FakeProducer(broker_limit=5_000)
    pub = await publisher_with(producer)
    keys = [f"apps/Deployment/ns/d{i}" for i in range(30)]
    huge = "core/ConfigMap/ns/huge"
    await publish(pub, [unit(k) for k in keys[:15]] + [unit(huge, 50_000)] + [unit(k) for k in keys[15:]])
    # every other record is published exactly once, on both topics
    assert producer.delivered(EVENTS_TOPIC) == sorted(keys)
    assert producer.delivered(STATE_TOPIC) == sorted(keys)
    # the refused one is described (never its value) on the dead-letter topic, once per topic
    described = sorted((d["topic"], d["key"], d["bytes"]) for _, d, _ in producer.deadletters)
    assert described == [(EVENTS_TOPIC, huge, 50_000 + len(huge)), (STATE_TOPIC, huge, 50_000 + len(huge))]
    for key, d, headers in producer.deadletters:
        assert key == huge.encode()
        assert "MessageSizeTooLarge" in d["error"]
        assert headers["kubetape.size"] == str(50_000 + len(huge)).encode()
        assert b"xxxx" not in orjson.dumps(d)
    assert pub.dead_lettered == 2
    assert pub.seconds_without_ack() == 0.0
    assert producer.starts > 1, "the producer was replaced after the refusal (sequence gap)"


async def test_a_record_larger_than_a_batch_is_refused_before_sending() -> None:
    producer = FakeProducer(broker_limit=1 << 30)
    pub = await publisher_with(producer, max_batch_bytes=4096)
    await publish(pub, [unit("core/Pod/ns/small"), unit("core/Pod/ns/big", 8192), unit("core/Pod/ns/after")])
    assert producer.delivered(EVENTS_TOPIC) == ["core/Pod/ns/after", "core/Pod/ns/small"]
    assert [d["key"] for _, d, _ in producer.deadletters] == ["core/Pod/ns/big"] * 2
    assert "max_batch_bytes" in producer.deadletters[0][1]["error"]
    assert all(k != "core/Pod/ns/big" for keys in producer.log.values() for k in keys)


async def test_a_batch_refused_as_too_large_is_split_and_only_the_culprit_set_aside() -> None:
    # the broker's limit is below the producer's batch size: whole batches are refused
    producer = FakeProducer(partitions=1, broker_limit=3_000)
    pub = await publisher_with(producer)
    keys = [f"core/Pod/ns/p{i:02}" for i in range(40)]
    units = (
        [unit(k, 200) for k in keys[:20]]
        + [unit("core/Pod/ns/big", 4_000)]
        + [unit(k, 200) for k in keys[20:]]
    )
    await publish(pub, units)
    # order within the partition is kept, every good record is there, the big one is set aside
    events = producer.log[EVENTS_TOPIC, 0]
    assert sorted(set(events)) == sorted(keys)
    last_writes = list(dict.fromkeys(reversed(events)))[::-1]  # what a compacted topic keeps, in order
    assert last_writes == keys, "the partition's order is kept"
    assert [d["key"] for _, d, _ in producer.deadletters] == ["core/Pod/ns/big"] * 2


async def test_a_failed_batch_does_not_resend_other_partitions_records() -> None:
    producer = FakeProducer(partitions=4, broker_limit=1 << 30)
    failures = {"left": 1}
    failed_partition: list[int] = []

    def fail_once(topic: str, partition: int, batch: FakeBatch) -> Exception | None:
        if topic == EVENTS_TOPIC and failures["left"] and not failed_partition:
            failures["left"] -= 1
            failed_partition.append(partition)
            error: Exception = KafkaTimeoutError()
            return error
        return None

    producer.fail = fail_once
    pub = await publisher_with(producer)
    keys = [f"apps/Deployment/ns/d{i}" for i in range(50)]
    await publish(pub, [unit(k) for k in keys])
    events = [k for keys_ in (v for (t, _), v in producer.log.items() if t == EVENTS_TOPIC) for k in keys_]
    assert sorted(events) == sorted(keys), "each record delivered exactly once: no phase resent"
    assert producer.deadletters == []
    assert failed_partition


async def test_a_fleet_member_prefixes_every_key_and_names_its_cluster_in_a_header() -> None:
    producer = FakeProducer(broker_limit=5_000)
    pub = await publisher_with(producer, cluster=ClusterId("prod-eu"))
    await publish(pub, [unit("apps/Deployment/ns/web"), unit("core/ConfigMap/ns/huge", 50_000)])
    assert producer.delivered(EVENTS_TOPIC) == ["prod-eu/apps/Deployment/ns/web"]
    assert producer.delivered(STATE_TOPIC) == ["prod-eu/apps/Deployment/ns/web"]
    assert producer.headers == [[(CLUSTER_HEADER, b"prod-eu")]] * 2
    # a record set aside still says which cluster it came from
    assert {(k, h[CLUSTER_HEADER]) for k, _, h in producer.deadletters} == {
        (b"prod-eu/core/ConfigMap/ns/huge", b"prod-eu")
    }


async def test_the_default_cluster_publishes_as_before_fleets() -> None:
    producer = FakeProducer()
    await publish(await publisher_with(producer), [unit("apps/Deployment/ns/web")])
    assert producer.delivered(EVENTS_TOPIC) == ["apps/Deployment/ns/web"]
    assert producer.headers == [[], []]


async def test_a_refused_tls_connection_makes_it_not_ready_until_the_brokers_take_it_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client certificate the brokers refuse after start: the producer's TLS context tells it (as its
    connections' handshakes do, see tests/unit/test_kafka_tls.py); sends fail meanwhile. Not ready with
    what TLS said, then ready again once the brokers take the (renewed) certificate; every change is
    delivered once."""
    context = ClientTLS.create(ca=None, certificate=None, key=None, key_password=None, check_hostname=True)
    producer = FakeProducer()
    producer.client = SimpleNamespace(_ssl_context=context)  # where aiokafka's producer keeps it
    still_refused = True
    producer.fail = lambda _t, _p, _b: KafkaTimeoutError() if still_refused else None
    checked = asyncio.Event()

    async def brokers_say(_settings: KafkaSettings) -> str | None:  # the publisher's one-connection check
        checked.set()
        return "refused" if still_refused else None

    monkeypatch.setattr("pipeline.io.kafka.publisher.refusal", brokers_say)
    pub = await publisher_with(producer)
    async with pub:
        context.met(ssl.SSLError(1, "[SSL: SSLV3_ALERT_CERTIFICATE_EXPIRED] sslv3 alert certificate expired"))
        for i in range(20):
            await pub.submit(unit(f"pod-{i}"))
        async with asyncio.timeout(10):
            await checked.wait()
        assert pub.access.error is not None  # not ready
        assert "refuses the TLS connection" in str(pub.access.error)
        assert "the brokers refuse this client's certificate: expired" in str(pub.access.error)
        still_refused = False  # the renewed certificate is written
        async with asyncio.timeout(30):
            await pub.flush()
        assert pub.access.ok  # the first batch the brokers took since
    assert producer.delivered(EVENTS_TOPIC) == sorted(f"pod-{i}" for i in range(20))
    assert producer.delivered(STATE_TOPIC) == sorted(f"pod-{i}" for i in range(20))
