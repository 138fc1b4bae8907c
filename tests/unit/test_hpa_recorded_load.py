"""A replay with the simulated HPA deciding drives the load from the trace's own usage samples, whatever
source the trace comes from: a trace file, a window of a segment store (its ``usage/`` sub-store), a
range of the events topic (``kubetape.usage`` beside it). The topic is a fake here (the read is the
unit); the integration tests read real topics."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import PartitionRange
from pipeline.formats.wire.codec import encode_event
from pipeline.formats.wire.usage import encode_usage
from pipeline.io.kafka.message import Message
from pipeline.io.kafka.reader import TopicMissingError
from pipeline.io.kafka.settings import USAGE_TOPIC, KafkaSettings
from pipeline.replay import sources
from pipeline.replay.hpa.load import LoadModel
from pipeline.replay.run import (
    PodAutoscaling,
    ReplayRun,
    ReplaySpec,
    SegmentRange,
    TopicRange,
    TraceFile,
)
from pipeline.replay.settings import ReplaySettings
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.segment_store import segment_name
from pipeline.store.store_url import LocalLocation
from pipeline.store.usage_history import usage_store_location
from tests import hpa_recording as rec

SPAN_MS = 300_000
WRITES = [(30_000, 3), (45_000, 4)]


async def prepared_load(source: Any) -> Any:
    run = ReplayRun(ReplaySpec(source, ReplaySettings(speed=10.0), pod_autoscaling=PodAutoscaling()))
    await run.prepare()
    hpa = run.settings.pod_autoscaling
    assert hpa is not None
    return hpa.load


async def test_a_trace_file_drives_the_load_with_its_own_samples(tmp_path: Path) -> None:
    trace = rec.recording(WRITES, span_ms=SPAN_MS)
    with_load = build_segment(
        trace.events, start_ms=0, end_ms=SPAN_MS, kind=trace.header.kind, usage=rec.rising_load(SPAN_MS)
    )
    path = tmp_path / "recording.ktrace"
    path.write_bytes(encode_segment(with_load))
    load = await prepared_load(TraceFile(str(path)))
    assert load.samples_of(rec.OWNER) == 20, "every recorded reading, none handed over beside"
    assert load.at(rec.OWNER, 0).cpu_millicores == 2 * 20
    assert load.at(rec.OWNER, SPAN_MS - 1).cpu_millicores == 2 * 180


async def test_a_store_window_drives_the_load_from_the_usage_sub_store(tmp_path: Path) -> None:
    events = list(rec.recording(WRITES, span_ms=SPAN_MS).events)
    store = tmp_path / "store"
    segment = build_segment(
        events,
        start_ms=0,
        end_ms=SPAN_MS,
        partitions=[PartitionRange("kubetape.events", 0, 0, len(events) - 1)],
    )
    LocalSegmentStore(store).put(segment_name(0, 0), encode_segment(segment))
    samples = rec.rising_load(SPAN_MS)
    usage = build_segment(
        [],
        start_ms=0,
        end_ms=SPAN_MS,
        partitions=[PartitionRange(USAGE_TOPIC, 0, 0, len(samples) - 1)],
        usage=samples,
    )
    usage_store = usage_store_location(LocalLocation(store))
    assert isinstance(usage_store, LocalLocation)
    LocalSegmentStore(usage_store.path).put(segment_name(0, 0), encode_segment(usage))

    # a window that starts between two readings: the load at its start is folded in, as export does
    load = await prepared_load(SegmentRange(str(store), "20000", "200000"))
    timeline = load.owners[rec.OWNER]
    assert timeline.times_ms[0] == 20_000, "the reading before the window, moved to its start"
    assert timeline.loads[0].cpu_millicores == 2 * 20
    assert load.samples_of(rec.OWNER) == 1 + len(range(30_000, 200_000, 15_000))


class FakeTopics:
    """``read_topic_range`` over two topics in memory; a topic absent raises as a broker without it."""

    def __init__(self, topics: dict[str, Sequence[Message]]) -> None:
        self.topics = topics

    async def __call__(
        self, settings: KafkaSettings, topic: str, end_ms: int, **kwargs: Any
    ) -> list[Message]:
        if topic not in self.topics:
            raise TopicMissingError(f"topic {topic!r} does not exist")
        return [m for m in self.topics[topic] if m.timestamp_ms < end_ms]


def event_messages() -> list[Message]:
    events = rec.recording(WRITES, span_ms=SPAN_MS).events
    return [Message(0, i, e.ts_ms, None, encode_event(e)) for i, e in enumerate(events)]


async def test_a_topic_range_drives_the_load_from_the_usage_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    usage = [Message(0, i, s.ts_ms, None, encode_usage(s)) for i, s in enumerate(rec.rising_load(SPAN_MS))]
    usage.insert(3, Message(0, 99, 45_000, None, b"\xc1 not msgpack"))
    monkeypatch.setattr(
        sources, "read_topic_range", FakeTopics({"events": event_messages(), USAGE_TOPIC: usage})
    )
    warnings: list[str] = []
    trace = await sources.read_topic_trace(
        KafkaSettings("127.0.0.1:1"), "events", 0, SPAN_MS, warn=warnings.append
    )
    assert len(trace.usage) == 20, "every sample of the range, the malformed one set aside"
    [warning] = warnings
    assert "skipped a malformed usage sample" in warning
    assert f"topic {USAGE_TOPIC} p0 @99" in warning

    load = await prepared_load(TopicRange(KafkaSettings("127.0.0.1:1"), "events", "0", str(SPAN_MS)))
    assert load.samples_of(rec.OWNER) == 20


async def test_a_topic_range_without_a_usage_topic_replays_without_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sources, "read_topic_range", FakeTopics({"events": event_messages()}))
    warnings: list[str] = []
    trace = await sources.read_topic_trace(
        KafkaSettings("127.0.0.1:1"), "events", 0, SPAN_MS, warn=warnings.append
    )
    assert trace.usage == ()
    assert warnings == [], "nothing was recorded: nothing to warn about"
    assert len(trace.events) > 0


def test_the_hpa_replays_the_traces_samples_and_those_handed_over() -> None:
    from pipeline.replay.spec import recorded_usage

    samples = rec.rising_load(SPAN_MS)
    trace = build_segment([], start_ms=0, end_ms=SPAN_MS, usage=samples[:5])
    assert recorded_usage(trace, samples[5:]) == samples
    assert LoadModel.CONSERVE is PodAutoscaling().load_model
