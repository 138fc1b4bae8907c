"""A structure-aware fuzz of the sink's ingest on the real broker.

Valid messages with every field at its limits (int64 extremes, times at and past year 9999, empty and
non-ASCII strings, odd keys, resourceVersions that are not ASCII digits, bodies that are not the object
their key names, huge bodies), next to a regular workload, all consumed by a real sink:

* the sink keeps consuming: its group commits the end of every partition;
* every message the ingest rules refuse (:func:`~pipeline.formats.wire.rules.admitted_event`, the
  definition) is in the dead-letter topic once, with its source partition and offset and the reason;
  nothing else is;
* the export of the regular workload's window is byte for byte what it is without the fuzz, and the
  accepted boundary messages export as a direct trace of them does.
"""

from __future__ import annotations

import asyncio
import random
import string
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
from aiokafka import TopicPartition

from pipeline.formats.wire.codec import WIRE_VERSION, encode_event
from pipeline.formats.wire.probe import WireProbe
from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.clients import new_consumer, new_producer
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import FormatError
from pipeline.model.events import RV_MAX_DIGITS, TS_MAX_MS, Event
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import ObjectKey, key_of, object_key
from pipeline.sink.synthetic import synthetic_events
from tests.integration.test_sink import direct_trace, export_bytes, running_sink_loop

PARTITIONS = 3
WINDOW_MS = 300_000
SEED = 1717


def _t0() -> int:
    now = int(time.time() * 1000) - 3_600_000  # recent: the broker's time retention keeps it
    return now - now % 60_000


# ---- the messages -----------------------------------------------------------------------------------
def configmap(namespace: str | None, name: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **extra}


def deployment(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"replicas": 1, **spec},
    }


def accepted_boundaries(after_ms: int) -> list[Event]:
    """Valid events at the limits, each at its own millisecond from ``after_ms`` on (the last at the
    last accepted millisecond), on keys of their own."""
    huge = "".join(random.Random(SEED).choices(string.ascii_letters, k=600_000))
    objects = [
        configmap("fuzz", "é-名前", data={"k": "ünïcödé", "empty": ""}),
        configmap("fuzz", "x" * 253),
        configmap(None, "cluster-scoped-name"),
        configmap("fuzz", "huge", data={"blob": huge}),  # ~600 kB, about a Kafka message's limit
        configmap("fuzz", "ints", data={"min": -(1 << 63), "max": (1 << 64) - 1, "float": 1e308}),
        configmap("fuzz", "odd-content", data={"bytes": b"\x00\xff", "nested": [[[[{"deep": []}]]]]}),
        deployment("fuzz", "big-numbers", replicas=(1 << 63) - 1),
    ]
    out: list[Event] = []
    for i, obj in enumerate(objects):
        rv = ["", "0", "9" * RV_MAX_DIGITS, "0" * RV_MAX_DIGITS, "1"][i % 5]
        uid = ["", "é", "u" * 200, "\x00"][i % 4]
        out.append(
            Event.applied(after_ms + i, key_of(obj), obj, object_spec_hash(obj), uid=uid, resource_version=rv)
        )
    gone = configmap("fuzz", "deleted-at-the-edge")
    out.append(Event.deleted(after_ms + 50, key_of(gone), gone, (1 << 64) - 1, resource_version="9" * 20))
    pod = object_key("v1", "Pod", "fuzz", "p-é")
    owner = object_key("apps/v1", "Deployment", "fuzz", "big-numbers")
    out.append(
        Event.pod_lifecycle(
            after_ms + 60, pod, owner_key=owner, pod_spec_hash=(1 << 64) - 1, start_ms=0, end_ms=TS_MAX_MS
        )
    )
    out.append(Event.gap(after_ms + 70, ObjectKey("core/Pod/*/*"), reason="", from_rv="", to_rv="9" * 20))
    far = configmap("fuzz", "year-9999")
    out.append(Event.applied(TS_MAX_MS, key_of(far), far, 1, resource_version="1"))
    return out


def _wire(ts: Any, key: Any, body: Any = None, *, code: int = 1, rv: Any = "1", **kw: Any) -> bytes:
    fields: list[Any] = [WIRE_VERSION, code, ts, key, kw.get("uid", "u"), rv]
    fields += [body if body is not None or code > 2 else configmap("fuzz", "x"), kw.get("spec_hash", 1)]
    if code == 3:
        fields += [kw.get("owner", "apps/Deployment/fuzz/d"), 1, kw.get("start", 0), kw.get("end")]
    elif code == 4:
        fields += [kw.get("from_rv"), kw.get("to_rv"), "410"]
    return bytes(msgpack.packb(fields, use_bin_type=True))


def refused_boundaries(at_ms: int) -> list[bytes | None]:
    """Messages just past a limit, or otherwise unfit for the later stages."""
    cm = configmap("fuzz", "x")
    key = "core/ConfigMap/fuzz/x"
    near_limit = configmap("fuzz", "x", data={"blob": "y" * 1_000_000})  # a Kafka message's limit
    return [
        _wire(TS_MAX_MS + 1, key, cm),
        _wire((1 << 63) - 60_000, key, cm),  # the window end would overflow the C fold's long long
        _wire((1 << 63) - 1, key, cm),
        _wire((1 << 64) - 1, key, cm),
        _wire(-1, key, cm),
        _wire(at_ms, key, cm, rv="²"),  # a digit to str.isdigit, not to int()
        _wire(at_ms, key, cm, rv="٣"),
        _wire(at_ms, key, cm, rv="9" * (RV_MAX_DIGITS + 1)),
        _wire(at_ms, key, cm, rv="1" * 5000),  # past int()'s digit limit
        _wire(at_ms, key, cm, rv="abc"),
        _wire(at_ms, "core/ConfigMap//x", configmap("", "x")),  # the key that broke exports
        _wire(at_ms, "/ConfigMap/fuzz/x", cm),
        _wire(at_ms, "core/ConfigMap/fuzz/", cm),
        _wire(at_ms, "core/ConfigMap/fuzz", cm),
        _wire(at_ms, "", cm),
        _wire(at_ms, key, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": ["not", "a", "map"]}),
        _wire(at_ms, key, {"metadata": {"name": "x", "namespace": "fuzz"}}),
        _wire(at_ms, key, configmap("fuzz", "y")),  # another object than the key names
        _wire(at_ms, key, configmap("other", "x")),
        _wire(at_ms, key, {}),
        _wire(at_ms, key, [1, 2]),
        _wire(at_ms, key, cm, spec_hash=-1),
        _wire(at_ms, key, cm, uid=b"bytes"),
        _wire(at_ms, "core/Pod/fuzz/p", code=3, owner="apps/Deployment//d"),
        _wire(at_ms, "core/Pod/fuzz/p", code=3, start=TS_MAX_MS + 1),
        _wire(at_ms, "core/Pod/fuzz/p", code=3, start=10, end=5),
        _wire(at_ms, "core/Pod/*/*", code=4, from_rv="²"),
        _wire(at_ms, "core/Pod/*/*", code=4, to_rv="x"),
        bytes(msgpack.packb([WIRE_VERSION + 1, 1, at_ms, key, "", "", cm, 0])),
        bytes(msgpack.packb([WIRE_VERSION, 9, at_ms, key, "", "", cm, 0])),
        bytes(msgpack.packb([WIRE_VERSION, 1, at_ms, key, "", "", cm, 0, "extra"])),
        b"\xc1not msgpack",
        b"",
        None,  # a tombstone: no value at all
        _wire(at_ms, key, near_limit)[:-1],  # truncated, and about as large as a message may be
    ]


# Structure-aware random messages: a valid template with a few fields moved to their limits.
FIELD_VALUES: dict[int, list[Any]] = {
    2: [TS_MAX_MS, TS_MAX_MS + 1, (1 << 63) - 1, -1, -(1 << 63), 1.5, "1", None, True],
    3: ["", "/", "a/b/c", "a//c/d", "a/b/c/d/e", "core/ConfigMap/fuzz/é", "core/ConfigMap/fuzz/r", 7, b"k"],
    4: ["", "é", "\x00", None, 1, b"u"],
    5: ["", "0", "9" * 20, "9" * 21, "²", "٣", " 1", None, 12],
    7: [0, (1 << 64) - 1, -1, 1.0, None],
}


def random_messages(rng: random.Random, count: int, after_ms: int) -> list[bytes]:
    out = []
    for i in range(count):
        obj = configmap("fuzz", f"r{i}", data={"i": i})
        fields: list[Any] = [WIRE_VERSION, rng.choice([1, 2]), after_ms + i, key_of(obj), "u", str(i), obj, i]
        for _ in range(rng.randint(1, 2)):
            at = rng.choice(list(FIELD_VALUES))
            fields[at] = rng.choice(FIELD_VALUES[at])
        if rng.random() < 0.3:  # the body: identity fields of other types or values, odd content
            body = dict(obj)
            body[rng.choice(["apiVersion", "kind", "metadata", "spec"])] = rng.choice(
                ["", None, 5, ["x"], {"name": f"r{i}"}, {1: b"\x00"}, "apps/v1"]
            )
            fields[6] = body
        out.append(bytes(msgpack.packb(fields, use_bin_type=True)))
    return out


def verdict(value: bytes | None) -> str | None:
    """None if the ingest rules accept ``value``, else why not (as the sink words it, without where)."""
    if value is None:
        return "message has no value"
    try:
        WireProbe().head(value, "")
    except FormatError as exc:
        return str(exc).removeprefix(": ")
    return None


# ---- the broker and the sink --------------------------------------------------------------------------
async def produce(
    bootstrap: str, topic: str, messages: list[tuple[bytes | None, int]]
) -> list[tuple[int, int]]:
    """Send ``(value, partition)`` in order; their (partition, offset) in the topic."""
    producer = new_producer(KafkaSettings(bootstrap=bootstrap))
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, value, key=b"fuzz", partition=partition, timestamp_ms=int(time.time() * 1000)
            )
            for value, partition in messages
        ]
        return [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
    finally:
        await producer.stop()


async def produce_events(bootstrap: str, topic: str, events: list[Event]) -> None:
    producer = new_producer(KafkaSettings(bootstrap=bootstrap))
    await producer.start()
    try:
        for e in events:
            await producer.send(
                topic, encode_event(e), key=e.key.encode(), timestamp_ms=int(time.time() * 1000)
            )
        await producer.flush()
    finally:
        await producer.stop()


async def wait_committed(
    bootstrap: str, group: str, topic: str, *, partitions: int = PARTITIONS, within: float = 120
) -> None:
    consumer = new_consumer(KafkaSettings(bootstrap=bootstrap), group_id=group)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            committed = {tp: await consumer.committed(tp) for tp in tps}
            if all((committed[tp] or 0) >= ends[tp] for tp in tps):
                return
            await asyncio.sleep(0.5)
        raise AssertionError(
            f"the sink stopped short of the end of {topic}: committed {committed}, ends {ends}"
        )
    finally:
        await consumer.stop()


async def dead_letters(bootstrap: str, topic: str) -> list[Any]:
    consumer = new_consumer(KafkaSettings(bootstrap=bootstrap), topic, group_id=None)
    await consumer.start()
    try:
        out: list[Any] = []
        while True:
            batches = await consumer.getmany(timeout_ms=3_000)
            if not batches:
                return out
            out += [m for ms in batches.values() for m in ms]
    finally:
        await consumer.stop()


async def test_boundary_messages_are_dead_lettered_and_the_sink_and_exports_go_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    topic, group, dlq = f"it.fuzz.{tag}", f"it.fuzz.group.{tag}", f"it.fuzz.dlq.{tag}"
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    await ensure_topic(kafka, topic, PARTITIONS)
    await ensure_topic(kafka, dlq, 1)
    t0 = _t0()
    good = synthetic_events(600, t0, WINDOW_MS)
    after = t0 + WINDOW_MS + 60_000  # the boundary messages come after the regular window
    accepted = accepted_boundaries(after)
    fuzz: list[bytes | None] = [
        *refused_boundaries(after),
        *random_messages(random.Random(SEED), 300, after + 1000),
    ]
    expected = [verdict(v) for v in fuzz]
    assert sum(v is None for v in expected) >= 30, "the random messages should be valid about half the time"
    assert sum(v is not None for v in expected) >= 100

    await produce_events(kafka_bootstrap, topic, good[:300])
    positions = await produce(kafka_bootstrap, topic, [(v, i % PARTITIONS) for i, v in enumerate(fuzz)])
    await produce_events(kafka_bootstrap, topic, [*accepted, *good[300:]])
    async with running_sink_loop(kafka_bootstrap, topic, group, dlq, segment_dir=tmp_path) as (sink, task):
        await wait_committed(kafka_bootstrap, group, topic)
        assert not task.done(), "the sink loop ended"
        refused = [(pos, v, why) for pos, v, why in zip(positions, fuzz, expected, strict=True) if why]
        assert sink.metrics.value("sink_deadletter_total") >= len(refused)

    letters = await dead_letters(kafka_bootstrap, dlq)
    by_source: dict[tuple[int, int], tuple[bytes | None, str]] = {}
    for m in letters:
        headers = dict(m.headers)
        assert headers["kubetape.source.topic"] == topic.encode()
        source = (int(headers["kubetape.source.partition"]), int(headers["kubetape.source.offset"]))
        letter = (m.value, headers["kubetape.error"].decode())
        # dead letters are sent before the offsets are committed: a rebalance may send one again
        assert by_source.setdefault(source, letter) == letter, f"{source} was dead-lettered differently"
        by_source[source] = letter
    assert set(by_source) == {pos for pos, _, _ in refused}, "exactly the refused messages are dead letters"
    for (partition, offset), value, why in refused:
        dead_value, error = by_source[(partition, offset)]
        assert dead_value == value
        assert error.startswith(f"topic {topic} p{partition} @{offset}: "), error
        assert why[:200] in error, (why, error)  # the reason, as the ingest rules word it

    # The regular window exports exactly as it would have without any of this.
    assert export_bytes(tmp_path, t0, t0 + WINDOW_MS) == direct_trace(good, t0, t0 + WINDOW_MS)
    # The accepted boundary messages export like a direct trace of them (random ones included).
    random_accepted = [
        WireProbe().head(v).to_event() for v, why in zip(fuzz, expected, strict=True) if v and not why
    ]
    end = after + 5_000
    before_end = [e for e in [*good, *accepted, *random_accepted] if e.ts_ms < end]
    assert export_bytes(tmp_path, after, end) == direct_trace(before_end, after, end)
    assert export_bytes(tmp_path, TS_MAX_MS - 1000, TS_MAX_MS + 1)  # the last millisecond is exportable


async def test_a_refused_message_at_the_size_limit_is_dead_lettered_too(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A message as large as a producer may send: its dead letter (the same bytes plus the reason in
    headers) must not be the one message the sink cannot set aside."""
    tag = uuid.uuid4().hex[:8]
    topic, group, dlq = f"it.fuzz.big.{tag}", f"it.fuzz.big.group.{tag}", f"it.fuzz.big.dlq.{tag}"
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    await ensure_topic(kafka, topic, 1)
    await ensure_topic(kafka, dlq, 1)
    t0 = _t0()
    # as large as the producer's default request limit allows with its key and no headers
    blob = "y" * 1_048_350
    big = _wire(TS_MAX_MS + 1, "core/ConfigMap/fuzz/x", configmap("fuzz", "x", data={"blob": blob}))
    good = synthetic_events(50, t0, 60_000)
    positions = await produce(kafka_bootstrap, topic, [(big, 0)])
    await produce_events(kafka_bootstrap, topic, good)
    async with running_sink_loop(kafka_bootstrap, topic, group, dlq, segment_dir=tmp_path) as (sink, task):
        await wait_committed(kafka_bootstrap, group, topic, partitions=1, within=30)
        assert not task.done(), "the sink loop ended"
        assert sink.metrics.value("sink_deadletter_total") >= 1
    letters = await dead_letters(kafka_bootstrap, dlq)
    assert {int(dict(m.headers)["kubetape.source.offset"]) for m in letters} == {positions[0][1]}
    # set aside with its reason and size, without the value the broker would not take with the headers
    assert all(dict(m.headers)["kubetape.error"] for m in letters)
    assert all(int(dict(m.headers)["kubetape.value-omitted-bytes"]) > 1_000_000 for m in letters)
