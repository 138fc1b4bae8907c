"""The segment store is lossless by construction: each reproduction of issue 16 as a test.

Every test here failed on the code before the fix: keyframes stamped with their window's start,
a stale writer replacing a newer segment, the store and the group offset disagreeing, state growing
with history, a corrupt keyframe restarting the state from nothing.
"""

from __future__ import annotations

from pipeline.formats.assemble import assemble_window
from pipeline.formats.segment import decode_segment, encode_segment
from pipeline.io.segment_store import MemorySegmentStore, SegmentName
from pipeline.model.events import Event
from pipeline.model.tracer_config import TracerConfig
from pipeline.sink.catalog import SegmentCatalog
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.export import EXPORT_ZSTD_LEVEL, ExportRequest, export_window
from pipeline.sink.history import restore_partition
from pipeline.sink.retention import apply_retention
from pipeline.sink.state import ObjectState
from pipeline.sink.synthetic import applied, deleted, deployment

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
