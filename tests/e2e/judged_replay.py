"""A ``kubetape replay`` run as a user types it, watched by the oracle while it runs: the simulated
cluster through the oracle's own watch (:mod:`tests.e2e.cluster_watch`), and the replay's trace clock
through the progress lines it prints (``[replay] … trace 12.3 s …``), each taken at the moment it
arrives. The clock readings are the only thing of the replay's the oracle uses, and it checks them
(:func:`tests.e2e.oracle.clock_problems`): monotonic, never faster than ``--speed``, at ``--speed`` while
it moves, and at the trace's end when the replay is over.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from services.mission import REPO_ROOT
from tests.e2e.cluster_watch import ClusterWatch, watching

PROGRESS = re.compile(r"^\[replay\] \d+/\d+ events, trace (?P<trace_s>[0-9.]+) s, ")
NAMESPACE_PREFIX = "kubetape"
"""``kubetape replay``'s default ``--namespace-prefix``: the replay's namespaces are ``kubetape-<ns>``."""
STALL_WALL_S = 120.0
"""A trace clock that has not moved for this long (wall s) is stuck, not waiting for a slow cluster
(``--max-lag``'s holds give up on an owner after 60 s): the replay is stopped and the test fails."""
RUN_LIMIT_WALL_S = 540.0
"""A bound against hanging, not a speed check."""


@dataclass(frozen=True, slots=True)
class JudgedReplay:
    report: dict[str, Any]
    """The replay's own report (``--report-json``): what is being checked, never the judge."""
    clock: list[tuple[float, float]]
    """(monotonic s when the line arrived, trace ms it stated), in order."""
    cluster: ClusterWatch
    speed: float
    stderr: str
    workdir: Path


def judged_replay(
    kubeconfig: Path, workdir: Path, namespaces: frozenset[str], *argv: str, speed: float = 10.0
) -> JudgedReplay:
    """``kubetape replay *argv --kubeconfig … --speed … --report-json …`` with progress lines on, its
    pods in the replay's namespaces of the recorded ``namespaces`` watched; fails with the replay's
    stderr when it exits non-zero, hangs, or its clock stalls."""
    report_path = workdir / "report.json"
    command = [
        sys.executable, "-m", "services.cli", "replay", *argv,
        "--kubeconfig", str(kubeconfig), "--speed", f"{speed:g}", "--report-json", str(report_path),
    ]  # fmt: skip
    with watching(kubeconfig, NAMESPACE_PREFIX, namespaces) as cluster:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True, bufsize=1)
        assert process.stderr is not None
        clock: list[tuple[float, float]] = []
        lines: list[str] = []
        reader = threading.Thread(target=_read_clock, args=(process.stderr, clock, lines), daemon=True)
        reader.start()
        problem = _wait(process, clock)
        reader.join(30)
    stderr = "".join(lines)
    assert problem is None, f"{problem}; the replay's stderr ends:\n{stderr[-3000:]}"
    assert process.returncode == 0, f"kubetape replay exited {process.returncode}:\n{stderr[-3000:]}"
    report: dict[str, Any] = json.loads(report_path.read_text())
    return JudgedReplay(report, clock, cluster, speed, stderr, workdir)


def _read_clock(stream: IO[str], clock: list[tuple[float, float]], lines: list[str]) -> None:
    for line in stream:
        arrived = time.monotonic()
        lines.append(line)
        match = PROGRESS.match(line)
        if match:
            clock.append((arrived, float(match["trace_s"]) * 1000))


def _wait(process: subprocess.Popen[str], clock: list[tuple[float, float]]) -> str | None:
    """None once the replay exits; else why it was stopped (its clock stalled, or it ran too long)."""
    started = time.monotonic()
    while process.poll() is None:
        now = time.monotonic()
        moved = _last_move(clock, started)
        if now - moved > STALL_WALL_S:
            process.kill()
            process.wait()
            at = clock[-1][1] / 1000 if clock else 0.0
            return f"the replay's trace clock stood at {at:g} s for {now - moved:.0f} wall s"
        if now - started > RUN_LIMIT_WALL_S:
            process.kill()
            process.wait()
            return f"the replay did not finish in {RUN_LIMIT_WALL_S:g} wall s"
        time.sleep(0.5)
    return None


def _last_move(clock: list[tuple[float, float]], started: float) -> float:
    """When the trace clock last moved (the replay's start, if it has not yet)."""
    readings = list(clock)
    for (_, before), (at, after) in zip(reversed(readings[:-1]), reversed(readings[1:]), strict=True):
        if after != before:
            return at
    return readings[0][0] if readings else started
