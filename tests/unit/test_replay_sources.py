"""``replay --follow``'s source keeps bounded memory however long it follows: a window of record digests,
a fixed-size sample of pod durations per owner, a bounded set of owners; and it still skips
redeliveries and learns lifetimes as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from pipeline.formats.assemble import assemble_window
from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.message import Message
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey
from pipeline.model.tracer_config import TracerConfig
from pipeline.replay import sources
from pipeline.replay.clock import schedule
from pipeline.replay.clock.schedule import ScheduleStats
from pipeline.replay.plan import plan_replay
from pipeline.replay.report import report as report_module
from pipeline.replay.report.report import ReplayReport
from pipeline.replay.sources import FollowSource, _Decoder

T0 = 1_767_225_600_000


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}
        },
    }


def job_key(name: str) -> ObjectKey:
    return ObjectKey(f"batch/Job/ns/{name}")


def lifecycle(owner: str, pod: int, duration_ms: int) -> Event:
    return Event.pod_lifecycle(
        T0 + pod,
        ObjectKey(f"core/Pod/ns/{owner}-{pod}"),
        owner_key=job_key(owner),
        pod_spec_hash=1,
        start_ms=T0 + pod,
        end_ms=T0 + pod + duration_ms,
    )


def records(events: list[Event], *, repeat_each: int = 1) -> list[Message]:
    out = []
    for i, e in enumerate(events):
        out += [Message(0, i, e.ts_ms, None, encode_event(e))] * repeat_each
    return out


def follow_over(batches: list[list[Message]]) -> FollowSource:
    async def tail(_settings: KafkaSettings, _topic: str, _from_ms: int) -> AsyncIterator[list[Message]]:
        for batch in batches:
            yield batch

    source = FollowSource(KafkaSettings("unused:9092"), "t", 1000, now_ms=lambda: T0, tail=tail)
    config = TracerConfig.default()
    source.plan = plan_replay(assemble_window(None, [], T0, T0 + 1, config=config), 1.0)
    return source


async def drain(source: FollowSource) -> list[Event]:
    return [step.payload async for step in source.steps()]


def test_redeliveries_are_skipped_within_a_bounded_window() -> None:
    decoder = _Decoder("t", lambda _: None, window=10)
    events = [Event.applied(T0 + i, job_key(f"j{i}"), job(f"j{i}"), 1) for i in range(25)]
    assert len(decoder.decode(records(events, repeat_each=2))) == 25, "each redelivery skipped once"
    assert len(decoder._seen) == 10
    # a redelivery of a record from long ago (outside the window) is decoded again: the documented cost
    assert len(decoder.decode(records(events[:1]))) == 1
    assert len(decoder.decode(records(events[-5:]))) == 0


async def test_lifetimes_are_the_exact_median_while_an_owner_has_few_pods() -> None:
    durations = [4000, 1000, 3000, 2000, 10_000]
    source = follow_over([records([Event.applied(T0, job_key("a"), job("a"), 1)])])
    source._self_ending[job_key("a")] = None
    await drain(source)
    for i, d in enumerate(durations):
        source._learn(lifecycle("a", i, d))
    assert source.plan is not None
    assert source.plan.lifetimes_ms[job_key("a")] == 3000.0


async def test_durations_and_owners_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "MAX_OWNERS", 20)
    owners = [f"j{i}" for i in range(100)]
    events: list[Event] = []
    for n, owner in enumerate(owners):
        events.append(Event.applied(T0 + n, job_key(owner), job(owner), 1))
        events += [lifecycle(owner, p, 1000 + (p % 7) * 100) for p in range(3)]
    many = [lifecycle("busy", p, 5000 + (p % 11)) for p in range(2000)]
    source = follow_over(
        [records(events), records([Event.applied(T0, job_key("busy"), job("busy"), 1), *many])]
    )
    steps = await drain(source)
    assert len(steps) == 101, "every object event is still a step"
    figures = source.memory_figures()
    assert figures["owners_with_durations"] <= 20
    assert figures["self_ending_owners"] <= 20
    assert figures["durations"] <= 20 * sources.DURATION_SAMPLES
    assert source.plan is not None
    assert 5000 <= source.plan.lifetimes_ms[job_key("busy")] <= 5010, "the sample's median is representative"
    assert figures["lifetimes"] <= 20


def test_lateness_is_a_bounded_sample_with_exact_count_and_max(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule, "LATENESS_SAMPLES", 1000)
    stats = ScheduleStats()
    for i in range(50_000):
        stats.add_lateness(float(i % 100))  # uniform over 0..99
    stats.add_lateness(5000.0)  # one outlier: the maximum is exact, not sampled
    assert len(stats.lateness_ms) == 1000
    assert stats.lateness_count == 50_001
    assert stats.lateness_max_ms == 5000.0
    p50 = stats.lateness_percentile(0.5)
    assert p50 is not None
    assert 40 <= p50 <= 60, "the sample's median is representative"
    report = ReplayReport("r", "t", 1.0, lateness_ms=list(stats.lateness_ms))
    report.lateness_count, report.lateness_max_ms = stats.lateness_count, stats.lateness_max_ms
    lateness = report.to_json()["lateness_ms"]
    assert (lateness["count"], lateness["max"]) == (50_001, 5000.0)


def test_short_runs_keep_every_lateness_value() -> None:
    stats = ScheduleStats()
    for v in (3.0, 1.0, 2.0):
        stats.add_lateness(v)
    assert stats.lateness_ms == [3.0, 1.0, 2.0]
    report = ReplayReport("r", "t", 1.0, lateness_ms=[3.0, 1.0, 2.0])  # as before: count from the list
    assert report.to_json()["lateness_ms"]["count"] == 3


def test_samples_of_the_replay_are_thinned_not_grown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_module, "MAX_SAMPLES", 100)
    report = ReplayReport("r", "t", 1.0)
    for i in range(10_000):
        report.add_sample(float(i * 1000), i % 5, 1, {"apps/Deployment/ns/d": i % 5})
    assert len(report.owner_samples) <= 101
    assert len(report.replay_timeline) == len(report.owner_samples)
    assert report.owner_samples[0].trace_ms == 0.0, "the whole run is still covered"
    assert report.owner_samples[-1].trace_ms == 9_999_000.0, "the last (final) sample is kept"
    times = [s.trace_ms for s in report.owner_samples]
    assert times == sorted(times)
