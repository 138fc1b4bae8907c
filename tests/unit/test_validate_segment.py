"""Validation and transforms over kubetape traces and segments (not only SimKube files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.formats.assemble import simkube_to_trace
from pipeline.formats.segment.content import Keyframe, build_segment
from pipeline.formats.segment.decode import read_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import read_simkube_trace
from pipeline.model.events import Event, EventType
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import key_of
from pipeline.validate.apply_segment import apply_transform_to_segment
from pipeline.validate.rules import validate_trace
from pipeline.validate.tracefile import read_trace_file
from pipeline.validate.transform import load_transform, obfuscated, parse_transform
from services.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "transforms"


def _applied(ts_ms: int, obj: dict[str, Any]) -> Event:
    return Event.applied(ts_ms, key_of(obj), obj, object_spec_hash(obj))


def test_keyframe_objects_count_as_existing(tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "a"}}
    spec = {
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "s"}}],
            }
        ]
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}, "spec": spec}
    keyframe = Keyframe(1_000, {key_of(cm): _applied(1_000, cm)})
    segment = build_segment([_applied(2_000, pod)], start_ms=1_000, end_ms=3_000, keyframe=keyframe)
    path = tmp_path / "seg.kt"
    path.write_bytes(encode_segment(segment))
    findings = validate_trace(read_trace_file(path))
    assert [f.message for f in findings] == ["Secret a/s is not in the trace"]


def test_obfuscating_a_kubetape_trace_renames_keys_and_lifecycle_owners(simkube_traces: Path) -> None:
    trace = simkube_to_trace(read_simkube_trace(simkube_traces / "cronjob.sktrace"))
    result, stats = apply_transform_to_segment(trace, load_transform(EXAMPLES / "obfuscate-names.yaml"))
    assert stats.objects_seen == 2
    text = str(result)
    assert "hello-simkube" not in text
    owner = key_of(next(e.obj for e in result.events if e.type is EventType.APPLIED and e.obj))
    assert owner == f"batch/CronJob/{obfuscated('default')}/{obfuscated('hello-simkube')}"
    lifecycles = [e for e in result.events if e.type is EventType.POD_LIFECYCLE]
    assert len(lifecycles) == 3
    assert {e.owner_key for e in lifecycles} == {owner}
    applied = next(e for e in result.events if e.type is EventType.APPLIED)
    assert applied.spec_hash == object_spec_hash(applied.obj or {})


def test_transform_command_keeps_the_kubetape_format(simkube_traces: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.kt"
    source.write_bytes(
        encode_segment(simkube_to_trace(read_simkube_trace(simkube_traces / "simkube-validation-trace.json")))
    )
    fix, out = tmp_path / "fix.yaml", tmp_path / "out.kt"
    assert main(["validate", str(source), "--fix", str(fix)]) == 1
    assert main(["transform", str(source), str(fix), "-o", str(out)]) == 0
    assert read_segment(out).header.counts.applied == 8
    assert main(["validate", str(out)]) == 0


def test_dropping_an_object_from_a_segment_drops_its_events() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "a"}}
    segment = build_segment([_applied(2_000, cm)], start_ms=1_000, end_ms=3_000)
    transform = parse_transform(
        {"version": 1, "operations": [{"select": {"kind": "ConfigMap"}, "drop": True}]}, "t"
    )
    result, stats = apply_transform_to_segment(segment, transform)
    assert result.events == ()
    assert stats.objects_dropped == 1
