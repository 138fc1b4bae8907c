"""Trace files as analytics input: a kubetape trace/segment or a SimKube trace, as one event list."""

from __future__ import annotations

from pathlib import Path

from pipeline.formats.assemble import simkube_to_trace
from pipeline.formats.segment import Segment, decode_segment, is_segment
from pipeline.formats.simkube import read_simkube_trace
from pipeline.model.errors import FormatError
from pipeline.model.events import Event


def read_trace(path: Path) -> Segment:
    """The trace at ``path``; FormatError naming the file if it is neither kubetape's nor SimKube's."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the trace ({exc.strerror or exc}); check the path") from None
    if is_segment(data):
        return decode_segment(data, str(path))
    return simkube_to_trace(read_simkube_trace(data, str(path)), str(path))


def trace_events(trace: Segment) -> list[Event]:
    """The trace's events in time order, preceded by its keyframe's state (live at the trace start)."""
    events = sorted(trace.events, key=lambda e: e.ts_ms)  # stable: same-time events keep their order
    if trace.keyframe is None:
        return events
    at = trace.header.start_ms
    initial = [
        Event.applied(at, e.key, e.obj or {}, e.spec_hash)
        for e in sorted(trace.keyframe.objects.values(), key=lambda e: e.key)
    ]
    return [*initial, *trace.keyframe.lifecycles.values(), *events]
