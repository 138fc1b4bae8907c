"""``kubetape export``: a time range of the segment store as one trace file (kubetape or SimKube v2)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from pipeline.formats.simkube import SimkubeTrace
from pipeline.io.segment_store import LocalSegmentStore
from pipeline.model.errors import ConfigError
from pipeline.model.tracer_config import load_tracer_config
from pipeline.sink.catalog import SegmentCatalog
from pipeline.sink.export import (
    ExportFilters,
    ExportFormat,
    ExportRequest,
    export_window,
    parse_time,
    selectors_from_strings,
)
from pipeline.validate.apply import apply_transform
from pipeline.validate.apply_segment import apply_transform_to_segment
from pipeline.validate.tracefile import AnyTrace, read_any_trace, write_trace_file
from pipeline.validate.transform import Transform, load_transform
from services.commands.sink import add_store_argument


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "export", help="write a time range of the segment store as one self-contained trace file"
    )
    # argparse takes "-30m" for an option unless it looks like a negative number; widen its notion of a
    # negative number so relative times work without "--from=-30m" (no option of ours looks like that).
    parser._negative_number_matcher = re.compile(r"^-\d+(\.\d+)?[smhd]?$")
    add_store_argument(parser)
    parser.add_argument(
        "--from", dest="start", required=True, help="range start: -30m, -2h, now, epoch ms or ISO-8601"
    )
    parser.add_argument("--to", dest="end", default="now", help="range end, exclusive (default: now)")
    parser.add_argument(
        "--format",
        choices=[f.value for f in ExportFormat],
        default=ExportFormat.KUBETAPE.value,
        help="kubetape trace (default) or SimKube v2 .sktrace",
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="file to write")
    parser.add_argument(
        "--exclude-namespace", action="append", default=[], help="drop objects of this namespace (repeatable)"
    )
    parser.add_argument(
        "--exclude-label",
        action="append",
        default=[],
        help="drop objects whose labels match key=value[,key=value] (repeatable)",
    )
    parser.add_argument(
        "--keep-owned",
        action="store_true",
        help="keep objects owned by another exported object (default: drop them, their owner recreates them)",
    )
    parser.add_argument(
        "--config", type=Path, default=None, help="tracer config to embed (default: kubetape's built-in one)"
    )
    parser.add_argument(
        "--transform",
        type=Path,
        default=None,
        help="apply this transform file (redaction, name obfuscation; see examples/transforms) before "
        "the trace is written, so the raw objects never leave",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if not args.segment_dir.is_dir():
        raise ConfigError(f"segment store {args.segment_dir} does not exist; pass --segment-dir")
    request = ExportRequest(
        parse_time(args.start, what="--from"),
        parse_time(args.end, what="--to"),
        ExportFormat(args.format),
        ExportFilters(
            excluded_namespaces=tuple(args.exclude_namespace),
            excluded_labels=selectors_from_strings(args.exclude_label),
            suppress_owned=not args.keep_owned,
        ),
        load_tracer_config(args.config) if args.config else None,
    )
    # Load the transform before exporting: a bad transform file must fail before any work is done.
    transform = load_transform(args.transform) if args.transform else None
    catalog = SegmentCatalog(LocalSegmentStore(args.segment_dir))
    result = export_window(catalog, request, lambda w: print(f"kubetape: warning: {w}", file=sys.stderr))
    tmp = args.output.with_name(args.output.name + ".partial")
    tmp.write_bytes(result.data)
    if transform is not None:
        _transform_in_place(tmp, transform)
    tmp.replace(args.output)
    print(f"wrote {args.output}: {result.events} events, {len(result.data)} bytes", file=sys.stderr)
    return 0


def _transform_in_place(path: Path, transform: Transform) -> None:
    trace = read_any_trace(path)
    if isinstance(trace, SimkubeTrace):
        transformed: AnyTrace = apply_transform(trace, transform)[0]
    else:
        transformed = apply_transform_to_segment(trace, transform)[0]
    write_trace_file(transformed, path)
