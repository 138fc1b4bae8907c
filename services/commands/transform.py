"""``kubetape transform TRACE FIX.yaml -o OUT``: apply a declarative transform to a trace.

The output keeps the input's format: a SimKube v2 trace (JSON if OUT ends in ``.json``, else msgpack)
with its index and lifecycle hashes recomputed, or a kubetape trace/segment with keys and hashes
recomputed.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class TransformSettings:
    trace: Path
    transform: Path
    output: Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "trace", type=Path, help="the input trace (SimKube v2 msgpack/JSON, or a kubetape trace or segment)"
    )
    parser.add_argument("transform", type=Path, help="the transform file (YAML), e.g. from `validate --fix`")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        help="where to write the result (same format as the input; .json for a SimKube JSON trace)",
    )
    parser.set_defaults(settings=from_flags(TransformSettings), func=_run)


def _run(args: TransformSettings) -> int:
    from pipeline.formats.simkube import SimkubeTrace
    from pipeline.formats.trace import read_native_trace
    from pipeline.model.errors import ConfigError
    from pipeline.validate.apply import TransformStats, apply_transform
    from pipeline.validate.apply_segment import apply_transform_to_segment
    from pipeline.validate.tracefile import AnyTrace, write_trace_file
    from pipeline.validate.transform import load_transform

    if args.output.resolve() == args.trace.resolve():
        raise ConfigError(f"{args.output}: refusing to overwrite the input trace; choose another -o")
    transform = load_transform(args.transform)
    trace = read_native_trace(args.trace)
    result: AnyTrace
    stats: TransformStats
    if isinstance(trace, SimkubeTrace):
        result, stats = apply_transform(trace, transform)
    else:
        result, stats = apply_transform_to_segment(trace, transform)
    write_trace_file(result, args.output)
    print(
        f"{args.output}: {stats.objects_seen} objects seen, {stats.objects_modified} modified, "
        f"{stats.objects_dropped} dropped, {stats.objects_created} created, "
        f"{stats.events_dropped} emptied events dropped"
    )
    return 0
