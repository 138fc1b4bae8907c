"""The one Kafka reader and the reads built on it, against the in-memory broker: where each read starts
and ends, which cluster's records it keeps, and that only a reader with a group commits (to its group)."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from pipeline.io.kafka.headers import CLUSTER_HEADER, cluster_header
from pipeline.io.kafka.reader import TopicMissingError, TopicReader
from pipeline.io.kafka.reads import read_compacted, read_topic_range, tail_topic
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import ConfigError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId, message_key
from tests.fakes.kafka import FakeKafka

SETTINGS = KafkaSettings(bootstrap="in-memory:9092")
TOPIC = "kubetape.events"
EU, US = ClusterId("eu"), ClusterId("us")


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> FakeKafka:
    broker = FakeKafka().install(monkeypatch)
    broker.create(TOPIC, partitions=2)
    return broker


def produce_seconds(kafka: FakeKafka, partition: int, seconds: range) -> None:
    """One record a second (value and timestamp say which), then a transaction marker."""
    for s in seconds:
        kafka.produce(TOPIC, f"{partition}@{s}".encode(), partition=partition, timestamp_ms=s * 1000)
    kafka.marker(TOPIC, partition)


async def test_a_time_range_is_read_per_partition_in_offset_order_and_ends_at_markers(
    kafka: FakeKafka,
) -> None:
    produce_seconds(kafka, 0, range(10))
    produce_seconds(kafka, 1, range(5, 8))
    messages = await read_topic_range(SETTINGS, TOPIC, end_ms=7000, start_ms=3000)
    assert [m.value for m in messages] == [b"0@3", b"0@4", b"0@5", b"0@6", b"1@5", b"1@6"]
    assert all(c.stopped for c in kafka.consumers)


async def test_a_range_to_past_the_end_finishes_although_the_last_offset_is_a_marker(
    kafka: FakeKafka,
) -> None:
    produce_seconds(kafka, 0, range(3))
    messages = await read_topic_range(SETTINGS, TOPIC, end_ms=60_000)
    assert [m.offset for m in messages] == [0, 1, 2]


async def test_a_range_keeps_one_cluster_and_refuses_to_merge_clusters_nobody_chose(kafka: FakeKafka) -> None:
    kafka.produce(TOPIC, b"eu", headers=cluster_header(EU), timestamp_ms=1)
    kafka.produce(TOPIC, b"us", headers=cluster_header(US), timestamp_ms=2)
    assert [m.value for m in await read_topic_range(SETTINGS, TOPIC, 10, cluster=US)] == [b"us"]
    with pytest.raises(ConfigError, match=r"several clusters \(eu, us\)"):
        await read_topic_range(SETTINGS, TOPIC, 10)


async def test_a_missing_topic_is_a_config_error(kafka: FakeKafka) -> None:
    with pytest.raises(TopicMissingError, match="'nope' does not exist"):
        await read_topic_range(SETTINGS, "nope", 10)


async def test_a_group_reader_resumes_at_its_commit_and_leaves_other_groups_alone(kafka: FakeKafka) -> None:
    produce_seconds(kafka, 0, range(4))
    kafka.committed[("kubetape-sink", TopicPartition(TOPIC, 0))] = 99  # another group's position
    async with TopicReader(SETTINGS, TOPIC, start="committed", group_id="g") as first:
        assert first.lag() == 5  # four records and the marker
        batch = await first.fetch(timeout_ms=0, max_records=2)
        assert [m.offset for m in batch] == [0, 1]
        await first.commit({0: 2})
        assert not first.finished()  # it follows the topic
    async with TopicReader(SETTINGS, TOPIC, start="committed", group_id="g", end="current") as second:
        assert [m.offset for m in await second.fetch(timeout_ms=0, max_records=100)] == [2, 3]
        assert second.finished()
    assert kafka.committed == {
        ("kubetape-sink", TopicPartition(TOPIC, 0)): 99,
        ("g", TopicPartition(TOPIC, 0)): 2,
    }


async def test_a_reader_without_a_group_never_commits(kafka: FakeKafka) -> None:
    with pytest.raises(ValueError, match="needs a consumer group"):
        TopicReader(SETTINGS, TOPIC, start="committed")
    async with TopicReader(SETTINGS, TOPIC, start="beginning") as reader:
        with pytest.raises(RuntimeError, match="does not commit"):
            await reader.commit({0: 1})


async def test_the_tail_follows_from_a_time_on(kafka: FakeKafka) -> None:
    produce_seconds(kafka, 1, range(4))
    tail = tail_topic(SETTINGS, TOPIC, from_ms=2000)
    assert [m.value for m in await anext(tail)] == [b"1@2", b"1@3"]
    kafka.produce(TOPIC, b"later", partition=0, timestamp_ms=9000)
    assert [m.value for m in await anext(tail)] == [b"later"]
    await tail.aclose()
    assert all(c.stopped for c in kafka.consumers)


async def test_the_compacted_read_back_keeps_the_latest_of_own_keys(kafka: FakeKafka) -> None:
    kafka.create("kubetape.state")

    def put(cluster: ClusterId, key: str, value: bytes | None) -> None:
        kafka.produce(
            "kubetape.state", value, key=message_key(cluster, key).encode(), headers=cluster_header(cluster)
        )

    put(EU, "a", b"1")
    put(EU, "b", b"1")
    put(US, "a", b"us")
    put(EU, "a", b"2")
    put(EU, "b", None)  # a tombstone
    kafka.produce("kubetape.state", b"forged", key=b"us/a", headers=[(CLUSTER_HEADER, b"eu")])
    kafka.marker("kubetape.state")
    assert await read_compacted(SETTINGS, "kubetape.state", cluster=EU) == {"a": b"2"}
    assert await read_compacted(SETTINGS, "kubetape.state", cluster=US) == {"a": b"us"}
    assert await read_compacted(SETTINGS, "kubetape.state", cluster=DEFAULT_CLUSTER) == {}
    assert await read_compacted(SETTINGS, "kubetape.watch-resume") == {}  # not created yet
