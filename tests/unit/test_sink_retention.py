"""Retention removes old segments but later ranges stay replayable; the HTTP export body is validated."""

from __future__ import annotations

import pytest

from pipeline.formats.segment.encode import encode_segment
from pipeline.model.errors import ConfigError
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.service import export_request_from_json
from pipeline.sink.synthetic import applied, deployment
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportFormat, ExportRequest, export_window
from pipeline.store.memory_store import MemorySegmentStore
from pipeline.store.retention import apply_retention

T0 = 1_763_700_000_000 - 1_763_700_000_000 % 60_000


def _store_with_segments() -> MemorySegmentStore:
    store = MemorySegmentStore()
    c = PartitionCompactor(0, CompactionSettings(window_ms=1_000, keyframe_every=2))
    closed = []
    for i in range(7):
        closed += c.add(i, applied(T0 + i * 1_000, deployment("ns", f"d{i % 3}", i + 1), 100 + i), 0.0)
    for s in closed:
        store.put(s.name, encode_segment(s.segment))
    return store


def test_retention_keeps_the_keyframe_that_later_ranges_need() -> None:
    store = _store_with_segments()
    catalog = SegmentCatalog(store)
    request = ExportRequest(T0 + 2_500, T0 + 6_000)
    before = export_window(catalog, request).data
    removed = apply_retention(catalog, cutoff_ms=T0 + 3_500)
    assert removed == ["p0000-000000000000000.kseg", "p0000-000000000000001.kseg"]
    assert export_window(SegmentCatalog(store), request).data == before


def test_retention_without_a_later_keyframe_removes_nothing() -> None:
    store = _store_with_segments()
    assert apply_retention(SegmentCatalog(store), cutoff_ms=T0 + 1_500) == []


def test_http_export_body_accepts_simkube_seconds_and_rejects_bad_input() -> None:
    request = export_request_from_json(
        {
            "start_ts": 100,
            "end_ts": 200,
            "format": "simkube",
            "filters": {"excluded_namespaces": ["kube-system"]},
        }
    )
    assert (request.start_ms, request.end_ms, request.format) == (100_000, 200_000, ExportFormat.SIMKUBE)
    assert request.filters.excluded_namespaces == ("kube-system",)
    with pytest.raises(ConfigError, match="end_ms"):
        export_request_from_json({"start_ms": 5})
    with pytest.raises(ConfigError, match="unknown format"):
        export_request_from_json({"start_ms": 5, "end_ms": 6, "format": "csv"})
    with pytest.raises(ConfigError, match="excluded_labels"):
        export_request_from_json({"start_ms": 5, "end_ms": 6, "filters": {"excluded_labels": {"a": "b"}}})
    assert request.simkube_version == 2  # what released SimKube reads, unless asked
    v3 = export_request_from_json({"start_ms": 5, "end_ms": 6, "format": "simkube", "simkube_version": 3})
    assert v3.simkube_version == 3
    with pytest.raises(ConfigError, match=r"version 4 cannot be written; kubetape writes versions 2 and 3"):
        export_request_from_json({"start_ms": 5, "end_ms": 6, "format": "simkube", "simkube_version": 4})
