"""Sink logic against in-memory fakes: store, catalog, compaction rules, the consume/write/commit loop,
crash recovery and export equivalence."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import pytest

from pipeline.formats.assemble import assemble_window
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import read_simkube_trace, simkube_compatibility_problems
from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.message import Message, PartitionBatch
from pipeline.model.errors import FormatError
from pipeline.model.events import Event
from pipeline.model.tracer_config import TracerConfig
from pipeline.sink.compactor import KEYFRAME_COST_FLOOR, CompactionSettings, PartitionCompactor
from pipeline.sink.settings import SinkSettings
from pipeline.sink.sink import Sink
from pipeline.sink.synthetic import applied, deleted, deployment, synthetic_events
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import (
    EXPORT_ZSTD_LEVEL,
    ExportFilters,
    ExportFormat,
    ExportRequest,
    export_window,
)
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.memory_store import MemorySegmentStore
from pipeline.store.segment_store import SegmentName, WriteFence, parse_segment_name, segment_name
from pipeline.store.state import ObjectState

T0 = 1_763_700_000_000  # a round minute, so window boundaries are easy to reason about
T0 -= T0 % 60_000


# ---- fakes ---------------------------------------------------------------------------------------
class PolledRecord(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] = ()


class FakeSource:
    """A one-member consumer group over in-memory partitions."""

    def __init__(self, partitions: dict[int, list[bytes]], cluster: str = "c1") -> None:
        self.log = partitions
        self.cluster = cluster
        self.log_start: dict[int, int] = {}  # offsets below were deleted by the topic's retention
        self.position: dict[int, int] = {}
        self.commits: dict[int, int] = {}
        self.dead: list[tuple[Message, str]] = []

    async def getmany(self, timeout_ms: int, max_records: int) -> list[PartitionBatch]:
        out: list[PartitionBatch] = []
        room = max_records
        for p, values in sorted(self.log.items()):
            start = max(self.position.setdefault(p, self.commits.get(p, 0)), self.log_start.get(p, 0))
            chunk = values[start : start + room]
            if chunk:
                out.append(
                    PartitionBatch.of(p, [PolledRecord(start + i, b"k", v, 0) for i, v in enumerate(chunk)])
                )
            room -= len(chunk)
            self.position[p] = start + len(chunk)
        if not out:
            await asyncio.sleep(timeout_ms / 1000 / 50)
        return out

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        self.commits.update(offsets)
        return True

    async def committed(self, partition: int) -> int | None:
        return self.commits.get(partition)

    async def seek(self, partition: int, offset: int) -> None:
        self.position[partition] = offset

    async def dead_letter(self, message: Message, error: str) -> None:
        self.dead.append((message, error))

    async def identity(self) -> str | None:
        return f"kafka:{self.cluster}/kubetape.events"

    async def offset_bounds(self, partition: int) -> tuple[int, int]:
        return self.log_start.get(partition, 0), len(self.log.get(partition, []))

    def restart(self) -> None:
        """A crash: the next consumer resumes from the committed offsets."""
        self.position = {}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def partitioned(events: list[Event], partitions: int = 3) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for e in events:
        out[sum(e.key.encode()) % partitions].append(encode_event(e))
    return out


SETTINGS = SinkSettings(CompactionSettings(window_ms=60_000, idle_close_s=5.0, keyframe_every=3), 500, 10)


async def drain(sink: Sink, source: FakeSource, rounds: int = 1000) -> None:
    for _ in range(rounds):
        if await sink.run_round() == 0:
            break
    await sink.flush_all()


# ---- store ----------------------------------------------------------------------------------------
def test_segment_names_are_deterministic_and_parse_back() -> None:
    assert segment_name(3, 123456) == "p0003-000000000123456.kseg"
    assert parse_segment_name("p0003-000000000123456.kseg") == (3, 123456)
    assert parse_segment_name(".p0003-000000000123456.kseg.x.tmp") is None


def test_local_store_put_is_atomic_and_lists_only_segments(tmp_path: Path) -> None:
    store = LocalSegmentStore(tmp_path)
    name = segment_name(0, 0)
    store.put(name, b"one")
    store.put(name, b"two")  # a rewrite replaces the file under the same name
    (tmp_path / f".{name}.abc.tmp").write_bytes(b"half-written")
    (tmp_path / "notes.txt").write_text("not a segment")
    assert [s.name for s in store.list()] == [name]
    assert store.get(name) == b"two"
    assert store.remove_stale_temp_files() == 1
    store.delete(name)
    store.delete(name)  # deleting twice is fine
    assert store.list() == []
    with pytest.raises(FormatError, match=r"p0000-000000000000000\.kseg"):
        store.get(name)


# ---- compaction rules -----------------------------------------------------------------------------
def test_windows_rotate_on_event_time_and_late_events_stay_in_the_open_segment() -> None:
    c = PartitionCompactor(0, CompactionSettings(window_ms=60_000))
    d = deployment("ns", "a", 1)
    assert c.add(0, applied(T0 + 1_000, d, 1), 0.0) == []
    assert c.add(1, applied(T0 + 500, deployment("ns", "a", 2), 2), 0.0) == []  # late, same window
    closed = c.add(2, applied(T0 + 61_000, deployment("ns", "a", 3), 3), 0.0)
    assert len(closed) == 1
    seg = closed[0].segment
    assert closed[0].name == segment_name(0, 0)
    assert [e.ts_ms for e in seg.events] == [T0 + 500, T0 + 1_000]  # sorted by event time
    assert (seg.header.start_ms, seg.header.end_ms) == (T0, T0 + 60_000)
    assert seg.header.partitions[0].first_offset == 0
    assert seg.header.partitions[0].last_offset == 1
    assert c.committable_offset == 2  # the open segment starts at offset 2


def test_redeliveries_and_relists_are_not_stored_twice() -> None:
    c = PartitionCompactor(0, CompactionSettings())
    e = applied(T0, deployment("ns", "a", 1), 7)
    relist = applied(T0 + 30_000, deployment("ns", "a", 1), 7)  # re-listed later, same resourceVersion
    c.add(0, e, 0.0)
    c.add(0, e, 0.0)  # redelivered offset
    c.add(1, relist, 0.0)
    c.add(2, deleted(T0 + 40_000, deployment("ns", "a", 1), 8), 0.0)
    c.add(3, deleted(T0 + 40_000, deployment("ns", "a", 1), 8), 0.0)  # delete re-published
    closed = c.flush()
    assert closed is not None
    assert len(closed.segment.events) == 2
    assert closed.segment.header.partitions[0].last_offset == 3  # duplicates' offsets are covered
    assert (c.duplicates, c.redelivered) == (2, 1)
    assert c.committable_offset == 4


def test_an_idle_partition_closes_its_segment_by_wall_clock() -> None:
    c = PartitionCompactor(0, CompactionSettings(idle_close_s=5.0))
    c.add(0, applied(T0, deployment("ns", "a", 1), 1), now=100.0)
    assert c.close_if_idle(104.9) is None
    closed = c.close_if_idle(105.0)
    assert closed is not None
    assert c.committable_offset == 1
    assert not c.has_open_segment


def test_keyframes_hold_the_state_before_the_segment() -> None:
    c = PartitionCompactor(0, CompactionSettings(window_ms=1_000, keyframe_every=2))
    segments = []
    for i in range(5):
        segments += c.add(i, applied(T0 + i * 1_000, deployment("ns", f"d{i}", 1), i + 1), 0.0)
    assert [s.segment.keyframe is not None for s in segments] == [True, False, True, False]
    kf = segments[2].segment.keyframe
    assert kf is not None
    # the state after offset 1, at event time T: one past the latest event in it (not the window start)
    assert kf.at_ms == T0 + 1_001
    header = segments[2].segment.header
    assert (header.keyframe_offset, header.keyframe_time) == (1, T0 + 1_001)
    assert sorted(kf.objects) == ["apps/Deployment/ns/d0", "apps/Deployment/ns/d1"]


@pytest.mark.parametrize("cost", [1.0, None])
def test_a_keyframe_comes_once_the_events_since_the_last_weigh_its_cost(cost: float | None) -> None:
    """One object of ~300 KB written again in every segment: by count alone (every 1,000 segments)
    only the first segment has a keyframe; by cost, one comes once the events stored since the last
    keyframe weigh as much as it or the 1 MiB floor (4 events of ~300 KB)."""
    c = PartitionCompactor(0, CompactionSettings(window_ms=1_000, keyframe_every=1_000, keyframe_cost=cost))
    segments = []
    for i in range(10):
        obj = deployment("ns", "big", 1, labels={"app": "big", "v": str(i)})
        obj["metadata"]["annotations"] = {"note": "x" * 300_000}
        segments += c.add(i, applied(T0 + i * 1_000, obj, i + 1), 0.0)
    keyframes = [i for i, s in enumerate(segments) if s.wire.header.keyframe_at_ms is not None]
    assert keyframes == ([0, 4, 8] if cost else [0])
    assert len(segments[3].wire.events) * 4 >= KEYFRAME_COST_FLOOR  # what made segment 4 due


def test_catalog_answers_coverage_from_headers_and_reports_corrupt_files() -> None:
    store = MemorySegmentStore()
    c = PartitionCompactor(0, CompactionSettings(window_ms=60_000))
    closed = []
    for i in range(4):
        closed += c.add(i, applied(T0 + i * 60_000, deployment("ns", "a", i + 1), i + 1), 0.0)
    for s in closed:
        store.put(s.name, encode_segment(s.segment))
    store.put(SegmentName("p0001-000000000000000.kseg"), b"KTSG garbage")
    catalog = SegmentCatalog(store)
    catalog.refresh()
    assert [e.first_offset for e in catalog.covering(T0 + 60_000, T0 + 120_000)] == [1]
    assert [e.first_offset for e in catalog.covering(T0, T0 + 180_000)] == [0, 1, 2]
    assert "p0001-000000000000000.kseg" in catalog.corrupt


# ---- the loop -------------------------------------------------------------------------------------
def direct_trace_bytes(events: list[Event], start_ms: int, end_ms: int) -> bytes:
    """The trace of the window built straight from the events (deduplicated the same way)."""
    state = ObjectState()
    unique = [e for e in events if state.offer(e)]
    return encode_segment(
        assemble_window(None, unique, start_ms, end_ms, config=TracerConfig.default(), suppress_owned=True),
        EXPORT_ZSTD_LEVEL,
    )


async def test_events_to_segments_to_export_equals_the_direct_trace() -> None:
    events = synthetic_events(3_000, T0, 600_000)
    source = FakeSource(partitioned(events + events[:500]))  # a re-published prefix: duplicates
    store = MemorySegmentStore()
    sink = Sink(source, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0, 1, 2])
    await drain(sink, source)
    assert source.commits == {p: len(v) for p, v in source.log.items()}
    catalog = SegmentCatalog(store)
    for start, end in [(T0, T0 + 600_000), (T0 + 200_000, T0 + 350_000)]:
        exported = export_window(catalog, ExportRequest(start, end))
        assert exported.data == direct_trace_bytes(events, start, end)
    assert sink.metrics.value("sink_duplicates_total") >= 1
    assert "kubetape_sink_events_stored_total 3000" in sink.metrics.render()


async def test_a_crash_before_commit_rewrites_the_same_segments_and_exports_identically() -> None:
    events = synthetic_events(2_000, T0, 400_000)
    reference_store = MemorySegmentStore()
    ref_source = FakeSource(partitioned(events))
    ref = Sink(ref_source, reference_store, SETTINGS, clock=Clock())
    await ref.on_assigned([0, 1, 2])
    await drain(ref, ref_source)

    store = MemorySegmentStore()
    source = FakeSource(partitioned(events))
    for crash_after in (3, 5, 2):
        sink = Sink(source, store, SETTINGS, clock=Clock())
        await sink.on_assigned([0, 1, 2])
        for _ in range(crash_after):
            await sink.run_round()
        # crash: the segments written are durable, the open ones and any later commit are lost
        source.commits = {p: max(0, o - 7) for p, o in source.commits.items()}  # commits lagging
        source.restart()
    sink = Sink(source, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0, 1, 2])
    await drain(sink, source)
    request = ExportRequest(T0, T0 + 400_000)
    assert (
        export_window(SegmentCatalog(store), request).data
        == export_window(SegmentCatalog(reference_store), request).data
    )
    # same names, same segments; only the writer's fencing epoch differs (one per assignment)
    assert store.files.keys() == reference_store.files.keys()
    for name, data in store.files.items():
        assert _without_epoch(data) == _without_epoch(reference_store.files[name]), name


def _without_epoch(data: bytes) -> bytes:
    import dataclasses

    seg = decode_segment(data)
    assert seg.header.writer_epoch is not None
    return encode_segment(dataclasses.replace(seg, header=dataclasses.replace(seg.header, writer_epoch=None)))


async def test_undecodable_messages_go_to_the_dead_letter_topic_and_the_sink_carries_on() -> None:
    events = synthetic_events(50, T0, 10_000)
    log = {
        0: [encode_event(e) for e in events[:20]] + [b"\x93garbage"] + [encode_event(e) for e in events[20:]]
    }
    source = FakeSource(log)
    store = MemorySegmentStore()
    sink = Sink(source, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0])
    await drain(sink, source)
    assert [(m.partition, m.offset) for m, _ in source.dead] == [(0, 20)]
    assert "p0 @20" in source.dead[0][1]
    assert sink.metrics.value("sink_deadletter_total") == 1
    assert sink.metrics.value("sink_events_stored_total") == 50
    assert source.commits == {0: 51}


async def test_a_sink_rereading_below_the_committed_offset_does_not_dead_letter_again() -> None:
    # a wiped segment store: the sink re-reads the history the group had committed long ago, and the
    # refused message in it was set aside then
    events = synthetic_events(50, T0, 10_000)
    log = {
        0: [encode_event(e) for e in events[:20]] + [b"\x93garbage"] + [encode_event(e) for e in events[20:]]
    }
    source = FakeSource(log)
    first = Sink(source, MemorySegmentStore(), SETTINGS, clock=Clock())
    await first.on_assigned([0])
    await drain(first, source)
    await first.on_revoked([0])
    assert source.commits == {0: 51}
    wiped = MemorySegmentStore()
    second = Sink(source, wiped, SETTINGS, clock=Clock())
    await second.on_assigned([0])
    await drain(second, source)
    assert [(m.partition, m.offset) for m, _ in source.dead] == [(0, 20)]
    assert second.metrics.value("sink_deadletter_total") == 0
    assert second.metrics.value("sink_events_stored_total") == 50  # the history is in the new store


async def test_export_skips_a_corrupt_segment_with_a_warning_naming_it() -> None:
    events = synthetic_events(600, T0, 300_000)
    source = FakeSource(partitioned(events, 2))
    store = MemorySegmentStore()
    sink = Sink(source, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0, 1])
    await drain(sink, source)
    victim = store.list()[-1].name
    store.files[victim] = store.files[victim][:-10] + b"0123456789"
    warnings: list[str] = []
    result = export_window(SegmentCatalog(store), ExportRequest(T0, T0 + 300_000), warnings.append)
    assert len(warnings) == 1
    assert victim in warnings[0]
    assert result.events > 0


async def test_simkube_export_is_readable_by_simkube_rules_and_filters_apply() -> None:
    events = synthetic_events(400, T0, 120_000, namespaces=3)
    source = FakeSource(partitioned(events))
    store = MemorySegmentStore()
    sink = Sink(source, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0, 1, 2])
    await drain(sink, source)
    request = ExportRequest(
        T0 + 30_000, T0 + 120_000, ExportFormat.SIMKUBE, ExportFilters(excluded_namespaces=("ns-1",))
    )
    result = export_window(SegmentCatalog(store), request)
    trace = read_simkube_trace(result.data, "export")
    assert simkube_compatibility_problems(trace) == []
    assert trace.events[0].ts == (T0 + 30_000) // 1000
    names = {o["metadata"]["namespace"] for ev in trace.events for o in ev.applied_objs}
    assert names
    assert "ns-1" not in names
    assert all(not k.startswith("ns-1/") for by_name in trace.index.values() for k in by_name)


def test_segments_round_trip_through_the_codec() -> None:
    c = PartitionCompactor(2, CompactionSettings())
    c.add(0, applied(T0, deployment("ns", "a", 1), 1), 0.0)
    closed = c.flush()
    assert closed is not None
    assert decode_segment(encode_segment(closed.segment)).events == closed.segment.events


class SlowFirstPutStore(MemorySegmentStore):
    """Delays every partition's first segment, as a slow disk would: later ones must still wait."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def put(self, name: SegmentName, data: bytes, fence: WriteFence | None = None) -> None:
        if name.endswith("-000000000000000.kseg"):
            time.sleep(0.05)
        super().put(name, data, fence)
        self.order.append(name)


async def test_segments_of_one_partition_become_durable_in_offset_order() -> None:
    events = synthetic_events(1_500, T0, 600_000)
    source = FakeSource(partitioned(events, 2))
    store = SlowFirstPutStore()
    sink = Sink(source, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0, 1])
    await drain(sink, source)
    for p in ("p0000", "p0001"):
        names = [n for n in store.order if n.startswith(p)]
        assert len(names) > 3
        assert names == sorted(names)  # a crash can never leave a later segment without an earlier one


def test_overlapping_segments_of_two_members_export_each_event_once() -> None:
    """A member evicted from the group may still write a segment over offsets another member wrote
    with other boundaries; export takes each event once (and skips the per-event check only where a
    segment continues the previous one offset for offset)."""
    events = [applied(T0 + i * 1_000, deployment("ns", f"d{i}", 1), 100 + i) for i in range(20)]
    store = MemorySegmentStore()
    settings = CompactionSettings(window_ms=60_000, keyframe_every=1_000)
    first = PartitionCompactor(0, settings)
    for offset in range(12):
        first.add(offset, events[offset], 0.0)
    evicted = PartitionCompactor(0, settings, next_offset=6, segments_since_keyframe=0)  # restored earlier
    for offset in range(6, 20):
        evicted.add(offset, events[offset], 0.0)
    for compactor in (first, evicted):
        closed = compactor.flush()
        assert closed is not None
        store.put(closed.name, closed.encode())
    assert len(store.files) == 2
    exported = export_window(SegmentCatalog(store), ExportRequest(T0, T0 + 60_000))
    assert exported.events == 20
    assert exported.data == direct_trace_bytes(events, T0, T0 + 60_000)
