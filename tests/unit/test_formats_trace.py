"""Reading any trace file (pipeline.formats.trace): kubetape's segments and SimKube's traces as one
kubetape trace, for the replay's plan, analytics and validation alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.formats.segment.content import Keyframe, Segment, build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import SimkubeTrace
from pipeline.formats.trace import initial_events, read_native_trace, read_trace, trace_from_bytes
from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import key_of
from pipeline.replay.plan import plan_replay
from pipeline.validate.tracefile import read_trace_file


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "a"}}


def _applied(ts_ms: int, obj: dict[str, Any]) -> Event:
    return Event.applied(ts_ms, key_of(obj), obj, object_spec_hash(obj))


def _segment_file(tmp_path: Path) -> Path:
    """A segment whose keyframe holds ``early`` (live at its start) and whose events change ``a`` and
    then ``b``."""
    keyframe = Keyframe(1_000, {key_of(_cm("early")): _applied(500, _cm("early"))})
    events = [_applied(2_500, _cm("b")), _applied(2_000, _cm("a"))]
    path = tmp_path / "seg.kseg"
    path.write_bytes(encode_segment(build_segment(events, start_ms=1_000, end_ms=3_000, keyframe=keyframe)))
    return path


def _names(events: list[Event]) -> list[str]:
    return [str((e.obj or {})["metadata"]["name"]) for e in events]


def test_a_segment_reads_with_its_keyframe_in_front(tmp_path: Path) -> None:
    trace = read_trace(_segment_file(tmp_path))
    assert _names(initial_events(trace)) == ["early", "a", "b"]  # a segment is sorted by event time
    assert _names(initial_events(trace, time_ordered=True)) == ["early", "a", "b"]
    assert initial_events(trace)[0].ts_ms == 1_000  # live at the start, not when it was recorded


def test_the_readers_see_the_same_objects(tmp_path: Path) -> None:
    """Replay, analytics and validation read one file through the same reader."""
    path = _segment_file(tmp_path)
    plan = plan_replay(read_trace(path), speed=1)
    assert _names([s.payload for s in plan.steps]) == ["early", "a", "b"]
    validated = read_trace_file(path)
    assert sorted(str(o["metadata"]["name"]) for e in validated.events for o in e.applied_objs) == [
        "a",
        "b",
        "early",
    ]


def test_a_simkube_trace_reads_as_a_kubetape_trace(simkube_traces: Path) -> None:
    path = simkube_traces / "bare-pods.sktrace"
    trace = read_trace(path)
    assert isinstance(trace, Segment)
    assert any(e.type is EventType.APPLIED for e in trace.events)
    assert trace_from_bytes(path.read_bytes(), str(path)).events == trace.events
    assert isinstance(read_native_trace(path), SimkubeTrace)


def test_an_unreadable_or_foreign_file_names_itself(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sktrace"
    with pytest.raises(FormatError, match=r"missing\.sktrace: cannot read the trace"):
        read_trace(missing)
    foreign = tmp_path / "notes.txt"
    foreign.write_bytes(b"not a trace")
    with pytest.raises(FormatError, match=r"notes\.txt"):
        read_trace(foreign)
