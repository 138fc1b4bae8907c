"""``kubetape compare RUN …``: how faithful each replay was to its recording, and which differences
between configurations are real.

Each RUN is a run directory (``run.json`` …) or a directory of them (a sweep's ``--out``). Runs sharing
a configuration (same trace, speed, node pools and labels) are repetitions; each configuration is
compared with the first one, and a difference is called only when its t-interval excludes zero.
``--max-owner-error N`` turns the fidelity check into an exit code: 1 when any run's per-owner pod
count strays more than N pods from the recording's (within the comparison window).

When a run was autoscaled (``kubetape sweep --autoscaler karpenter``), a table sets it beside the
fixed-pool runs of the same trace: node-hours, cost, pending→running p50/p99 and fidelity.
``--node-price`` prices the fixed pools' node-hours; an autoscaled run's cost is its replay's own.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import ConfigError
from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class CompareSettings:
    runs: list[Path]
    json: bool = False
    html: Path | None = None
    confidence: float = 0.95
    window: int | None = None
    max_owner_error: float | None = None
    node_price: float | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs", type=Path, nargs="+", metavar="RUN", help="run directories (or their parents)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--html", type=Path, default=None, help="also write a self-contained HTML report here"
    )
    parser.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help="trace seconds a replay may trail the recording (default: the run's speed = one wall second)",
    )
    parser.add_argument(
        "--max-owner-error",
        type=float,
        default=None,
        help="exit 1 when a run's per-owner running-pod error exceeds this many pods",
    )
    parser.add_argument(
        "--node-price",
        type=float,
        default=None,
        metavar="DOLLARS",
        help="$/hour of one fixed-pool node, for the cost column beside autoscaled runs",
    )
    parser.set_defaults(settings=from_flags(CompareSettings), func=_run)


def _run(args: CompareSettings) -> int:
    from pipeline.analytics.autoscale_compare import (
        is_autoscaled,
        provisioning_side_by_side,
        render_side_by_side,
    )
    from pipeline.analytics.compare import compare_runs, render_text, worst_owner_error
    from pipeline.analytics.report_html import render_report
    from pipeline.analytics.runs import find_runs, read_run

    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence must be between 0 and 1, got {args.confidence}")
    if args.node_price is not None and args.node_price < 0:
        raise ConfigError(f"--node-price must not be negative, got {args.node_price}")
    runs = [read_run(path) for path in find_runs(args.runs)]
    comparison = compare_runs(runs, args.confidence, args.window)
    side_by_side = (
        provisioning_side_by_side(runs, comparison, args.node_price) if any(map(is_autoscaled, runs)) else []
    )
    if args.json:
        document = comparison.to_json()
        if side_by_side:
            document["autoscaler_vs_fixed"] = [row.to_json() for row in side_by_side]
        print(json.dumps(document, indent=2))
    else:
        print(render_text(comparison))
        if side_by_side:
            print(render_side_by_side(side_by_side))
    if args.html is not None:
        args.html.write_text(render_report("kubetape compare", runs, comparison))
    if args.max_owner_error is not None:
        worst = worst_owner_error(comparison)
        over = {name: error for name, error in worst.items() if error > args.max_owner_error}
        if over:
            print(
                f"fidelity check failed: per-owner pod-count error above {args.max_owner_error:g} in "
                + ", ".join(f"{name} ({error:g})" for name, error in over.items()),
            )
            degraded = [name for name in over if comparison.verdicts[name]["verdict"] == "degraded"]
            if degraded:
                print(
                    f"the replayer reported {', '.join(degraded)} as degraded: the machine did not keep up "
                    "with the trace, so those errors measure contention, not the replay (see the reasons)"
                )
            return 1
    return 0
