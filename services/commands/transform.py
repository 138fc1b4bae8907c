"""``kubetape transform TRACE FIX.yaml -o OUT`` or ``kubetape transform TRACE --skel FILE.skel -o OUT``:
apply a declarative transform (YAML, e.g. from ``validate --fix``) or a SKEL program (SimKube's
trace-editing language; ``skctl transform TRACE FILE.skel -o OUT`` works unchanged) to a trace.

The output keeps the input's format: a SimKube trace of the same version (JSON if OUT ends in ``.json``,
else msgpack; ``--simkube-version`` converts) with its index and lifecycle hashes recomputed, or a
kubetape trace/segment with keys and hashes recomputed.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class TransformSettings:
    trace: Path
    output: Path
    transform: Path | None = None
    skel: Path | None = None
    simkube_version: int | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "trace", type=Path, help="the input trace (SimKube v2/v3 msgpack/JSON, or kubetape trace/segment)"
    )
    parser.add_argument(
        "transform",
        type=Path,
        nargs="?",
        default=None,
        help="the transform file: YAML (e.g. from `validate --fix`), or a SKEL program if it ends in .skel",
    )
    parser.add_argument(
        "--skel", type=Path, default=None, metavar="FILE.skel", help="apply this SKEL program (any file name)"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        help="where to write the result (same format as the input; .json for a SimKube JSON trace)",
    )
    parser.add_argument(
        "--simkube-version",
        type=int,
        default=None,
        metavar="N",
        help="write a SimKube input as this trace format version (2 or 3; default: the input's)",
    )
    parser.set_defaults(settings=from_flags(TransformSettings), func=_run)


def _run(args: TransformSettings) -> int:
    from pipeline.formats.simkube import SimkubeTrace, check_writable_version, with_version
    from pipeline.formats.trace import read_native_trace
    from pipeline.model.errors import ConfigError
    from pipeline.validate.apply import TransformStats, apply_transform
    from pipeline.validate.apply_segment import apply_transform_to_segment
    from pipeline.validate.skel.program import load_skel
    from pipeline.validate.tracefile import AnyTrace, write_trace_file
    from pipeline.validate.transform import TraceEdit
    from services.trace_edit import load_edit

    if (args.transform is None) == (args.skel is None):
        raise ConfigError("give one transform: a YAML/.skel file after the trace, or --skel FILE.skel")
    if args.output.resolve() == args.trace.resolve():
        raise ConfigError(f"{args.output}: refusing to overwrite the input trace; choose another -o")
    if args.simkube_version is not None:
        check_writable_version(args.simkube_version)
    edit: TraceEdit
    if args.skel is not None:
        edit = load_skel(args.skel)
    else:
        assert args.transform is not None  # one of the two, checked above
        edit = load_edit(
            args.transform,
            as_skel=f"pass it with --skel {args.transform} (or name the file .skel)",
        )
    trace = read_native_trace(args.trace)
    result: AnyTrace
    stats: TransformStats
    if isinstance(trace, SimkubeTrace):
        result, stats = apply_transform(trace, edit)
        if args.simkube_version is not None:
            result = with_version(result, args.simkube_version)
    else:
        if args.simkube_version is not None:
            raise ConfigError("--simkube-version applies to SimKube traces; this is a kubetape trace")
        result, stats = apply_transform_to_segment(trace, edit)
    write_trace_file(result, args.output)
    print(
        f"{args.output}: {stats.objects_seen} objects seen, {stats.objects_modified} modified, "
        f"{stats.objects_dropped} dropped, {stats.objects_created} created, "
        f"{stats.events_dropped} emptied events dropped"
        + (
            f", {stats.usage_kept} usage samples kept, {stats.usage_dropped} dropped with their owners"
            if stats.usage_kept or stats.usage_dropped
            else ""
        )
    )
    return 0
