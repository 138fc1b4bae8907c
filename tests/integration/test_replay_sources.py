"""Replay sources on the real broker: a topic range is read without touching any consumer group, folds
the events before the range into the initial state, skips redeliveries and malformed records; following
the live topic applies each new event a fixed lag after it was recorded, on the real ``sim`` cluster."""

from __future__ import annotations

import asyncio
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer

from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.io.kube.pod_watch import PodWatch
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.replayer import Replayer
from pipeline.replay.rewrite import REPLAY_LABEL
from pipeline.replay.settings import ReplaySettings
from pipeline.replay.sources import FollowSource, read_topic_trace
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON
from tests.polling import eventually

pytestmark = pytest.mark.integration


def pod(name: str, ns: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


async def publish_events(bootstrap: str, topic: str, events: list[Event]) -> None:
    await publish(bootstrap, topic, [(encode_event(e), e.ts_ms) for e in events])


async def publish(bootstrap: str, topic: str, records: list[tuple[bytes, int]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        for value, ts_ms in records:
            await producer.send_and_wait(topic, value, key=b"k", timestamp_ms=ts_ms)
    finally:
        await producer.stop()


async def test_a_topic_range_folds_earlier_events_into_the_start_and_skips_bad_records(
    kafka_bootstrap: str,
) -> None:
    topic = f"replay-range-{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(kafka_bootstrap)
    await ensure_topic(settings, topic, partitions=2)
    t0 = int(time.time() * 1000) - 600_000  # the broker refuses timestamps far from now
    early, gone, late, after = pod("early"), pod("gone"), pod("late"), pod("after")
    applied = [Event.applied(t0 + dt, key_of(o), o, 1) for dt, o in ((0, early), (1, gone))]
    records = [
        (encode_event(applied[0]), t0),
        (encode_event(applied[1]), t0 + 1),
        (encode_event(Event.deleted(t0 + 2, key_of(gone), gone, 1)), t0 + 2),
        (encode_event(Event.applied(t0 + 10_000, key_of(late), late, 1)), t0 + 10_000),
        (encode_event(Event.applied(t0 + 10_000, key_of(late), late, 1)), t0 + 10_000),  # redelivery
        (b"\xc1 not an event", t0 + 11_000),
        (encode_event(Event.applied(t0 + 30_000, key_of(after), after, 1)), t0 + 30_000),
    ]
    await publish(kafka_bootstrap, topic, records)
    warnings: list[str] = []

    trace = await read_topic_trace(settings, topic, t0 + 5_000, t0 + 20_000, warn=warnings.append)

    names = [(e.type.name, e.ts_ms - t0, e.key.rsplit("/", 1)[1]) for e in trace.events]
    # "early" lives at the range start and is created first; "gone" was deleted before it; the
    # redelivered "late" appears once; "after" is past the end
    assert names == [("APPLIED", 5_000, "early"), ("APPLIED", 10_000, "late")]
    assert len(warnings) == 1
    assert f"topic {topic} p" in warnings[0]
    assert "@" in warnings[0]


@pytest.mark.timeout(180)
async def test_following_the_live_topic_applies_each_new_event_a_fixed_lag_later(
    kafka_bootstrap: str, sim_kubeconfig: Path
) -> None:
    topic = f"replay-follow-{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(kafka_bootstrap)
    await ensure_topic(settings, topic, partitions=1)
    now = int(time.time() * 1000)
    existing = pod("existing")
    await publish(
        kafka_bootstrap,
        topic,
        [(encode_event(Event.applied(now - 60_000, key_of(existing), existing, 1)), now - 60_000)],
    )

    lag_ms = 3_000
    follow = FollowSource(settings, topic, lag_ms)
    plan = await follow.initial_plan()
    name = f"follow-{uuid.uuid4().hex[:6]}"
    replay_settings = ReplaySettings(
        speed=1.0,
        replay_name=name,
        namespace_prefix=name,
        node_pools=((yaml.safe_load(DEFAULT_NODE_SKELETON.read_text()), 1),),
    )
    async with kube_api(sim_kubeconfig) as api:
        cluster = KubeClient(api)
        replayer = Replayer(
            cluster, plan, replay_settings, source=f"topic {topic}", pod_watch=partial(PodWatch, api)
        )
        run = asyncio.create_task(
            replayer.run(follow.steps(), first_due_at=follow.first_due_at(time.monotonic()))
        )
        selector = f"{REPLAY_LABEL}={name}"

        async def pod_names() -> set[str]:
            return {
                p["metadata"]["name"]
                for p in await cluster.list_objects("v1", "Pod", label_selector=selector)
            }

        # the state before now − lag is created at once
        await eventually(pod_names, lambda names: "existing" in names, "the initial state", interval_s=0.1)

        live = pod("live")
        recorded_at = int(time.time() * 1000)
        await publish(
            kafka_bootstrap,
            topic,
            [(encode_event(Event.applied(recorded_at, key_of(live), live, 1)), recorded_at)],
        )
        await eventually(pod_names, lambda names: "live" in names, "the live event replayed", interval_s=0.05)
        delay_ms = time.time() * 1000 - recorded_at
        # not before the lag; and not much after it (polling, the apply itself)
        assert lag_ms <= delay_ms < lag_ms + 10_000, delay_ms  # bounded, with slack for busy machines

        replayer.stop()
        report = await asyncio.wait_for(run, 120)
        assert report.applied == 2
        assert report.failed == 0
        assert report.cleanup.startswith("done"), report.cleanup
        assert await pod_names() == set()
