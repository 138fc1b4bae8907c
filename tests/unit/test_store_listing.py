"""``kubetape list`` and ``kubetape describe`` over a store the sink's own writer filled: what a user
reads off the table and the JSON (clusters, segments, bytes, time range, keyframes, topic)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.formats.segment.content import build_gap_marker
from pipeline.formats.segment.encode import encode_wire_segment
from pipeline.formats.segment.header import PartitionRange
from pipeline.model.errors import ConfigError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId
from pipeline.model.timespec import format_time
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.synthetic import synthetic_events
from pipeline.sink.writer import SegmentWriter
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.segment_store import SegmentStore, segment_name
from pipeline.store.store_url import LocalLocation, cluster_store_location
from pipeline.store.summary import summarize_fleet
from services.cli import main
from services.commands.describe import describe_simulation
from services.commands.list import simulation_summary

T0 = 1_763_700_000_000 - 1_763_700_000_000 % 60_000


def _record(directory: Path, events: int, span_ms: int) -> list[int]:
    """Fill ``directory`` as the sink does; the sizes of the files written."""
    return record_into(LocalSegmentStore(directory), events, span_ms)


def record_into(store: SegmentStore, events: int, span_ms: int) -> list[int]:
    """Fill ``store`` as the sink does (its compactor and writer); the sizes of the files written."""
    compactor = PartitionCompactor(0, CompactionSettings())
    closed = []
    for offset, e in enumerate(synthetic_events(events, T0, span_ms)):
        closed += compactor.add(offset, e, 0.0)
    last = compactor.flush()
    assert last is not None
    writer = SegmentWriter(store, 3, 2)
    return [writer.submit(c).result().size for c in [*closed, last]]


def test_a_fleet_store_lists_each_cluster_with_what_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = LocalLocation(tmp_path / "store")
    sizes = _record(root.path, 300, 240_000)
    eu = cluster_store_location(root, ClusterId("eu"))
    assert isinstance(eu, LocalLocation)
    eu_sizes = _record(eu.path, 50, 60_000)

    summaries = {s.cluster: s for s in summarize_fleet(str(root))}
    assert sorted(summaries) == [DEFAULT_CLUSTER, "eu"]
    home = summaries[DEFAULT_CLUSTER]
    assert (home.segments, home.bytes, home.events) == (len(sizes), sum(sizes), 300)
    assert home.start_ms is not None
    assert home.end_ms is not None
    assert T0 <= home.start_ms < home.end_ms <= T0 + 240_000 + 1
    assert home.keyframes >= 1
    assert home.gaps == ()
    eu_summary = summaries[ClusterId("eu")]
    assert (eu_summary.segments, eu_summary.bytes) == (len(eu_sizes), sum(eu_sizes))

    assert main(["list", str(root.path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["CLUSTER", "SEGMENTS", "SIZE", "FROM", "TO", "KEYFRAMES", "GAPS", "TOPIC"]
    default_row = next(line for line in out if line.startswith(DEFAULT_CLUSTER))
    assert format_time(home.start_ms) in default_row
    assert str(len(sizes)) in default_row.split()

    assert main(["list", str(root.path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [c["cluster"] for c in listed] == [DEFAULT_CLUSTER, "eu"]
    assert listed[0]["bytes"] == sum(sizes)
    assert listed[0]["partitions"][0]["first_offset"] == 0
    assert listed[0]["partitions"][0]["last_offset"] == 299


def test_describe_details_one_cluster_and_refuses_an_unknown_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path, 120, 120_000)
    assert main(["describe", str(tmp_path), "--cluster", DEFAULT_CLUSTER]) == 0
    text = capsys.readouterr().out
    assert f"cluster {DEFAULT_CLUSTER} at {tmp_path}" in text
    assert "0..119" in text  # the partition's offsets
    with pytest.raises(ConfigError, match=r"holds no cluster 'nope' \(it holds: default\)"):
        summarize_fleet(str(tmp_path), "nope")


def test_gap_markers_and_unreadable_segments_are_described_not_fatal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path, 100, 60_000)
    store = LocalSegmentStore(tmp_path)
    lost = PartitionRange("kubetape.events", 0, 100, 149)
    marker = build_gap_marker(lost, start_ms=T0 + 60_000, end_ms=T0 + 90_000, reason="retention deleted them")
    store.put(segment_name(0, 100), encode_wire_segment(marker))
    store.put(segment_name(0, 150), b"not a segment")

    (summary,) = summarize_fleet(str(tmp_path))
    assert [(g.first_offset, g.last_offset, g.reason) for g in summary.gaps] == [
        (100, 149, "retention deleted them")
    ]
    assert list(summary.unreadable) == [segment_name(0, 150)]
    assert summary.events == 100  # the marker holds no events, the unreadable file is not counted
    assert main(["describe", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "gap: partition 0 offsets 100..149 lost (retention deleted them)" in text
    assert f"unreadable: {segment_name(0, 150)}" in text


def test_list_wants_a_store_or_simulations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 2
    assert "give a STORE" in capsys.readouterr().err
    assert main(["list", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_simulation_reads_as_phase_speed_source_and_progress() -> None:
    sim = {
        "metadata": {"name": "peak"},
        "spec": {
            "speed": 10,
            "repetitions": 3,
            "source": {"segments": {"url": "s3://b/prod", "from": "2026-11-21T10:00:00Z", "to": "+1h"}},
        },
        "status": {
            "phase": "Running",
            "completedRepetitions": 1,
            "repetitions": [{"index": 0, "phase": "Succeeded", "applied": 42, "failed": 0}],
        },
    }
    assert simulation_summary(sim) == {
        "name": "peak",
        "phase": "Running",
        "speed": "10x",
        "source": "segments s3://b/prod [2026-11-21T10:00:00Z, +1h)",
        "progress": "1/3 repetitions",
        "message": "",
    }
    assert "repetition 0: Succeeded, 42 applied, 0 failed" in describe_simulation(sim)
