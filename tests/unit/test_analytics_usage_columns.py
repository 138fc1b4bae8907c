"""The timeline's usage columns: per owner, the CPU and memory its pods used and how many the Metrics API
reported, over time, from ``kubetape.usage`` (the timeline consumer's usage feed) or a trace's usage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.analytics.builtin_timeline import TimelineConsumer
from pipeline.analytics.consumer import BatchContext, group_id_for
from pipeline.analytics.runner import UsageRunner, run_offline, usage_group_id
from pipeline.analytics.timeline import TimelineFolder, fold_events
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, TimelineRow
from pipeline.analytics.timeline_store import read_timeline, write_timeline
from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.formats.wire.usage import encode_usage
from pipeline.io.kafka.message import Message
from pipeline.io.parquet import write_columns
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey, key_of
from pipeline.model.usage import ContainerUsage, UsageSample
from services.cli import main

T0 = 1_800_000_000_000
WEB = ObjectKey("apps/Deployment/shop/web")
API = ObjectKey("apps/Deployment/shop/api")


def used(
    at_s: float, owner: ObjectKey = WEB, *, cpu: int, memory: int = 0, pods: int = 1, template: str = "a"
) -> UsageSample:
    containers = (ContainerUsage("app", cpu, memory),) if pods else ()
    return UsageSample(T0 + round(at_s * 1000), owner, template, pods, containers)


def gap(at_s: float, owner: ObjectKey = WEB, template: str = "a") -> UsageSample:
    return UsageSample(T0 + round(at_s * 1000), owner, template, 0, (), gap=True)


def node_at(at_s: float) -> Event:
    """An event that moves the fold's clock (a node appearing): seconds are complete up to it."""
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n-{round(at_s)}"}}
    return Event.applied(T0 + round(at_s * 1000), key_of(obj), obj, 0)


def of(rows: list[TimelineRow], owner: str) -> dict[int, TimelineRow]:
    return {row.second: row for row in rows if row.owner == owner}


def usage_columns(row: TimelineRow | None) -> tuple[float | None, float | None, int | None]:
    assert row is not None
    return row.cpu_used_m, row.memory_used_bytes, row.usage_pods


def test_an_owner_row_carries_its_last_load_from_the_sample_on_summed_over_its_templates() -> None:
    samples = [
        used(0, cpu=300, memory=1_000, pods=2),
        used(15, cpu=600, memory=2_000, pods=3),
        used(15, template="b", cpu=100, memory=500, pods=1),  # mid-rollout: a second template
        used(15, API, cpu=50, memory=10),
    ]
    rows = fold_events([node_at(0)], usage=samples, end_ms=T0 + 20_000).rows
    web = of(rows, WEB)
    assert usage_columns(web.get(0)) == (300.0, 1_000.0, 2)
    assert usage_columns(web.get(14)) == (300.0, 1_000.0, 2)  # held between samples, not interpolated
    assert usage_columns(web.get(15)) == (700.0, 2_500.0, 4)
    assert usage_columns(of(rows, CLUSTER_OWNER).get(15)) == (750.0, 2_510.0, 5)
    # before its first sample an owner's load is not known: no row (it has no pods either)
    assert 0 not in of(rows, API)


def test_a_gap_makes_the_load_unknown_until_the_next_sample_and_zero_pods_end_it() -> None:
    samples = [
        used(0, cpu=300, pods=2),
        used(0, API, cpu=50),
        gap(5),
        used(10, cpu=200, pods=2),
        used(20, cpu=0, pods=0),  # its pods are gone: its load ended
    ]
    rows = fold_events([node_at(0)], usage=samples, end_ms=T0 + 25_000).rows
    web, everyone = of(rows, WEB), of(rows, CLUSTER_OWNER)
    assert usage_columns(web[5]) == (None, None, None)
    assert usage_columns(everyone[5]) == (None, None, None)  # a partial sum would mislead
    assert usage_columns(web[10]) == (200.0, 0.0, 2)
    assert usage_columns(everyone[10]) == (250.0, 0.0, 3)
    assert 20 not in web  # no pods, no load: the owner has no row any more
    assert usage_columns(everyone[20]) == (50.0, 0.0, 1)


def test_a_sample_seen_twice_sets_the_same_load_and_rows_without_usage_read_none() -> None:
    twice = [used(0, cpu=300, pods=2), used(0, cpu=300, pods=2)]
    rows = fold_events([node_at(0)], usage=twice, end_ms=T0 + 2_000).rows
    assert usage_columns(of(rows, WEB)[1]) == (300.0, 0.0, 2)
    bare = fold_events([node_at(0)], end_ms=T0 + 2_000).rows
    assert usage_columns(of(bare, CLUSTER_OWNER)[1]) == (None, None, None)


def test_the_load_survives_a_checkpoint_of_the_fold() -> None:
    folder = TimelineFolder()
    folder.add(node_at(0))
    folder.add_usage(used(0, cpu=300, pods=2))
    folder.add_usage(gap(3, template="b"))
    first = folder.advance(T0 + 2_000)
    resumed = TimelineFolder.from_state(json.loads(json.dumps(folder.to_state())))
    resumed.add(node_at(6))
    later = resumed.advance(T0 + 6_000)
    assert usage_columns(of(first, WEB)[1]) == (300.0, 0.0, 2)
    assert usage_columns(of(later, WEB)[2]) == (300.0, 0.0, 2)
    assert usage_columns(of(later, WEB)[3]) == (None, None, None)  # template b's load is unknown


def test_a_live_fold_sets_aside_a_sample_dated_beyond_its_horizon() -> None:
    folder = TimelineFolder(clock_ms=lambda: T0, horizon_ms=60_000)
    folder.add_usage(used(3_600, cpu=1))
    assert folder.future_dated == 1
    assert folder.to_state()["queue"] == []


def test_usage_columns_round_trip_in_parquet_and_older_files_read_with_none(tmp_path: Path) -> None:
    rows = [
        TimelineRow(0, WEB, 0, 2, 0, 0, 500.0, 1e6, 1, 1, 2, 300.0, 1_000.0, 2),
        TimelineRow(0, CLUSTER_OWNER, 0, 2, 0, 0, 500.0, 1e6, 1, 1, 2),
    ]
    write_timeline(tmp_path / "t.parquet", rows)
    assert read_timeline(tmp_path / "t.parquet") == rows
    v2 = {
        name: [0]
        if name in {"second", "pending", "running", "succeeded", "failed", "nodes", "nodes_used", "desired"}
        else [0.0]
        for name in (
            "second",
            "pending",
            "running",
            "succeeded",
            "failed",
            "cpu_requested_m",
            "memory_requested_bytes",
            "nodes",
            "nodes_used",
            "desired",
        )
    }
    types = {name: "int64" if isinstance(v[0], int) else "float64" for name, v in v2.items()}
    write_columns(
        tmp_path / "v2.parquet",
        {**v2, "owner": ["*"]},
        {**types, "owner": "string"},
        format_name="kubetape.timeline",
        version=2,
    )
    (old,) = read_timeline(tmp_path / "v2.parquet")
    assert usage_columns(old) == (None, None, None)


def test_the_timeline_consumer_takes_the_load_from_its_usage_feed_and_waits_for_a_usage_backlog(
    tmp_path: Path,
) -> None:
    consumer = TimelineConsumer(tmp_path / "out", lateness_ms=0, clock=lambda: (T0 + 60_000) / 1000)
    messages = [
        Message(0, i, s.ts_ms, WEB.encode(), encode_usage(s))
        for i, s in enumerate([used(0, cpu=300, pods=2), used(15, cpu=600, pods=3)])
    ]
    runner = UsageRunner(consumer, ListSource(messages[:1], lag=1))
    runner.add(messages[:1])
    consumer.on_batch([node_at(0), node_at(30)], BatchContext("memory", 0, 0))
    consumer.checkpoint()
    # the usage reader is behind (a message left): rows wait at its newest sample, not the events'
    assert consumer.rows == []
    runner.source = ListSource(messages[1:], lag=0)
    runner.add(messages[1:])
    consumer.checkpoint()
    web = of(consumer.rows, WEB)
    assert usage_columns(web[14]) == (300.0, 0.0, 2)
    assert usage_columns(web[29]) == (600.0, 0.0, 3)
    assert read_timeline(tmp_path / "out" / "timeline.parquet") == consumer.rows
    # an undecodable record is counted and skipped, the rest goes on
    runner.add([Message(0, 9, T0, WEB.encode(), b"\xc1")])
    assert runner.stats.undecodable == 1


def test_the_usage_feed_has_a_group_of_its_own_beside_the_timelines() -> None:
    assert usage_group_id(group_id_for("timeline")) == "kubetape-analytics-timeline.usage"


def test_analytics_over_a_trace_file_fills_the_usage_columns_from_its_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [node_at(0), node_at(20)]
    samples = [used(0, cpu=300, memory=1_000, pods=2), gap(10)]
    trace = build_segment(events, start_ms=T0, end_ms=T0 + 21_000, usage=samples, kind=SegmentKind.TRACE)
    path = tmp_path / "t.kubetape"
    path.write_bytes(encode_segment(trace))
    out = tmp_path / "out"
    assert main(["analytics", "run", "timeline", "--trace", str(path), "--out", str(out)]) == 0
    capsys.readouterr()
    web = of(read_timeline(out / "timeline.parquet"), WEB)
    assert usage_columns(web[9]) == (300.0, 1_000.0, 2)
    assert usage_columns(web[10]) == (None, None, None)


class ListSource:
    """The usage runner's source in a unit test: a list and a lag."""

    def __init__(self, messages: list[Message], lag: int) -> None:
        self.messages = messages
        self._lag = lag

    @property
    def description(self) -> str:
        return "memory:usage"

    def lag(self) -> int | None:
        return self._lag

    async def fetch(self, timeout_ms: int, max_records: int) -> list[Message]:
        del timeout_ms, max_records
        out, self.messages = self.messages, []
        return out

    def finished(self) -> bool:
        return not self.messages

    async def commit(self, next_offsets: object) -> None:
        del next_offsets


def test_run_offline_leaves_usage_to_the_caller(tmp_path: Path) -> None:
    consumer = TimelineConsumer(tmp_path / "o", final=True)
    consumer.on_usage([used(0, cpu=5)], BatchContext("t", None, 0))
    run_offline(consumer, [node_at(0), node_at(2)], "t")
    assert usage_columns(of(consumer.rows, WEB)[1]) == (5.0, 0.0, 1)
