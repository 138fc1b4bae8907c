"""``kubetape export``: a time range of the segment store as one trace file (kubetape, or SimKube v2/v3).

skctl's export flags work as in skctl: ``-s/--start-time`` (relative to the end, default ``-30m``),
``-t/--end-time`` and its default excluded namespaces; ``--from`` is kubetape's start, relative to now.
"""

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
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.keys import ClusterId
from pipeline.model.timespec import format_time, parse_time
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
from pipeline.validate.transform import TraceEdit
from services.flags import accept_relative_times, add_cluster_argument, add_store_argument
from services.settings import from_flags
from services.skctl_flags import refuse
from services.trace_edit import load_edit

SKCTL_EXCLUDED_NAMESPACES = (
    "cert-manager",
    "default",
    "kube-public",
    "kube-node-lease",
    "kube-system",
    "local-path-storage",
    "monitoring",
    "simkube",
)
"""What ``skctl export`` excludes unless told (its ``--excluded-namespaces`` default): the cluster's own
namespaces and SimKube's tooling. kubetape excludes the same unless a namespace flag is given."""
SKCTL_START_TIME = "-30m"
"""``skctl export``'s default start: 30 minutes before the end time."""

SIMKUBE_SUFFIXES = (".sktrace", ".json")
KUBETAPE_SUFFIXES = (".kts", ".kseg")


@dataclass(frozen=True, slots=True)
class ExportSettings:
    segment_store: StoreLocation
    output: Path
    start: str | None = None
    """``--from``: relative to now."""
    start_time: str | None = None
    """``-s/--start-time`` (skctl's): relative to the end."""
    end: str = "now"
    cluster: ClusterId | None = None
    format: str = "kubetape"
    simkube_version: int = SIMKUBE_TRACE_VERSION
    exclude_namespace: list[str] | None = None
    """None: no namespace flag given, so skctl's default exclusions apply."""
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
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--from",
        dest="start",
        default=None,
        help="range start, relative to now: -30m, -2h, now, epoch ms or ISO-8601 with a timezone",
    )
    start.add_argument(
        "-s",
        "--start-time",
        dest="start_time",
        default=None,
        help=f"range start as skctl takes it: a relative time counts back from the END (-30m: 30 "
        f"minutes before --to), or an absolute time (default: {SKCTL_START_TIME})",
    )
    parser.add_argument(
        "--to",
        "-t",
        "--end-time",
        dest="end",
        default="now",
        help="range end, exclusive: now, -10m (before now), epoch ms or ISO-8601 (default: now). An "
        "export starts at its first event when nothing was recorded before it; its end is kept",
    )
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
    parser.add_argument(
        "-o",
        "--output",
        "--output-path",
        type=Path,
        required=True,
        help="file to write; its suffix must fit --format: .sktrace (msgpack) or .json (JSON) for "
        "simkube, .kts or .kseg (or none) for kubetape",
    )
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
        default=None,
        metavar="NS[,NS]",
        help="drop objects of these namespaces (--excluded-namespaces a,b as skctl takes it). Without "
        "this flag or --include-namespace, skctl's default is dropped: "
        f"{','.join(SKCTL_EXCLUDED_NAMESPACES)}; --exclude-namespace '' drops none",
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
        "--excluded-labels",
        action="append",
        default=[],
        metavar="SELECTOR",
        help="drop objects such a label selector matches (kubectl syntax, as --include-label; "
        "--excluded-labels as skctl took it)",
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
    refuse(
        parser,
        "--tracer-address",
        instead="kubetape export reads the segment store (--segment-store DIR_OR_URL); the sink serves "
        "the same export over HTTP at POST /export",
    )
    parser.set_defaults(settings=from_flags(ExportSettings), func=_run)


def _run(args: ExportSettings) -> int:
    if args.simkube_version != SIMKUBE_TRACE_VERSION and args.format != ExportFormat.SIMKUBE.value:
        raise ConfigError("--simkube-version applies to --format simkube only")
    check_writable_version(args.simkube_version)
    as_json = _output_is_json(args.output, ExportFormat(args.format))
    start_ms, end_ms = export_range(args.start, args.start_time, args.end)
    excluded = excluded_namespaces(args.exclude_namespace, args.include_namespace)
    if args.exclude_namespace is None and not args.include_namespace:
        print(
            f"kubetape: leaving out skctl's default namespaces {','.join(excluded)} "
            "(--exclude-namespace '' keeps them)",
            file=sys.stderr,
        )
    request = ExportRequest(
        start_ms,
        end_ms,
        ExportFormat(args.format),
        ExportFilters(
            excluded_namespaces=excluded,
            excluded_labels=selectors_from_strings(args.exclude_label),
            suppress_owned=not args.keep_owned,
            included_namespaces=_split(args.include_namespace),
            included_labels=selectors_from_strings(args.include_label),
            included_kinds=_split(args.include_kind),
            excluded_kinds=_split(args.exclude_kind),
        ),
        load_tracer_config(args.config) if args.config else None,
        args.simkube_version,
        from_first_event=True,
    )
    # Load the transform before exporting: a bad transform file must fail before any work is done.
    transform = (
        load_edit(args.transform, as_skel="export --transform reads SKEL from a file named .skel: rename it")
        if args.transform
        else None
    )
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
    data, events = result.data, result.events
    if transform is not None:
        data, events = _transformed(result.data, transform, as_json=as_json)
    elif as_json:
        try:
            data = encode_trace(read_simkube_trace(data, "export"), as_json=True)
        except FormatError as exc:
            raise FormatError(f"{args.output}: {exc}") from None
    _write_atomically(args.output, data)
    seconds = (result.end_ms - result.start_ms) / 1000
    print(
        f"wrote {args.output}: {events} events over {seconds:g} s from {format_time(result.start_ms)}, "
        f"{len(data)} bytes",
        file=sys.stderr,
    )
    return 0


def export_range(start: str | None, start_time: str | None, end: str) -> tuple[int, int]:
    """``[start, end)`` in epoch ms: ``--from`` counts from now, skctl's ``--start-time`` from the end
    (its default, ``-30m``, when neither is given); absolute times are the same for both."""
    end_ms = parse_time(end, where="--to")
    if start is not None:
        return parse_time(start, where="--from"), end_ms
    return parse_time(start_time or SKCTL_START_TIME, end_ms, where="--start-time"), end_ms


def excluded_namespaces(exclude: list[str] | None, include: list[str]) -> tuple[str, ...]:
    """The namespaces to leave out: those given, else skctl's default unless ``--include-namespace``
    names the namespaces to keep (then nothing more is left out)."""
    if exclude is not None:
        return _split(exclude)
    return () if include else SKCTL_EXCLUDED_NAMESPACES


def _output_is_json(output: Path, fmt: ExportFormat) -> bool:
    """Whether to write JSON; ConfigError when the suffix names the other format than ``--format``."""
    suffix = output.suffix.lower()
    if fmt is ExportFormat.SIMKUBE:
        if suffix in KUBETAPE_SUFFIXES:
            raise ConfigError(
                f"{output}: {suffix} names a kubetape trace but --format is simkube; write to a .sktrace "
                "(msgpack, what SimKube reads) or .json file"
            )
        return suffix == ".json"
    if suffix in SIMKUBE_SUFFIXES:
        raise ConfigError(
            f"{output}: {suffix} names a SimKube trace but --format is kubetape (the default); add "
            "--format simkube, or name the file .kts"
        )
    return False


def _split(values: list[str]) -> tuple[str, ...]:
    """Repeated flags and comma lists alike (``--exclude-namespace a,b`` as skctl's flag takes them)."""
    return tuple(item.strip() for value in values for item in value.split(",") if item.strip())


def _transformed(data: bytes, transform: TraceEdit, *, as_json: bool) -> tuple[bytes, int]:
    """The transformed file's bytes and its events (a transform drops the events it empties)."""
    if is_segment(data):
        segment = apply_transform_to_segment(decode_segment(data, "export"), transform)[0]
        return encode_segment(segment), len(segment.events)
    trace = apply_transform(read_simkube_trace(data, "export"), transform)[0]
    return encode_trace(trace, as_json=as_json), len(trace.events)


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
