"""The real Kafka broker of the local stack works with aiokafka the way kubetape relies on it."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import TopicPartition

from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.clients import new_consumer, new_producer
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.stack.stack import LocalStack


async def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = new_producer(KafkaSettings(bootstrap=bootstrap))
    await producer.start()
    try:
        for index, value in enumerate(values):
            await producer.send(topic, value, key=f"k{index % 3}".encode())
        await producer.flush()
    finally:
        await producer.stop()


async def _consume_all(bootstrap: str, topic: str, group: str, expected: int) -> list[bytes]:
    consumer = new_consumer(KafkaSettings(bootstrap=bootstrap), topic, group_id=group)
    await consumer.start()
    seen: list[bytes] = []
    try:
        for _ in range(60):
            batches = await consumer.getmany(timeout_ms=500)
            for messages in batches.values():
                seen.extend(m.value for m in messages)
            if len(seen) >= expected:
                break
        await consumer.commit()
    finally:
        await consumer.stop()
    return seen


async def _committed(bootstrap: str, topic: str, group: str) -> int | None:
    consumer = new_consumer(KafkaSettings(bootstrap=bootstrap), group_id=group)
    await consumer.start()
    try:
        result: int | None = await consumer.committed(TopicPartition(topic, 0))
        return result
    finally:
        await consumer.stop()


async def test_produce_consume_commit_in_a_group(kafka_bootstrap: str) -> None:
    topic = f"it.roundtrip.{uuid.uuid4().hex[:8]}"
    assert await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic)
    values = [f"event-{i}".encode() for i in range(50)]
    await _produce(kafka_bootstrap, topic, values)

    first = await _consume_all(kafka_bootstrap, topic, "group-a", len(values))
    assert first == values  # one partition: order is kept
    assert await _committed(kafka_bootstrap, topic, "group-a") == len(values)

    # The same group resumes after its commit and sees only what came later.
    await _produce(kafka_bootstrap, topic, [b"later"])
    assert await _consume_all(kafka_bootstrap, topic, "group-a", 1) == [b"later"]
    # Another group is independent and reads everything from the start.
    assert await _consume_all(kafka_bootstrap, topic, "group-b", len(values) + 1) == [*values, b"later"]


async def test_restarted_broker_keeps_committed_data(local_stack: LocalStack, kafka_bootstrap: str) -> None:
    topic = f"it.durable.{uuid.uuid4().hex[:8]}"
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic)
    values = [f"keep-{i}".encode() for i in range(20)]
    await _produce(kafka_bootstrap, topic, values)
    assert len(await _consume_all(kafka_bootstrap, topic, "durable-group", len(values))) == len(values)

    local_stack.stop_kafka()
    assert not local_stack.status()["kafka"]["running"]  # type: ignore[index]
    local_stack.start_kafka()
    assert local_stack.info().bootstrap == kafka_bootstrap  # same address after the restart

    # Right after a restart the group coordinator may still be loading its offsets; poll for them
    # (lost offsets stay None and fail the test).
    committed = None
    for _ in range(60):
        committed = await _committed(kafka_bootstrap, topic, "durable-group")
        if committed is not None:
            break
        await asyncio.sleep(0.5)
    assert committed == len(values)
    assert await _consume_all(kafka_bootstrap, topic, "fresh-group", len(values)) == values
