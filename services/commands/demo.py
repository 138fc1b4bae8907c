"""``kubetape demo``: the mission end to end on the local stack.

Brings the stack up, records a scripted workload on the ``source`` cluster through the watcher, Kafka
and the sink, exports the recorded range, replays it on ``sim`` at speed 10 and prints the fidelity
report (see :mod:`services.mission`).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.stack.progress import stderr_reporter
from pipeline.stack.stack import LocalStack
from services.mission import run_mission
from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class DemoSettings:
    stack_dir: Path | None = None
    speed: float = 10.0
    workdir: Path | None = None
    hpa: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack-dir", type=Path, default=None)
    parser.add_argument("--speed", type=float, default=10.0, help="replay speed (default 10)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the trace, the report, the segments and the logs go (default: ./kubetape-demo; "
        "outside the stack's data, so `kubetape stack down` leaves them)",
    )
    parser.add_argument(
        "--hpa",
        action="store_true",
        help="the workload ends with a Deployment whose HPA scales it 2→4→2 as a load rises and falls "
        "(source serves the Metrics API; about 3 minutes more; docs/hpa-replay.md)",
    )
    parser.set_defaults(settings=from_flags(DemoSettings), func=_run)


def _run(args: DemoSettings) -> int:
    stack = LocalStack(args.stack_dir, report=stderr_reporter)
    workdir = (args.workdir or Path.cwd() / "kubetape-demo").resolve()
    started = time.monotonic()
    result = run_mission(stack, workdir, speed=args.speed, say=stderr_reporter, hpa=args.hpa)
    print("\n== recorded trace ==")
    print(result.inspect.rstrip())
    print("\n== replay on cluster 'sim' ==")
    print(result.summary.rstrip())
    print(owner_table(result.report))
    events = result.report["events"]
    verdict = result.report["owner_fidelity"]["verdict"]
    elapsed = time.monotonic() - started
    print(
        f"\nDone in {elapsed:.0f}s: fidelity {verdict}, "
        f"{events['applied']} applied, {events['failed']} failed."
    )
    print(f"Your files (kept by `kubetape stack down`): {workdir}")
    print(f"  trace:  {result.trace}")
    print(f"  report: {result.report_path} (JSON: verdict and figures first, timelines after)")
    print(f"  as a page: .venv/bin/kubetape report {result.report_path} --html {workdir / 'report.html'}")
    print(
        "The stack keeps running (`.venv/bin/kubetape stack env`); "
        "stop it with `.venv/bin/kubetape stack down`."
    )
    return 0 if events["failed"] == 0 and verdict in ("held", "degraded") else 1


def owner_table(report: dict[str, Any]) -> str:
    """Per recorded owner, the figures the verdict is made of.

    Peaks are left out on purpose: recorded container start times have whole-second precision, so
    during a rollout the recording shows old and new pods running at once for up to a second, and a
    recorded peak of 10 beside a replayed 6 would read as a failed replay when the per-sample error
    is 0. The JSON report still has both peaks."""
    owners = report["owner_fidelity"]["owners"]
    if not owners:
        return ""
    width = max(len(o["owner"]) for o in owners)
    lines = [f"  {'recorded owner':<{width}}  samples within 1 pod  largest error (pods)"]
    for o in owners:
        within = f"{o['samples_within_one_pod']}/{o['samples']}"
        lines.append(f"  {o['owner']:<{width}}  {within:<20}  {o['max_error']}")
    return "\n".join(lines)
