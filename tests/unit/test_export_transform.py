"""``kubetape export --transform``: redaction and obfuscation happen before the trace leaves."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.formats.segment.decode import read_segment
from services.cli import main
from tests.unit.test_sink_cli import export_args, fill_store

REPO_ROOT = Path(__file__).resolve().parents[2]


def _names(path: Path) -> set[str]:
    trace = read_segment(path)
    objects = [e.obj for e in trace.events if e.obj] + [
        e.obj for e in (trace.keyframe.objects.values() if trace.keyframe else []) if e.obj
    ]
    return {o["metadata"]["name"] for o in objects}


def test_export_applies_the_obfuscation_transform_before_writing(tmp_path: Path) -> None:
    fill_store(tmp_path / "segments")
    common = export_args(tmp_path)
    assert main([*common, "-o", str(tmp_path / "plain.kseg")]) == 0
    transform = REPO_ROOT / "examples" / "transforms" / "obfuscate-names.yaml"
    assert main([*common, "--transform", str(transform), "-o", str(tmp_path / "hidden.kseg")]) == 0

    plain, hidden = _names(tmp_path / "plain.kseg"), _names(tmp_path / "hidden.kseg")
    assert plain
    assert len(hidden) == len(plain)  # the same objects, one stable digest per name
    assert plain.isdisjoint(hidden)  # and no recorded name leaves


def test_a_bad_transform_fails_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill_store(tmp_path / "segments")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\noperations:\n  - remove: not-a-pointer\n")
    out = tmp_path / "out.kseg"
    code = main([*export_args(tmp_path), "--transform", str(bad), "-o", str(out)])
    assert code == 2
    assert "bad.yaml" in capsys.readouterr().err
    assert not out.exists()
