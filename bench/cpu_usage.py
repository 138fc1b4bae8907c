"""Where a benchmark's CPU went between two moments: how busy the machine's cores were, and each
simulated control-plane process's share of one core.

A rate compared with a ceiling means little on its own when the control plane shares a small machine
with everything else: if the cores were full in both runs, the ratio of the rates is the inverse ratio
of what each pod cost in CPU, and no client can raise it; if they were not, the difference is time the
client left unused. So the scale benchmark measures both, side by side, from ``/proc`` (Linux only).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

BENCH_PROCESS = "bench (replayer)"
"""The name this process's own CPU is reported under: the replayer runs inside the benchmark."""


@dataclass(frozen=True)
class CpuSnapshot:
    taken_at: float
    """``time.monotonic()`` when taken."""
    machine_busy_s: float
    """CPU seconds all cores together spent on anything but idling since boot."""
    process_s: Mapping[str, float]
    """CPU seconds (user and system) since each process started, summed by process name."""


def machine_busy_s(stat: str) -> float:
    """Busy CPU seconds from the text of ``/proc/stat``: every field of the ``cpu`` line but idle
    and iowait (steal counts as busy: the cores were not ours to use)."""
    fields = stat.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"/proc/stat does not start with the 'cpu' line: {fields[:1]!r}")
    ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / TICKS_PER_S


def process_cpu_s(stat: str) -> float:
    """User plus system CPU seconds from the text of ``/proc/PID/stat``. The name in parentheses may
    hold spaces and parentheses itself, so the fields are counted from its last ``)``."""
    after_name = stat.rsplit(")", 1)[1].split()
    # after_name[0] is field 3 (state); utime and stime are fields 14 and 15
    return (int(after_name[11]) + int(after_name[12])) / TICKS_PER_S


def snapshot(pids: Iterable[int]) -> CpuSnapshot:
    """The machine's busy time, and the CPU time of ``pids`` (by name) and of this process. A pid
    that exited meanwhile is left out (its CPU since the last snapshot is lost, not guessed)."""
    by_name: dict[str, float] = {}
    for pid in {*pids, os.getpid()}:
        try:
            name = (PROC / str(pid) / "comm").read_text().strip()
            seconds = process_cpu_s((PROC / str(pid) / "stat").read_text())
        except (OSError, IndexError, ValueError):
            continue
        label = BENCH_PROCESS if pid == os.getpid() else name
        by_name[label] = by_name.get(label, 0.0) + seconds
    return CpuSnapshot(time.monotonic(), machine_busy_s((PROC / "stat").read_text()), by_name)


def usage(before: CpuSnapshot, after: CpuSnapshot, cores: int | None = None) -> dict[str, Any]:
    """What was used between two snapshots: the wall seconds, the share of all cores the machine was
    busy, each process's share of one core, and the control plane's CPU seconds (every process but
    this one) and its share of one core."""
    cores = cores or os.cpu_count() or 1
    wall = max(after.taken_at - before.taken_at, 1e-9)
    spent = {
        name: max(after.process_s[name] - before.process_s.get(name, 0.0), 0.0) for name in after.process_s
    }
    busy = after.machine_busy_s - before.machine_busy_s
    control_plane = sum(s for name, s in spent.items() if name != BENCH_PROCESS)
    return {
        "wall_s": round(wall, 1),
        "machine_busy_of_all_cores": round(busy / (wall * cores), 3),
        "of_one_core": {name: round(s / wall, 3) for name, s in sorted(spent.items())},
        "control_plane_cpu_s": round(control_plane, 1),
        "control_plane_of_one_core": round(control_plane / wall, 2),
    }


class CpuTimeline:
    """The CPU used over a replay's trace time, from marks taken at its own samples (no second loop
    competes with it): in all, and per ``stretch_s`` of wall time, whether the cores were full. A replay
    waiting on latency leaves them idle in places; one bound by the cluster's work does not."""

    def __init__(self, pids: Iterable[int], stretch_s: float = 20.0) -> None:
        self._pids = list(pids)
        self._stretch_s = stretch_s
        self._first: CpuSnapshot | None = None
        self._last: CpuSnapshot | None = None
        self._stretch_start: CpuSnapshot | None = None
        self._ended = False
        self.stretches: list[dict[str, Any]] = []

    def mark(self, trace_s: float, trace_end_s: float) -> None:
        """At a sample in trace time; the first at or past ``trace_end_s`` is the last one taken."""
        if self._ended or trace_s <= 0:
            return
        now = snapshot(self._pids)
        self._first = self._first or now
        self._last = now
        self._ended = trace_s >= trace_end_s
        start = self._stretch_start
        if start is not None and (now.taken_at - start.taken_at >= self._stretch_s or self._ended):
            used = usage(start, now)
            self.stretches.append(
                {
                    "wall_s": round(now.taken_at - self._first.taken_at, 1),
                    "trace_s": round(trace_s, 1),
                    "machine_busy_of_all_cores": used["machine_busy_of_all_cores"],
                    "control_plane_of_one_core": used["control_plane_of_one_core"],
                }
            )
            start = None
        self._stretch_start = start or now

    def total(self) -> dict[str, Any] | None:
        """The whole trace time's :func:`usage`, or None before two marks."""
        if self._first is None or self._last is None or self._last is self._first:
            return None
        return usage(self._first, self._last)


@dataclass(frozen=True)
class ControlPlane:
    """The simulated control plane's processes, and the CPU they use with nothing asked of them (node
    leases, the controllers' resyncs, KWOK's heartbeats): a cost per pod is counted above that rate,
    or a slow replay would be charged for the time it took."""

    processes: Callable[[], list[int]]
    idle_of_one_core: float = 0.0

    def snapshot(self) -> CpuSnapshot:
        return snapshot(self.processes())

    def work_cpu_s(self, used: Mapping[str, Any]) -> float:
        """The control plane's CPU seconds in ``used`` (a :func:`usage`) above its idle rate."""
        return max(float(used["control_plane_cpu_s"]) - self.idle_of_one_core * float(used["wall_s"]), 0.0)
