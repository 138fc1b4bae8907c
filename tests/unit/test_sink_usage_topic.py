"""The sink finds its usage topic whatever the order of starts (pipeline.sink.usage_member): it creates it
as it creates the events topic, or, where it may not, looks for it with a backoff until it appears, and
only then runs the usage consumer; a consumer that fails starts again."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import pytest

from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import ConfigError, TransientError
from pipeline.sink import usage_member
from pipeline.sink.usage_member import UsageTopic, store_usage, wait_for_usage_topic

KAFKA = KafkaSettings("127.0.0.1:1")


@dataclass
class Brokers:
    """Stands in for the admin calls: the topic appears after ``absent_looks`` looks (a watcher starting
    later), or when this sink creates it, if it may."""

    absent_looks: int = 1_000_000
    may_create: bool = True
    denied_describe_looks: int = 0
    created: list[tuple[str, int]] = field(default_factory=list)
    looks: int = 0

    async def ensure_topic(self, settings: KafkaSettings, name: str, partitions: int = 1) -> bool:
        if not self.may_create:
            raise ConfigError(f"topic {name!r} does not exist and this client may not create it")
        self.created.append((name, partitions))
        return True

    async def topic_partitions(self, settings: KafkaSettings, topic: str) -> list[int]:
        self.looks += 1
        if self.looks <= self.denied_describe_looks:
            raise ConfigError(f"the brokers deny Describe on {topic}")
        return list(range(3)) if self.created or self.looks > self.absent_looks else []


@pytest.fixture
def brokers(monkeypatch: pytest.MonkeyPatch) -> Brokers:
    fake = Brokers()
    monkeypatch.setattr(usage_member, "ensure_topic", fake.ensure_topic)
    monkeypatch.setattr(usage_member, "topic_partitions", fake.topic_partitions)
    return fake


async def wait(topic: UsageTopic, stop: asyncio.Event | None = None) -> bool:
    return await wait_for_usage_topic(topic, stop or asyncio.Event(), first_look_s=0.001, max_look_s=0.004)


async def test_a_sink_that_starts_first_creates_the_usage_topic_as_it_does_the_events_topic(
    brokers: Brokers,
) -> None:
    assert await wait(UsageTopic(KAFKA, "kubetape.usage", 6, create=True))
    assert brokers.created == [("kubetape.usage", 6)]


async def test_a_sink_that_may_not_create_it_waits_for_the_watcher_and_warns_once(
    brokers: Brokers, caplog: pytest.LogCaptureFixture
) -> None:
    brokers.may_create, brokers.absent_looks = False, 5
    with caplog.at_level(logging.INFO, "kubetape.sink.usage"):
        assert await wait(UsageTopic(KAFKA, "kubetape.usage", 6, create=True))
    assert brokers.created == []
    assert brokers.looks == 6
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    # the denial says why once; the looks after it that find nothing say nothing new
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert "may not create it" in lines[0][1]
    assert "usage topic found" in lines[1][1]


async def test_topics_check_only_looks_and_never_creates(brokers: Brokers) -> None:
    brokers.absent_looks = 3
    assert await wait(UsageTopic(KAFKA, "kubetape.usage", 6, create=False))
    assert brokers.created == []
    assert brokers.looks == 4


async def test_a_denied_describe_is_looked_at_again_until_granted(
    brokers: Brokers, caplog: pytest.LogCaptureFixture
) -> None:
    brokers.denied_describe_looks, brokers.absent_looks = 3, 0
    with caplog.at_level(logging.WARNING, "kubetape.sink.usage"):
        assert await wait(UsageTopic(KAFKA, "kubetape.usage", 6, create=False))
    assert [r.getMessage() for r in caplog.records if "deny Describe" in r.getMessage()] != []


async def test_a_stopping_sink_stops_looking(brokers: Brokers) -> None:
    stop = asyncio.Event()
    waiting = asyncio.create_task(wait(UsageTopic(KAFKA, "kubetape.usage", 6, create=False), stop))
    while brokers.looks < 2:  # noqa: ASYNC110 - the fake counts its looks; nothing to wait on
        await asyncio.sleep(0.001)
    stop.set()
    assert await asyncio.wait_for(waiting, 5) is False


class Member:
    """A usage consumer whose first start fails (Kafka gone), the second runs until stopped."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop, self.made, self.ran = stop, 0, 0

    def __call__(self) -> tuple[Member, Member]:
        self.made += 1
        return self, self

    async def __aenter__(self) -> Member:
        if self.made == 1:
            raise TransientError("cannot reach Kafka")
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def run(self, stop: asyncio.Event) -> None:
        self.ran += 1
        stop.set()


async def test_a_usage_consumer_that_fails_is_started_again(
    brokers: Brokers, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(usage_member, "RESTART_S", 0.001)
    stop = asyncio.Event()
    member = Member(stop)
    topic = UsageTopic(KAFKA, "kubetape.usage", 6, create=True)
    await asyncio.wait_for(store_usage(topic, member, stop), 5)  # type: ignore[arg-type]
    assert (member.made, member.ran) == (2, 1)
