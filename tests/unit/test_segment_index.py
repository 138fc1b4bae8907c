"""The segment index of object stores: a window's export reads a few index prefixes and the headers its
plan needs, never the store's whole listing, and gives the bytes the whole listing gives.

The model-based test (``test_store_model.py``) runs the sink over an indexed store through crashes,
rebalances, retention and wiped stores; these are the cases named one by one.
"""

from __future__ import annotations

import pytest

from pipeline.formats.segment.content import build_gap_marker
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import encode_wire_segment
from pipeline.formats.segment.header import PartitionRange
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.synthetic import applied, deployment
from pipeline.sink.writer import SegmentWriter
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportRequest, export_window
from pipeline.store.index_backfill import ensure_index
from pipeline.store.memory_store import MemorySegmentStore
from pipeline.store.retention import apply_retention
from pipeline.store.segment_index import READY, MarkerStore, SegmentFacts, index_segment, layout_of
from pipeline.store.segment_store import IndexLayout, SegmentName, SegmentStore, StoredSegment

HOUR = 3_600_000
T0 = 1_763_700_000_000 - 1_763_700_000_000 % HOUR


class CountingStore(MemorySegmentStore):
    """Counts what a reader asks of the store."""

    def __init__(self) -> None:
        super().__init__(IndexLayout())
        self.listings = 0
        self.heads: list[SegmentName] = []

    def list(self) -> list[StoredSegment]:
        self.listings += 1
        return super().list()

    def head(self, name: SegmentName, size: int) -> bytes:
        self.heads.append(name)
        return super().head(name, size)


def record(
    store: MemorySegmentStore | SegmentStore,
    events: list[tuple[int, int, int]],
    *,
    window_ms: int = 60_000,
    index: bool = True,
) -> None:
    """Write ``(partition, event time, object number)`` events through compactors, one event per
    offset, then close what is open: through the sink's writer (which indexes), or with ``index``
    False straight into the store, as a sink of an older release did."""
    settings = CompactionSettings(window_ms=window_ms, keyframe_every=4)
    compactors: dict[int, PartitionCompactor] = {}
    offsets: dict[int, int] = {}
    closed = []
    for partition, ts, number in events:
        compactor = compactors.setdefault(partition, PartitionCompactor(partition, settings))
        offset = offsets.get(partition, 0)
        offsets[partition] = offset + 1
        event = applied(ts, deployment("ns", f"d{number}", offset + 1), offset + 1)
        closed += compactor.add(offset, event, 0.0)
    closed += [c for comp in compactors.values() if (c := comp.flush()) is not None]
    if not index:
        for c in closed:
            store.put(c.name, c.encode())
        return
    writer = SegmentWriter(store, 1, 2)
    for c in closed:
        writer.submit(c).result()
    writer.close()
    if isinstance(store, MarkerStore) and layout_of(store) is not None:
        store.put_marker(READY)  # what the sink's first assignment writes on a new store


def _day_with_a_late_event() -> list[tuple[int, int, int]]:
    """Six hours of two partitions, one change a minute each; at hour 5 partition 1 gets a change
    dated hour 1 (a late event: its segment starts four hours before the partition's high water)."""
    events = []
    for minute in range(6 * 60):
        ts = T0 + minute * 60_000 + 1_000
        events += [(0, ts, minute % 7), (1, ts + 500, 100 + minute % 5)]
        if minute == 5 * 60:
            events.append((1, T0 + HOUR + 30_000, 999))
    return events


def _copy_without_index(store: MemorySegmentStore) -> MemorySegmentStore:
    plain = MemorySegmentStore()
    for name, data in store.files.items():
        plain.put(name, data)
    return plain


@pytest.fixture
def indexed() -> CountingStore:
    store = CountingStore()
    record(store, _day_with_a_late_event())
    store.listings, store.heads = 0, []
    return store


@pytest.mark.parametrize("hours", [(2, 3), (0, 1), (1, 2), (4, 6), (5, 7)])
def test_an_indexed_window_equals_the_whole_listing_and_reads_only_its_plan(
    indexed: CountingStore, hours: tuple[int, int]
) -> None:
    request = ExportRequest(T0 + hours[0] * HOUR + 7_000, T0 + hours[1] * HOUR)
    expected = export_window(SegmentCatalog(_copy_without_index(indexed)), request).data

    catalog = SegmentCatalog(indexed)
    got = export_window(catalog, request).data

    assert got == expected
    assert catalog.answered_from_index
    assert indexed.listings == 0, "the index answers without listing the store's segments"
    # 2 partitions × 60 segments an hour: the plan reads about the window's hour plus the slack's
    assert len(indexed.heads) < 3 * 120 + 10, len(indexed.heads)
    assert len(indexed.files) == 720


def test_the_late_segment_is_found_from_hours_away(indexed: CountingStore) -> None:
    """Hour 2's state includes d999, whose change dated hour 1 was recorded at hour 5."""
    late = [k for k in indexed.markers if k.startswith("index/late/")]
    assert late == ["index/late/p0001/p0001-000000000000300.kseg"], late
    request = ExportRequest(T0 + 2 * HOUR, T0 + 3 * HOUR)
    trace = decode_segment(export_window(SegmentCatalog(indexed), request).data)
    keys = {str(e.key) for e in trace.events}
    assert any(key.endswith("/d999") for key in keys), sorted(keys)
    assert "p0001-000000000000300.kseg" in indexed.heads


def test_a_segment_late_by_less_than_the_slack_is_found_in_the_bucket_before() -> None:
    """Not late enough to be listed as late, but starting in the hour before the window's keyframe: a
    change dated 1:59 recorded at 2:12 is in the state of a window from 2:10."""
    events = [(0, T0 + minute * 60_000 + 1_000, minute % 7) for minute in range(3 * 60)]
    events.insert(132, (0, T0 + 119 * 60_000, 555))
    store = CountingStore()
    record(store, events)
    assert not [k for k in store.markers if k.startswith("index/late/")]
    request = ExportRequest(T0 + 130 * 60_000, T0 + 140 * 60_000)
    catalog = SegmentCatalog(store)
    got = export_window(catalog, request).data
    assert catalog.answered_from_index
    assert got == export_window(SegmentCatalog(_copy_without_index(store)), request).data
    assert any(str(e.key).endswith("/d555") for e in decode_segment(got).events)


def test_markers_without_their_segment_are_skipped(indexed: CountingStore) -> None:
    """A marker is written before its segment: a write that failed after it, or a segment deleted
    before its markers, leaves a marker alone."""
    request = ExportRequest(T0 + 2 * HOUR, T0 + 3 * HOUR)
    expected = export_window(SegmentCatalog(indexed), request).data
    ghost = SegmentName("p0000-000000000009999.kseg")
    for key in (f"index/start/{(T0 + 2 * HOUR) // HOUR:010d}/{ghost}", f"index/late/p0000/{ghost}"):
        indexed.put_marker(key)
    catalog = SegmentCatalog(indexed)
    assert export_window(catalog, request).data == expected
    assert catalog.answered_from_index
    assert not catalog.corrupt


def _keyframe_before(store: CountingStore, partition: int, start_ms: int) -> SegmentName:
    """The segment of the latest keyframe marker of ``partition`` at or before ``start_ms``."""
    prefix = f"index/keyframes/p{partition:04d}/"
    keys = sorted(k for k in store.markers if k.startswith(prefix) and int(k[len(prefix) :][:15]) <= start_ms)
    return SegmentName(f"p{partition:04d}-{int(keys[-1].rsplit('-', 1)[1]):015d}.kseg")


def test_a_keyframe_marker_without_its_segment_is_passed_over(indexed: CountingStore) -> None:
    """Retention deleted the keyframe segment the index names (between its listing and this read):
    the window starts from the keyframe before it, as the whole listing does."""
    request = ExportRequest(T0 + 2 * HOUR + 30 * 60_000, T0 + 3 * HOUR)
    del indexed.files[_keyframe_before(indexed, 0, request.start_ms)]
    catalog = SegmentCatalog(indexed)
    got = export_window(catalog, request).data
    assert catalog.answered_from_index
    assert got == export_window(SegmentCatalog(_copy_without_index(indexed)), request).data


def test_an_unreadable_keyframe_falls_back_to_the_whole_listing(indexed: CountingStore) -> None:
    request = ExportRequest(T0 + 2 * HOUR + 30 * 60_000, T0 + 3 * HOUR)
    indexed.files[_keyframe_before(indexed, 1, request.start_ms)] = b"KTSG garbage"
    catalog = SegmentCatalog(indexed)
    warnings: list[str] = []
    got = export_window(catalog, request, warnings.append).data
    assert not catalog.answered_from_index
    assert got == export_window(SegmentCatalog(_copy_without_index(indexed)), request).data
    assert any("corrupt" in w for w in warnings), warnings


def test_a_store_written_without_an_index_is_indexed_once_then_answers_from_it() -> None:
    store = CountingStore()
    record(store, _day_with_a_late_event(), index=False)
    assert not store.markers
    catalog = SegmentCatalog(store)
    request = ExportRequest(T0 + 2 * HOUR, T0 + 3 * HOUR)
    before = export_window(catalog, request).data
    assert not catalog.answered_from_index, "no index yet: the whole listing"

    catalog.refresh()
    assert ensure_index(catalog) == 720
    assert ensure_index(catalog) == 0, "indexed once"
    assert "index/late/p0001/p0001-000000000000300.kseg" in store.markers
    after = SegmentCatalog(store)
    assert export_window(after, request).data == before
    assert after.answered_from_index


def test_retention_removes_the_markers_of_what_it_deletes(indexed: CountingStore) -> None:
    request = ExportRequest(T0 + 4 * HOUR, T0 + 5 * HOUR)
    before = export_window(SegmentCatalog(indexed), request).data
    removed = apply_retention(SegmentCatalog(indexed), cutoff_ms=T0 + 3 * HOUR)
    assert len(removed) > 200
    named = {k.rsplit("/", 1)[1] for k in indexed.markers if k.startswith(("index/start/", "index/late/"))}
    assert named == set(indexed.files)
    keyframes = [k for k in indexed.markers if k.startswith("index/keyframes/")]
    assert all(f"p{k.split('/')[2][1:]}-{k.rsplit('-', 1)[1]}.kseg" in indexed.files for k in keyframes)
    catalog = SegmentCatalog(indexed)
    assert export_window(catalog, request).data == before
    assert catalog.answered_from_index


def test_a_gap_marker_is_indexed_and_reported() -> None:
    store = CountingStore()
    record(store, [(0, T0 + 1_000, 1), (0, T0 + 61_000, 2)])
    gap = build_gap_marker(
        PartitionRange("kubetape.events", 1, 0, 9), start_ms=0, end_ms=T0, reason="test", source=None
    )
    name = SegmentName("p0001-000000000000000.kseg")
    index_segment(store, SegmentFacts(name, 1, 0, gap.header, -1, None))
    store.put(name, encode_wire_segment(gap))
    catalog = SegmentCatalog(store)
    warnings: list[str] = []
    export_window(catalog, ExportRequest(T0, T0 + HOUR), warnings.append)
    assert catalog.answered_from_index
    assert any("offsets 0..9" in w for w in warnings), warnings
