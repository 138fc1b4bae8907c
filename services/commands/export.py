"""``kubetape export``: a time range of the segment store as one trace file (kubetape, or SimKube v2/v3)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import is_segment
from pipeline.formats.simkube import (
    SIMKUBE_TRACE_VERSION,
    SIMKUBE_V3,
    check_writable_version,
    read_simkube_trace,
)
from pipeline.model.errors import ConfigError
from pipeline.model.keys import ClusterId
from pipeline.model.timespec import parse_time
from pipeline.model.tracer_config import load_tracer_config
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import (
    ExportFilters,
    ExportFormat,
    ExportRequest,
    export_window,
    selectors_from_strings,
)
from pipeline.store.store_url import StoreLocation, cluster_location, open_segment_store
from pipeline.store.usage_history import open_usage_store
from pipeline.validate.apply import apply_transform
from pipeline.validate.apply_segment import apply_transform_to_segment
from pipeline.validate.tracefile import encode_trace
from pipeline.validate.transform import TraceEdit, load_trace_edit
from services.flags import accept_relative_times, add_cluster_argument, add_store_argument
from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class ExportSettings:
    segment_store: StoreLocation
    start: str
    output: Path
    end: str = "now"
    cluster: ClusterId | None = None
    format: str = "kubetape"
    simkube_version: int = SIMKUBE_TRACE_VERSION
    exclude_namespace: list[str] = field(default_factory=list)
    exclude_label: list[str] = field(default_factory=list)
    include_namespace: list[str] = field(default_factory=list)
    include_label: list[str] = field(default_factory=list)
    include_kind: list[str] = field(default_factory=list)
    exclude_kind: list[str] = field(default_factory=list)
    keep_owned: bool = False
    config: Path | None = None
    transform: Path | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    accept_relative_times(parser)
    add_store_argument(parser)
    add_cluster_argument(parser)
    parser.add_argument(
        "--from", dest="start", required=True, help="range start: -30m, -2h, now, epoch ms or ISO-8601"
    )
    parser.add_argument("--to", dest="end", default="now", help="range end, exclusive (default: now)")
    parser.add_argument(
        "--format",
        choices=[f.value for f in ExportFormat],
        default=ExportFormat.KUBETAPE.value,
        help="kubetape trace (default) or SimKube .sktrace (v2 unless --simkube-version 3)",
    )
    parser.add_argument(
        "--simkube-version",
        type=int,
        default=SIMKUBE_TRACE_VERSION,
        metavar="N",
        help=f"SimKube trace format version to write with --format simkube: {SIMKUBE_TRACE_VERSION} "
        f"(default, what released SimKube reads) or {SIMKUBE_V3} (tracked_objects instead of index)",
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="file to write")
    filters = parser.add_argument_group(
        "filters", "which objects the export keeps (every given filter must keep an object; repeatable)"
    )
    filters.add_argument(
        "--include-namespace",
        action="append",
        default=[],
        metavar="NS[,NS]",
        help="keep only objects of these namespaces (cluster-scoped objects are kept: filter them by kind)",
    )
    filters.add_argument(
        "--exclude-namespace",
        "--excluded-namespaces",
        action="append",
        default=[],
        metavar="NS[,NS]",
        help="drop objects of these namespaces (--excluded-namespaces a,b as skctl takes it)",
    )
    filters.add_argument(
        "--include-label",
        action="append",
        default=[],
        metavar="SELECTOR",
        help="keep only objects some such label selector matches (kubectl syntax: app=web,tier!=db, "
        "'env in (a,b)', '!spot')",
    )
    filters.add_argument(
        "--exclude-label",
        action="append",
        default=[],
        metavar="SELECTOR",
        help="drop objects such a label selector matches (kubectl syntax, as --include-label)",
    )
    filters.add_argument(
        "--include-kind",
        action="append",
        default=[],
        metavar="KIND[,KIND]",
        help="keep only objects of these kinds: Kind, or Kind.group (Deployment.apps) for one group",
    )
    filters.add_argument(
        "--exclude-kind",
        action="append",
        default=[],
        metavar="KIND[,KIND]",
        help="drop objects of these kinds",
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
        help="apply this transform file (YAML: redaction, name obfuscation, see examples/transforms; "
        "or a SKEL program ending in .skel) before the trace is written, so the raw objects never leave",
    )
    parser.set_defaults(settings=from_flags(ExportSettings), func=_run)


def _run(args: ExportSettings) -> int:
    if args.simkube_version != SIMKUBE_TRACE_VERSION and args.format != ExportFormat.SIMKUBE.value:
        raise ConfigError("--simkube-version applies to --format simkube only")
    check_writable_version(args.simkube_version)
    request = ExportRequest(
        parse_time(args.start, where="--from"),
        parse_time(args.end, where="--to"),
        ExportFormat(args.format),
        ExportFilters(
            excluded_namespaces=_split(args.exclude_namespace),
            excluded_labels=selectors_from_strings(args.exclude_label),
            suppress_owned=not args.keep_owned,
            included_namespaces=_split(args.include_namespace),
            included_labels=selectors_from_strings(args.include_label),
            included_kinds=_split(args.include_kind),
            excluded_kinds=_split(args.exclude_kind),
        ),
        load_tracer_config(args.config) if args.config else None,
        args.simkube_version,
    )
    # Load the transform before exporting: a bad transform file must fail before any work is done.
    transform = load_trace_edit(args.transform) if args.transform else None
    location = cluster_location(args.segment_store, args.cluster)
    catalog = SegmentCatalog(open_segment_store(location, must_exist=True))
    result = export_window(
        catalog,
        request,
        lambda w: print(f"kubetape: warning: {w}", file=sys.stderr),
        usage=open_usage_store(location, for_reading=True),
    )
    # The transform runs on the bytes in memory: nothing of the raw trace reaches the disk, not even a
    # temporary file, so a transform that fails leaves no unredacted copy behind.
    data = result.data if transform is None else _transformed(result.data, transform, args.output)
    _write_atomically(args.output, data)
    print(f"wrote {args.output}: {result.events} events, {len(data)} bytes", file=sys.stderr)
    return 0


def _split(values: list[str]) -> tuple[str, ...]:
    """Repeated flags and comma lists alike (``--exclude-namespace a,b`` as skctl's flag takes them)."""
    return tuple(item.strip() for value in values for item in value.split(",") if item.strip())


def _transformed(data: bytes, transform: TraceEdit, output: Path) -> bytes:
    if is_segment(data):
        return encode_segment(apply_transform_to_segment(decode_segment(data, "export"), transform)[0])
    trace = read_simkube_trace(data, "export")
    return encode_trace(apply_transform(trace, transform)[0], as_json=output.suffix.lower() == ".json")


def _write_atomically(path: Path, data: bytes) -> None:
    """Temp file beside ``path``, fsync, rename: a reader sees no file or the whole one."""
    tmp = path.with_name(path.name + ".partial")
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise ConfigError(f"{path}: cannot write the export ({exc.strerror or exc})") from None
