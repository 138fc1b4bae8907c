"""The segment store is lossless by construction: each reproduction of issue 16 as a test.

Every test here failed on the code before the fix: keyframes stamped with their window's start,
a stale writer replacing a newer segment, the store and the group offset disagreeing, state growing
with history, a corrupt keyframe restarting the state from nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.formats.assemble import assemble_window
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.model.events import Event
from pipeline.model.tracer_config import TracerConfig
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.restore import restore_partition
from pipeline.sink.settings import SinkSettings
from pipeline.sink.sink import Sink
from pipeline.sink.source import TopicIdentityError
from pipeline.sink.synthetic import applied, deleted, deployment
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import EXPORT_ZSTD_LEVEL, ExportRequest, export_window
from pipeline.store.memory_store import MemorySegmentStore
from pipeline.store.retention import apply_retention
from pipeline.store.segment_store import SegmentName
from pipeline.store.state import ObjectState
from tests.unit.test_sink_compaction import SETTINGS, Clock, FakeSource, drain

T0 = 1_763_700_000_000
T0 -= T0 % 60_000


def direct(events: list[Event], start_ms: int, end_ms: int) -> bytes:
    """The window's trace straight from the events (deduplicated in offset order, as the sink does)."""
    state = ObjectState()
    unique = [e for e in events if state.offer(e)]
    trace = assemble_window(
        None, unique, start_ms, end_ms, config=TracerConfig.default(), suppress_owned=True
    )
    return encode_segment(trace, EXPORT_ZSTD_LEVEL)


def written(store: MemorySegmentStore, closed: object) -> None:
    for c in closed:  # type: ignore[attr-defined]
        store.put(c.name, c.encode(3))


# ---- defect 1: a keyframe is the state after an offset, not the state at its window's start ----------
def test_a_keyframe_segment_starting_mid_window_hides_no_event() -> None:
    """Nine one-event segments reach keyframe_every=10; X lives from T0+1 s to T0+12 s in a segment that
    closes idle; Y at T0+40 s opens the keyframe segment of the same window. [T0+5 s, T0+60 s) must
    show X alive at the start and deleted at 12 s."""
    store = MemorySegmentStore()
    compactor = PartitionCompactor(0, CompactionSettings(keyframe_every=10, idle_close_s=10.0))
    events: list[Event] = []
    offset = 0
    now = 0.0

    def add(e: Event) -> None:
        nonlocal offset
        events.append(e)
        written(store, compactor.add(offset, e, now))
        offset += 1

    for i in range(9):  # nine earlier minutes, one segment each
        add(applied(T0 - (9 - i) * 60_000, deployment("ns", f"old-{i}", 1), 10 + i))
    x = deployment("ns", "x", 1)
    add(applied(T0 + 1_000, x, 100))
    add(deleted(T0 + 12_000, x, 101))
    now = 20.0
    idle = compactor.close_if_idle(now)
    assert idle is not None
    written(store, [idle])
    add(applied(T0 + 40_000, deployment("ns", "y", 1), 102))
    last = compactor.flush()
    assert last is not None
    assert last.segment.keyframe is not None  # the tenth segment: the one the old plan started from
    written(store, [last])

    for start in (T0 + 5_000, T0 + 1_000, T0 + 12_000, T0 + 12_001, T0 + 39_000, T0):
        request = ExportRequest(start, T0 + 60_000)
        assert export_window(SegmentCatalog(store), request).data == direct(events, start, T0 + 60_000), start
    trace = decode_segment(export_window(SegmentCatalog(store), ExportRequest(T0 + 5_000, T0 + 60_000)).data)
    assert [(e.type.value, e.key, e.ts_ms - T0) for e in trace.events if "/x" in e.key] == [
        ("applied", "apps/Deployment/ns/x", 5_000),
        ("deleted", "apps/Deployment/ns/x", 12_000),
    ]


def test_late_events_after_a_keyframe_still_reach_the_state_at_the_start() -> None:
    """An event whose time is before the window start, written after the keyframe (late), is folded
    into the state at the start; one inside the window is in it."""
    store = MemorySegmentStore()
    compactor = PartitionCompactor(0, CompactionSettings(window_ms=10_000, keyframe_every=2))
    events = [
        applied(T0 + 1_000, deployment("ns", "a", 1), 1),
        applied(T0 + 25_000, deployment("ns", "b", 1), 2),
        applied(T0 + 3_000, deployment("ns", "late", 1), 3),  # late: stays in the open segment
        applied(T0 + 41_000, deployment("ns", "c", 1), 4),
        applied(T0 + 2_000, deployment("ns", "later", 1), 5),
        applied(T0 + 55_000, deployment("ns", "d", 1), 6),
    ]
    for offset, e in enumerate(events):
        written(store, compactor.add(offset, e, 0.0))
    last = compactor.flush()
    assert last is not None
    written(store, [last])
    for start in range(T0, T0 + 60_000, 2_500):
        for end in (start + 1, start + 7_000, T0 + 60_000):
            got = export_window(SegmentCatalog(store), ExportRequest(start, end)).data
            assert got == direct(events, start, end), (start - T0, end - T0)


# ---- defect 5: state and keyframes follow live objects --------------------------------------------
def test_an_hour_of_short_pods_leaves_state_and_keyframes_flat() -> None:
    from pipeline.model.keys import object_key

    settings = CompactionSettings(window_ms=60_000, keyframe_every=1)  # 10 min tombstone horizon
    compactor = PartitionCompactor(0, settings)
    owner = object_key("batch/v1", "Job", "ns", "churn")
    keyframe_sizes: list[int] = []
    offset = 0
    for minute in range(60):
        for i in range(50):
            name = f"job-{minute}-{i}"
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}}
            key = object_key("v1", "Pod", "ns", name)
            at = T0 + minute * 60_000 + i * 1_000
            uid = f"uid-{minute}-{i}"
            for e in (
                Event.applied(at, key, pod, 1, uid=uid, resource_version=str(offset + 1)),
                Event.pod_lifecycle(
                    at + 1, key, owner_key=owner, pod_spec_hash=7, start_ms=at, end_ms=at + 500, uid=uid
                ),
                Event.deleted(at + 600, key, pod, uid=uid, resource_version=str(offset + 2)),
            ):
                for c in compactor.add(offset, e, 0.0):
                    if c.wire.header.keyframe_at_ms is not None:
                        keyframe_sizes.append(len(c.encode(3)))
                offset += 1
    state = compactor.state
    # ten minutes of deletes and ended lifecycles are remembered, never the hour
    assert len(state.objects) == 0
    assert len(state.tombstones) <= 11 * 50
    assert len(state.lifecycles) <= 11 * 50
    assert max(keyframe_sizes[-20:]) <= 1.2 * min(keyframe_sizes[15:35])


# ---- defect 7: a corrupt keyframe neither empties the state nor loses retention's history ---------
def _chain_with_keyframes() -> tuple[MemorySegmentStore, list[Event]]:
    store = MemorySegmentStore()
    compactor = PartitionCompactor(0, CompactionSettings(window_ms=1_000, keyframe_every=3))
    events = [applied(T0 + i * 1_000, deployment("ns", f"d{i}", 1), 100 + i) for i in range(10)]
    for offset, e in enumerate(events):
        written(store, compactor.add(offset, e, 0.0))
    last = compactor.flush()
    assert last is not None
    written(store, [last])
    return store, events


def _corrupt(store: MemorySegmentStore, name: SegmentName) -> None:
    store.put(name, store.files[name][:-12] + b"corrupt-tail")


def test_restore_after_a_corrupt_keyframe_starts_from_the_keyframe_before_it() -> None:
    store, _events = _chain_with_keyframes()
    catalog = SegmentCatalog(store)
    catalog.refresh()
    keyframes = [e.name for e in catalog.of_partition(0) if e.header.keyframe_at_ms is not None]
    assert len(keyframes) == 4  # offsets 0, 3, 6, 9
    _corrupt(store, keyframes[-1])  # the segment of offset 9: its event is lost, nothing else
    catalog.refresh()
    restored = restore_partition(catalog, 0, CompactionSettings(window_ms=1_000, keyframe_every=3))
    assert sorted(restored.state.objects) == [f"apps/Deployment/ns/d{i}" for i in range(9)]
    assert restored.next_offset == 10


def test_export_after_a_corrupt_keyframe_starts_from_the_keyframe_before_it() -> None:
    store, events = _chain_with_keyframes()
    catalog = SegmentCatalog(store)
    catalog.refresh()
    keyframes = [e.name for e in catalog.of_partition(0) if e.header.keyframe_at_ms is not None]
    _corrupt(store, keyframes[2])  # offset 6: the keyframe an export from T0+6.5 s starts from
    warnings: list[str] = []
    result = export_window(SegmentCatalog(store), ExportRequest(T0 + 7_000, T0 + 10_000), warnings.append)
    assert any(keyframes[2] in w for w in warnings)
    without_lost = [e for e in events if e.ts_ms != T0 + 6_000]
    assert result.data == direct(without_lost, T0 + 7_000, T0 + 10_000)


def test_retention_never_deletes_the_history_before_an_unreadable_keyframe() -> None:
    store, events = _chain_with_keyframes()
    catalog = SegmentCatalog(store)
    catalog.refresh()
    keyframes = [e.name for e in catalog.of_partition(0) if e.header.keyframe_at_ms is not None]
    _corrupt(store, keyframes[2])
    before = sorted(store.files)
    removed = apply_retention(catalog, cutoff_ms=T0 + 8_000)
    # the anchor is the readable keyframe of offset 3, not the unreadable one of offset 6
    assert removed == [n for n in before if n < keyframes[1]]
    without_lost = [e for e in events if e.ts_ms != T0 + 6_000]
    result = export_window(SegmentCatalog(store), ExportRequest(T0 + 7_000, T0 + 10_000))
    assert result.data == direct(without_lost, T0 + 7_000, T0 + 10_000)


# ---- defect 2: a stale writer never replaces a newer segment ---------------------------------------
def _one_window_log(n: int) -> tuple[list[Event], dict[int, list[bytes]]]:
    from pipeline.formats.wire.codec import encode_event

    events = [applied(T0 + i * 100, deployment("ns", f"d{i}", 1), 1_000 + i) for i in range(n)]
    return events, {0: [encode_event(e) for e in events]}


async def test_a_stale_sink_cannot_overwrite_the_segment_of_the_partitions_new_owner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A holds offsets 0-149 open and is cut off; B takes over, writes 0-299 and commits 300; A's idle
    close is refused (with a log line saying why) and A drops the partition."""
    events, log = _one_window_log(300)
    store = MemorySegmentStore()
    settings = SinkSettings(CompactionSettings(idle_close_s=5.0), batch_max_records=150)
    a_source, a_clock = FakeSource(log), Clock()
    a = Sink(a_source, store, settings, clock=a_clock)
    await a.on_assigned([0])
    assert await a.run_round() == 150  # 0-149 in A's open segment
    b_source = FakeSource(log)
    b = Sink(b_source, store, settings, clock=Clock())
    await b.on_assigned([0])  # the group gave the partition to B; A has not noticed
    await drain(b, b_source)
    assert b_source.commits == {0: 300}
    a_clock.now = 100.0
    with caplog.at_level("WARNING", logger="kubetape.sink"):
        await a.run_round()  # A's idle close: its write is refused
        await a.flush_all()
    assert "stale segment write refused" in caplog.text
    assert 0 not in a.compactors
    assert a.metrics.value("sink_fenced_total") == 1
    result = export_window(SegmentCatalog(store), ExportRequest(T0, T0 + 60_000))
    assert result.events == 300
    assert result.data == direct(events, T0, T0 + 60_000)


def test_the_store_never_replaces_a_segment_with_less_and_refuses_old_epochs(tmp_path: Path) -> None:
    from pipeline.store.local_store import LocalSegmentStore
    from pipeline.store.segment_store import StaleWriterError, WriteFence, segment_name

    events, _ = _one_window_log(20)
    store = LocalSegmentStore(tmp_path)
    epoch = store.acquire_epoch(0)
    long, short = (
        PartitionCompactor(0, CompactionSettings(), epoch=epoch),
        PartitionCompactor(0, CompactionSettings(), epoch=epoch),
    )
    for offset, e in enumerate(events):
        long.add(offset, e, 0.0)
        if offset < 10:
            short.add(offset, e, 0.0)
    whole, part = long.flush(), short.flush()
    assert whole is not None
    assert part is not None
    store.put(whole.name, whole.encode(3), whole.fence)
    with pytest.raises(StaleWriterError, match="never replaces a segment with less"):
        store.put(part.name, part.encode(3), part.fence)
    assert store.acquire_epoch(0) == epoch + 1  # a new owner: the old epoch is refused from now on
    with pytest.raises(StaleWriterError, match=f"epoch {epoch}, but epoch {epoch + 1}"):
        store.put(segment_name(0, 20), b"whatever", WriteFence(0, 20, 25, epoch))
    assert [s.name for s in store.list()] == [whole.name]
    assert LocalSegmentStore(tmp_path).acquire_epoch(0) == epoch + 2  # the epochs are in the store


# ---- defect 3: the store is the source of truth, reconciled with the topic --------------------------
async def test_a_wiped_store_is_filled_again_from_the_topic_not_from_the_group_offset() -> None:
    events, log = _one_window_log(300)
    store = MemorySegmentStore()
    source = FakeSource(log)
    sink = Sink(source, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0])
    await drain(sink, source)
    assert source.commits == {0: 300}
    store.wipe()
    source.restart()
    again = Sink(source, store, SETTINGS, clock=Clock())
    await again.on_assigned([0])
    await drain(again, source)
    assert export_window(SegmentCatalog(store), ExportRequest(T0, T0 + 60_000)).data == direct(
        events, T0, T0 + 60_000
    )


async def test_offsets_the_topic_no_longer_holds_become_an_explicit_gap_that_exports_report() -> None:
    events, log = _one_window_log(300)
    store = MemorySegmentStore()
    source = FakeSource({0: log[0][:100]})
    sink = Sink(source, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0])
    await drain(sink, source)
    # while the sink is down, 200 more events arrive and the topic's retention deletes offsets < 150
    source.log[0] = log[0]
    source.log_start[0] = 150
    source.restart()
    again = Sink(source, store, SETTINGS, clock=Clock())
    await again.on_assigned([0])
    await drain(again, source)
    assert again.metrics.value("sink_gap_markers_total") == 1
    warnings: list[str] = []
    result = export_window(SegmentCatalog(store), ExportRequest(T0, T0 + 60_000), warnings.append)
    assert any("offsets 100..149" in w and "lost" in w for w in warnings)
    trace = decode_segment(result.data)
    gaps = [e for e in trace.events if e.type.value == "gap"]
    assert len(gaps) == 1
    assert (gaps[0].gap_from_rv, gaps[0].gap_to_rv) == ("100", "149")
    assert gaps[0].gap_reason is not None
    assert "offsets 100..149" in gaps[0].gap_reason
    kept = events[:100] + events[150:]
    assert {e.key for e in trace.events if e.type.value == "applied"} == {e.key for e in kept}


async def test_a_recreated_topic_or_another_cluster_is_refused_naming_both_identities() -> None:
    _, log = _one_window_log(500)
    store = MemorySegmentStore()
    source = FakeSource(log)
    sink = Sink(source, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0])
    await drain(sink, source)
    # the topic is recreated (same cluster): 300 new events, below the 500 the store holds
    recreated = FakeSource({0: log[0][:300]})
    fresh = Sink(recreated, store, SETTINGS, clock=Clock())
    with pytest.raises(
        TopicIdentityError, match=r"holds offsets up to 499 .* ends at offset 300: it was recreated"
    ):
        await fresh.on_assigned([0])
    with pytest.raises(TopicIdentityError):
        await fresh.run_round()  # the loop refuses too (Kafka's callbacks cannot stop the consumer)
    assert recreated.commits == {}
    other = Sink(FakeSource(log, cluster="c2"), store, SETTINGS, clock=Clock())
    with pytest.raises(
        TopicIdentityError,
        match=r"filled from kafka:c1/kubetape\.events, but this sink reads "
        r"kafka:c2/kubetape\.events.*new --segment-dir",
    ):
        await other.on_assigned([0])
