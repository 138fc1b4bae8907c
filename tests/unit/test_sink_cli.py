"""``kubetape export`` and ``kubetape sink`` argument handling (no broker needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.formats.segment.decode import read_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import read_simkube_trace, simkube_compatibility_problems
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.synthetic import synthetic_events
from pipeline.store.local_store import LocalSegmentStore
from services.cli import main

T0 = 1_763_700_000_000 - 1_763_700_000_000 % 60_000


def fill_store(store_dir: Path) -> None:
    store = LocalSegmentStore(store_dir)
    compactor = PartitionCompactor(0, CompactionSettings())
    closed = []
    for offset, e in enumerate(synthetic_events(300, T0, 240_000)):
        closed += compactor.add(offset, e, 0.0)
    last = compactor.flush()
    assert last is not None
    for c in [*closed, last]:
        store.put(c.name, encode_segment(c.segment))


def export_args(tmp_path: Path) -> list[str]:
    """``kubetape export`` over the whole of what :func:`fill_store` wrote to ``tmp_path / "segments"``."""
    store = str(tmp_path / "segments")
    return ["export", "--segment-dir", store, "--from", str(T0), "--to", str(T0 + 240_000)]


def test_export_writes_kubetape_and_simkube_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fill_store(tmp_path / "segments")
    common = [
        "--segment-dir",
        str(tmp_path / "segments"),
        "--from",
        str(T0 + 60_000),
        "--to",
        str(T0 + 180_000),
    ]
    assert main(["export", *common, "-o", str(tmp_path / "out.kseg")]) == 0
    trace = read_segment(tmp_path / "out.kseg")
    assert (trace.header.start_ms, trace.header.end_ms) == (T0 + 60_000, T0 + 180_000)
    assert main(["export", *common, "--format", "simkube", "-o", str(tmp_path / "out.sktrace")]) == 0
    sk = read_simkube_trace(tmp_path / "out.sktrace")
    assert simkube_compatibility_problems(sk) == []
    assert "wrote" in capsys.readouterr().err
    for start in ("-30m", "-1h30m", "-1.5d"):  # relative times, of the one grammar, as values not options
        recent = ["--segment-dir", str(tmp_path / "segments"), "--from", start, "--to", "now"]
        assert main(["export", *recent, "-o", str(tmp_path / "recent.kseg")]) == 0


def test_export_and_sink_explain_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fill_store(tmp_path / "segments")
    args = ["export", "--segment-dir", str(tmp_path / "segments"), "-o", str(tmp_path / "x")]
    assert main([*args, "--from", "yesterday"]) == 2
    assert "cannot read --from 'yesterday'" in capsys.readouterr().err
    assert main([*args, "--from", "now", "--to", "-1h"]) == 2
    assert "range is empty" in capsys.readouterr().err
    assert main(["sink", "--bootstrap", "", "--segment-dir", str(tmp_path)]) == 2
    assert "no Kafka bootstrap" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["kubetape", "simkube"])
def test_a_failing_transform_leaves_no_raw_trace_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """The transform runs in memory, before any byte of the trace reaches the disk: when it fails,
    neither the output nor a temporary file holds the unredacted export."""
    import services.commands.export as export_command
    from pipeline.model.errors import ConfigError

    fill_store(tmp_path / "segments")
    out = tmp_path / "out"
    out.mkdir()
    seen: list[int] = []

    def failing(trace: object, transform: object) -> object:
        seen.append(len(list(out.iterdir())))  # what is on disk while the transform runs
        raise ConfigError("the transform failed")

    monkeypatch.setattr(export_command, "apply_transform_to_segment", failing)
    monkeypatch.setattr(export_command, "apply_transform", failing)
    transform = Path(__file__).resolve().parents[2] / "examples" / "transforms" / "redact.yaml"
    args = ["export", "--segment-dir", str(tmp_path / "segments"), "--format", fmt]
    args += ["--from", str(T0), "--to", str(T0 + 240_000), "--transform", str(transform)]
    assert main([*args, "-o", str(out / "trace")]) == 2
    assert "the transform failed" in capsys.readouterr().err
    assert seen == [0]
    assert list(out.iterdir()) == []
