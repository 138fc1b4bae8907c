"""The recorded load through a transform: ``kubetape transform`` and ``kubetape export --transform`` keep a
trace's usage samples, renamed with their owner, and drop them only with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.decode import read_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import PartitionRange, SegmentKind
from pipeline.model.keys import ObjectKey
from pipeline.model.usage import ContainerUsage, UsageSample
from pipeline.sink.synthetic import synthetic_events
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.segment_store import segment_name
from pipeline.store.usage_history import USAGE_DIR
from services.cli import main
from tests.unit.test_sink_cli import T0, export_args, fill_store

REPO_ROOT = Path(__file__).resolve().parents[2]
WINDOW_MS = 240_000
# two Deployments of the synthetic workload (tests.unit.test_sink_cli.fill_store): both live in the window
KEPT, DROPPED = ObjectKey("apps/Deployment/ns-0/app-116"), ObjectKey("apps/Deployment/ns-0/app-117")


def load() -> list[UsageSample]:
    """Four samples inside the window: two owners at two times."""
    return [
        UsageSample(T0 + ts, owner, "h1", 2, (ContainerUsage("main", 250, 64 << 20),))
        for ts in (30_000, 45_000)
        for owner in (KEPT, DROPPED)
    ]


def trace_file(tmp_path: Path) -> Path:
    trace = build_segment(
        synthetic_events(300, T0, WINDOW_MS),
        start_ms=T0,
        end_ms=T0 + WINDOW_MS,
        usage=load(),
        kind=SegmentKind.TRACE,
    )
    path = tmp_path / "trace.kseg"
    path.write_bytes(encode_segment(trace))
    return path


def program(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("name", "text"), [("noop.yaml", "version: 1\noperations: []\n"), ("noop.skel", "")])
def test_a_no_op_transform_keeps_every_usage_sample(
    tmp_path: Path, name: str, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.kseg"
    assert (
        main(["transform", str(trace_file(tmp_path)), str(program(tmp_path, name, text)), "-o", str(out)])
        == 0
    )
    kept = read_segment(out)
    assert kept.usage == read_segment(tmp_path / "trace.kseg").usage
    assert len(kept.usage) == kept.header.usage_samples == 4
    assert "4 usage samples kept, 0 dropped with their owners" in capsys.readouterr().out


def test_the_load_is_renamed_with_its_owner_and_dropped_with_it(tmp_path: Path) -> None:
    drop = program(
        tmp_path,
        "drop.yaml",
        f"version: 1\noperations:\n  - select: {{name: {DROPPED.split('/')[-1]}}}\n    drop: true\n",
    )
    out = tmp_path / "out.kseg"
    assert main(["transform", str(trace_file(tmp_path)), str(drop), "-o", str(out)]) == 0
    assert [(s.ts_ms - T0, s.owner_key) for s in read_segment(out).usage] == [(30_000, KEPT), (45_000, KEPT)]

    obfuscate = REPO_ROOT / "examples" / "transforms" / "obfuscate-names.yaml"
    hidden = tmp_path / "hidden.kseg"
    assert main(["transform", str(trace_file(tmp_path)), str(obfuscate), "-o", str(hidden)]) == 0
    trace = read_segment(hidden)
    owners = {s.owner_key for s in trace.usage}
    assert len(trace.usage) == 4
    assert len(owners) == 2
    assert not owners & {KEPT, DROPPED}  # no recorded name leaves
    deployments = {e.key for e in trace.events if "/Deployment/" in e.key}
    assert owners <= deployments  # each sample still names its owner, under its new name


def test_export_with_a_no_op_transform_keeps_every_usage_sample(tmp_path: Path) -> None:
    fill_store(tmp_path / "segments")
    usage_store = LocalSegmentStore(tmp_path / "segments" / USAGE_DIR)
    usage = build_segment(
        [],
        start_ms=T0,
        end_ms=T0 + WINDOW_MS,
        partitions=[PartitionRange("kubetape.usage", 0, 0, 3)],
        usage=load(),
    )
    usage_store.put(segment_name(0, 0), encode_segment(usage))
    common = export_args(tmp_path)
    noop = program(tmp_path, "noop.yaml", "version: 1\noperations: []\n")
    assert main([*common, "-o", str(tmp_path / "plain.kseg")]) == 0
    assert main([*common, "--transform", str(noop), "-o", str(tmp_path / "noop.kseg")]) == 0
    plain, transformed = read_segment(tmp_path / "plain.kseg"), read_segment(tmp_path / "noop.kseg")
    assert len(plain.usage) == 4
    assert transformed.usage == plain.usage
