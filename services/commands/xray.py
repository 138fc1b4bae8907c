"""``kubetape xray TRACE``: browse a trace (kubetape trace or segment, SimKube v2/v3) in the terminal;
``kubetape xray --segment-store S --from -30m [--to now]`` browses a window of a segment store, assembled
as ``kubetape export`` would write it.

The events over time (``/`` filters by kind, namespace/name, type or finding code; ``j``/``k`` or the
arrows move, Space expands the selected event: its object, time and validation findings), an object's
versions (Enter) with the diff of one against the previous (``d``), and an owner's pods over time (``p``).
A row whose object has ``kubetape validate`` findings is marked (✗ an error, ! warnings only). Escape
collapses or goes back, ``q`` quits. It takes the place of SimKube's ``skctl xray TRACE``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from services.flags import accept_relative_times, add_cluster_argument, add_store_argument
from services.settings import from_flags

if TYPE_CHECKING:
    from pipeline.formats.segment.content import Segment
    from pipeline.formats.xray import Mark
    from pipeline.model.keys import ClusterId
    from pipeline.store.store_url import StoreLocation


@dataclass(frozen=True, slots=True)
class XraySettings:
    segment_store: StoreLocation
    trace: Path | None = None
    start: str | None = None
    end: str = "now"
    cluster: ClusterId | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    accept_relative_times(parser)
    parser.add_argument(
        "trace",
        type=Path,
        nargs="?",
        default=None,
        help="the trace to browse (kubetape trace or segment, SimKube v2/v3 msgpack/JSON); or give --from",
    )
    add_store_argument(parser)
    add_cluster_argument(parser)
    parser.add_argument(
        "--from",
        dest="start",
        default=None,
        help="browse the segment store's window from here instead of a file: -30m, -2h, epoch ms or ISO-8601",
    )
    parser.add_argument("--to", dest="end", default="now", help="the window's end, exclusive (default: now)")
    parser.set_defaults(settings=from_flags(XraySettings), func=_run)


def load(args: XraySettings) -> tuple[Segment, str]:
    """The trace ``args`` name, and how to title it: the file, or the store's window."""
    from pipeline.formats.trace import read_trace
    from pipeline.model.errors import ConfigError
    from pipeline.model.timespec import parse_time
    from pipeline.store.catalog import SegmentCatalog
    from pipeline.store.export import ExportRequest, window_trace
    from pipeline.store.store_url import cluster_location, open_segment_store

    if (args.trace is None) == (args.start is None):
        raise ConfigError("give a trace file, or --from (and --to) to browse a window of --segment-store")
    if args.trace is not None:
        return read_trace(args.trace), str(args.trace)
    assert args.start is not None  # one of the two, checked above
    request = ExportRequest(parse_time(args.start, where="--from"), parse_time(args.end, where="--to"))
    location = cluster_location(args.segment_store, args.cluster)
    catalog = SegmentCatalog(open_segment_store(location, must_exist=True))
    trace = window_trace(catalog, request, lambda w: print(f"kubetape: warning: {w}", file=sys.stderr))
    return trace, f"{location} from {args.start} to {args.end}"


def validation_marks(trace: Segment) -> list[Mark]:
    """``kubetape validate``'s findings on ``trace``, as the marks xray puts on the rows they concern."""
    from pipeline.formats.xray import Mark
    from pipeline.validate.rules import validate_trace
    from pipeline.validate.tracefile import as_simkube

    simkube = as_simkube(trace)
    return [
        Mark(
            kind=f.obj.kind,
            namespace=f.obj.namespace or "",
            name=f.obj.name,
            seconds=(f.ts, *(simkube.events[index].ts for index in f.repeated_at)),
            code=f.code,
            severity=f.severity.value,
            message=f.message,
        )
        for f in validate_trace(simkube)
    ]


def _run(args: XraySettings) -> int:
    from pipeline.formats.xray import browse
    from services.xray_app import XrayApp  # Textual loads only for this command

    trace, source = load(args)
    XrayApp(browse(trace, validation_marks(trace)), source).run()
    return 0
