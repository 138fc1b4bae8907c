"""The segment index on the stack's real S3 server (s3proxy): a window's export from the object store
reads index prefixes (start-after listings) and its plan's headers, never the store's whole listing,
and gives the bytes a local directory holding the same segments gives."""

from __future__ import annotations

from pathlib import Path

from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportRequest, export_window
from pipeline.store.index_backfill import ensure_index
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.s3_store import S3SegmentStore
from pipeline.store.segment_store import StoredSegment
from pipeline.store.store_url import S3Location, parse_store_url
from tests.unit.test_segment_index import HOUR, T0, record


class CountingS3Store(S3SegmentStore):
    listings = 0

    def list(self) -> list[StoredSegment]:
        self.listings += 1
        return super().list()


def _events() -> list[tuple[int, int, int]]:
    """Three hours of two partitions, a change every 5 minutes each; at 2.5 h partition 1 gets a
    change dated 0.5 h (a late segment)."""
    events = []
    for step in range(36):
        ts = T0 + step * 300_000 + 1_000
        events += [(0, ts, step % 4), (1, ts + 500, 10 + step % 3)]
        if step == 30:
            events.append((1, T0 + HOUR // 2, 999))
    return events


def _store(s3_url: str) -> CountingS3Store:
    location = parse_store_url(s3_url)
    assert isinstance(location, S3Location)
    return CountingS3Store(location)


def test_an_export_from_s3_reads_the_index_and_equals_the_directorys(s3_url: str, tmp_path: Path) -> None:
    store = _store(s3_url)
    record(store, _events(), window_ms=300_000)
    local = LocalSegmentStore(tmp_path / "segments")
    for stored in store.list():
        local.put(stored.name, store.get(stored.name))
    assert any(k.startswith("index/late/") for k in store.list_markers("index/late/"))
    store.listings = 0
    for start, end in [(T0 + HOUR + 7_000, T0 + 2 * HOUR), (T0, T0 + HOUR), (T0 + 2 * HOUR, T0 + 4 * HOUR)]:
        catalog = SegmentCatalog(store)
        got = export_window(catalog, ExportRequest(start, end)).data
        assert catalog.answered_from_index, (start, end)
        assert got == export_window(SegmentCatalog(local), ExportRequest(start, end)).data, (start, end)
    assert store.listings == 0, "the index answered without listing the segments"


def test_a_store_filled_before_the_index_is_indexed_once(s3_url: str) -> None:
    store = _store(s3_url)
    record(store, _events(), window_ms=300_000, index=False)
    request = ExportRequest(T0 + HOUR, T0 + 2 * HOUR)
    catalog = SegmentCatalog(store)
    before = export_window(catalog, request).data
    assert not catalog.answered_from_index
    catalog.refresh()
    assert ensure_index(catalog) == len(store.list())
    after = SegmentCatalog(store)
    assert export_window(after, request).data == before
    assert after.answered_from_index
