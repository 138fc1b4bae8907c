"""Reading and writing the trace files validation and transforms work on.

Two kinds of file are accepted: SimKube traces (v2 msgpack or JSON; v1 is upgraded by the reader) and
kubetape traces/segments. Validation works on the SimKube form (:func:`as_simkube`: a segment's
keyframe is folded into its first event, so objects that existed at its start count). Transforms keep
the input's format (:func:`write_trace_file`).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from pipeline.formats.assemble import assemble_window, trace_to_simkube
from pipeline.formats.segment.content import Segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import SimkubeTrace, simkube_to_wire, write_simkube_trace
from pipeline.formats.trace import read_native_trace
from pipeline.model.errors import FormatError

AnyTrace = SimkubeTrace | Segment


def as_simkube(trace: AnyTrace) -> SimkubeTrace:
    """The SimKube form validation reads."""
    if isinstance(trace, SimkubeTrace):
        return trace
    if trace.keyframe is not None:
        h = trace.header
        trace = assemble_window(
            trace.keyframe,
            trace.events,
            h.start_ms,
            max(h.end_ms, h.start_ms + 1),
            config=trace.config,
            suppress_owned=False,
        )
    return trace_to_simkube(trace, keep_status=True)  # validate the objects as the trace holds them


def read_trace_file(path: Path) -> SimkubeTrace:
    """The trace in ``path`` in SimKube form (see :func:`as_simkube`)."""
    return as_simkube(read_native_trace(path))


def encode_trace(trace: SimkubeTrace, *, as_json: bool) -> bytes:
    """SimKube v2 bytes: msgpack (what SimKube reads) or, with ``as_json``, JSON like SimKube's fixtures.

    JSON cannot carry ``pod_lifecycles`` (tuple owners, u64 hashes as keys): such traces raise FormatError.
    """
    if not as_json:
        return write_simkube_trace(trace)
    if trace.pod_lifecycles:
        raise FormatError(
            "this trace has pod lifecycles, which JSON cannot represent; write a .sktrace (msgpack) instead"
        )
    write_simkube_trace(trace)  # the same compatibility checks as the msgpack path
    return orjson.dumps(simkube_to_wire(trace), option=orjson.OPT_INDENT_2)


def write_trace_file(trace: AnyTrace, path: Path) -> None:
    """Write ``trace`` to ``path``: a kubetape segment as a segment; a SimKube trace as JSON if the name
    ends in ``.json``, else msgpack."""
    if isinstance(trace, SimkubeTrace):
        data = encode_trace(trace, as_json=path.suffix.lower() == ".json")
    else:
        data = encode_segment(trace)
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise FormatError(f"{path}: cannot write the file ({exc.strerror or exc})") from None
