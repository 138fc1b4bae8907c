"""Where a kubetape service's memory goes in a real run: runs one ``kubetape`` command (the watcher, in
:mod:`bench.bench_record` ``--trace-watcher``) under tracemalloc and, when it ends, writes one JSON
document: the traced and resident memory over time, and the allocations alive at the traced high point
by traceback, beside those alive at the first sample (the process started and idle) and their growth.

tracemalloc slows the process down (about 2x) and adds its own memory to the resident figures: its
peaks are for attribution, the peaks :mod:`bench.bench_record` reports come from an untraced run.
Usage::

    .venv/bin/python -m bench.traced_watch OUT.json -- watch --config examples/tracer.yaml ...
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
FRAMES = 10
"""Frames kept per allocation: enough to reach from a library call back to kubetape's own code."""
EVERY_S = 2.0
"""How often the traced size is looked at; a snapshot is taken when it passed the last one's by
:data:`GROWTH`."""
GROWTH = 1.05
TOP = 40
IGNORED = (tracemalloc.__file__, __file__)
"""Allocations left out: tracemalloc's own and this sampler's statistics."""


def resident_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB, from the kernel."""
    fields = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def statistics(snapshot: tracemalloc.Snapshot) -> dict[tracemalloc.Traceback, tuple[int, int]]:
    """Size and count of the live allocations by traceback, tracemalloc's own left out."""
    kept = snapshot.filter_traces([tracemalloc.Filter(False, name) for name in IGNORED])
    return {s.traceback: (s.size, s.count) for s in kept.statistics("traceback")}


def frames(traceback: tracemalloc.Traceback) -> list[str]:
    """The traceback innermost last, as ``file:line``, the repository's paths made relative."""
    root = str(Path(__file__).resolve().parents[1]) + "/"
    return [f"{f.filename.removeprefix(root)}:{f.lineno}" for f in reversed(traceback)]


class Sampler:
    """Samples the traced and resident sizes every :data:`EVERY_S`, and keeps the statistics of the
    first snapshot and of the one at the traced high point."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.timeline: list[dict[str, float]] = []
        self.first: dict[tracemalloc.Traceback, tuple[int, int]] | None = None
        self.high: dict[tracemalloc.Traceback, tuple[int, int]] | None = None
        self.high_at_s = 0.0
        self.high_traced = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traced-watch sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(EVERY_S):
            self.sample()

    def sample(self) -> None:
        traced, peak = tracemalloc.get_traced_memory()
        rss, hwm = resident_mib()
        at = time.monotonic() - self.started
        self.timeline.append(
            {
                "at_s": round(at, 1),
                "traced_mib": round(traced / MIB, 1),
                "traced_peak_mib": round(peak / MIB, 1),
                "rss_mib": round(rss, 1),
                "hwm_mib": round(hwm, 1),
            }
        )
        if self.first is None or traced > self.high_traced * GROWTH:
            stats = statistics(tracemalloc.take_snapshot())
            if self.first is None:
                self.first = stats
            self.high, self.high_at_s, self.high_traced = stats, at, traced

    def report(self) -> dict[str, Any]:
        first, high = self.first or {}, self.high or {}
        top = sorted(high.items(), key=lambda kv: kv[1][0], reverse=True)[:TOP]
        growth = sorted(
            ((tb, size - first.get(tb, (0, 0))[0]) for tb, (size, _) in high.items()),
            key=lambda kv: kv[1],
            reverse=True,
        )[:TOP]
        return {
            "traced_high_mib": round(self.high_traced / MIB, 1),
            "traced_high_at_s": round(self.high_at_s, 1),
            "first_traced_mib": round(sum(size for size, _ in first.values()) / MIB, 1),
            "top_at_high": [
                {"kib": round(size / 1024, 1), "blocks": count, "traceback": frames(tb)}
                for tb, (size, count) in top
            ],
            "growth_since_first": [
                {"kib": round(grown / 1024, 1), "traceback": frames(tb)} for tb, grown in growth
            ],
            "timeline": self.timeline,
        }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="where the JSON report goes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the kubetape command and flags")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    tracemalloc.start(FRAMES)
    from services.cli import main as kubetape  # imported traced: the modules' own memory is counted

    sampler = Sampler()
    sampler.start()
    try:
        code = kubetape(command)
    finally:
        sampler.stop()
        sampler.sample()
        args.out.write_text(json.dumps(sampler.report(), indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
