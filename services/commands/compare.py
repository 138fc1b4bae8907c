"""``kubetape compare RUN …``: how faithful each replay was to its recording, and which differences
between configurations are real.

Each RUN is a run directory (``run.json`` …) or a directory of them (a sweep's ``--out``). Runs sharing
a configuration (same trace, speed, node pools and labels) are repetitions; each configuration is
compared with the first one, and a difference is called only when its t-interval excludes zero.
``--max-owner-error N`` turns the fidelity check into an exit code: 1 when any run's per-owner pod
count strays more than N pods from the recording's (within the comparison window).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pipeline.model.errors import ConfigError


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "compare",
        help="fidelity of replays against their recording and run-vs-run differences with intervals",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pipeline.analytics.compare import compare_runs, render_text, worst_owner_error
    from pipeline.analytics.report_html import render_report
    from pipeline.analytics.runs import find_runs, read_run

    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence must be between 0 and 1, got {args.confidence}")
    runs = [read_run(path) for path in find_runs(args.runs)]
    comparison = compare_runs(runs, args.confidence, args.window)
    if args.json:
        print(json.dumps(comparison.to_json(), indent=2))
    else:
        print(render_text(comparison))
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
