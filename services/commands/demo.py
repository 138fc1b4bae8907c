"""``kubetape demo``: the mission end to end on the local stack.

Brings the stack up, records a scripted workload on the ``source`` cluster through the watcher, Kafka
and the sink, exports the recorded range, replays it on ``sim`` at speed 10 and prints the fidelity
report (see :mod:`services.mission`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from pipeline.stack.progress import stderr_reporter
from pipeline.stack.stack import LocalStack
from services.mission import run_mission


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo", help="record a scripted workload on the local stack and replay it faster (the mission)"
    )
    parser.add_argument("--stack-dir", type=Path, default=None)
    parser.add_argument("--speed", type=float, default=10.0, help="replay speed (default 10)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where segments, logs, the trace and the report go (default: <stack dir>/demo)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    stack = LocalStack(args.stack_dir, report=stderr_reporter)
    workdir = args.workdir or stack.stack_dir / "demo"
    started = time.monotonic()
    result = run_mission(stack, workdir, speed=args.speed, say=stderr_reporter)
    print("\n== recorded trace ==")
    print(result.inspect.rstrip())
    print("\n== replay on cluster 'sim' ==")
    print(result.summary.rstrip())
    events = result.report["events"]
    elapsed = time.monotonic() - started
    print(f"\nDone in {elapsed:.0f}s: {events['applied']} applied, {events['failed']} failed.")
    print(f"Trace: {result.trace}")
    print(f"Full report: {json.dumps(result.report['lateness_ms'])} lateness (ms); JSON in {workdir}")
    print("The stack keeps running (`.venv/bin/kubetape stack env`).")
    print("Stop it with `.venv/bin/kubetape stack down`.")
    return 0 if events["failed"] == 0 else 1
