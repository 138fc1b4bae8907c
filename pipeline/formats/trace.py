"""Reading a trace file: a kubetape trace/segment or a SimKube trace (v1 or v2, msgpack or JSON), as
one kubetape trace; and a trace's events with the state live at its start in front.

Every stage that takes a trace file (replay, analytics, validation, transforms) reads it here."""

from __future__ import annotations

from pathlib import Path

from pipeline.formats.assemble import simkube_to_trace
from pipeline.formats.segment.content import Segment
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.header import is_segment
from pipeline.formats.simkube import SimkubeTrace, read_simkube_trace
from pipeline.model.errors import FormatError
from pipeline.model.events import Event


def read_trace_bytes(path: Path) -> bytes:
    """The bytes of the trace file at ``path``; FormatError naming it when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the trace ({exc.strerror or exc}); check the path") from None


def read_trace(path: Path) -> Segment:
    """The trace at ``path`` as a kubetape trace; FormatError naming the file if it is neither kubetape's
    nor SimKube's."""
    return trace_from_bytes(read_trace_bytes(path), str(path))


def trace_from_bytes(data: bytes, source: str) -> Segment:
    """:func:`read_trace` for bytes already read (a download, a message); ``source`` names them in errors."""
    if is_segment(data):
        return decode_segment(data, source)
    return simkube_to_trace(read_simkube_trace(data, source), source)


def read_native_trace(path: Path) -> Segment | SimkubeTrace:
    """The trace at ``path`` in its own format (a transform writes back what it read)."""
    data = read_trace_bytes(path)
    if is_segment(data):
        return decode_segment(data, str(path))
    return read_simkube_trace(data, str(path))


def initial_events(trace: Segment, *, time_ordered: bool = False) -> list[Event]:
    """The trace's events preceded by its keyframe's objects and lifecycles (live at its start).

    ``time_ordered`` sorts the events by time (stable: same-time events keep their recorded order), for
    readers that fold them into timelines; a replay plans from the recorded order."""
    events = sorted(trace.events, key=lambda e: e.ts_ms) if time_ordered else list(trace.events)
    if trace.keyframe is None:
        return events
    at = trace.header.start_ms
    initial = [
        Event.applied(at, e.key, e.obj or {}, e.spec_hash)
        for e in sorted(trace.keyframe.objects.values(), key=lambda e: e.key)
    ]
    return [*initial, *trace.keyframe.lifecycles.values(), *events]
