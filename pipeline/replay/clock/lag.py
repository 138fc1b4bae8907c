"""How far, in trace time, an owner's replayed pods trail the recording: pure functions over one owner's
recorded timeline.

An owner with ``count`` Running pods at trace instant ``T`` is within a window ``W`` when ``count`` lies
within ``tolerance`` pods of the range the recording took over ``[T - W, T]``: the count at ``T - W`` and
every change after it (:func:`pipeline.replay.report.fidelity.range_over`; a count between two recorded
ones is on its way from one to the other). Its **lag** is the shortest such window (an infimum): 0 when it
matches the recording now, ``T - t`` when the count recorded just before the change at ``t`` is the
one it still matches, infinite when it matches nothing the recording took (0 before its first change
included). So an owner is within a window ``W > 0`` exactly when its lag is less than ``W``.

The convergence governor keeps every owner's lag below ``--max-lag`` while the trace clock moves, and
the fidelity verdict judges each sample by it at the stated settle. :func:`deadline_ms` looks ahead: the
first trace instant at which an owner whose count stays as it is would reach a lag of ``max_lag_ms``,
because the recording moved away from it (a change is due, or an old count leaves the window).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

from pipeline.replay.report.fidelity import Timeline


def _fits(count: int, low: int, high: int, tolerance: int) -> bool:
    return low - tolerance <= count <= high + tolerance


def lag_ms(timeline: Timeline, trace_ms: float, count: int, tolerance: int) -> float:
    """The owner's lag at ``trace_ms`` with ``count`` pods (module docstring); ``math.inf`` when the
    count matches nothing the recording took up to then."""
    index = bisect_right(timeline, trace_ms, key=lambda change: change[0])
    low = high = timeline[index - 1][1] if index else 0
    if _fits(count, low, high, tolerance):
        return 0.0
    for j in range(index - 1, -1, -1):
        before = timeline[j - 1][1] if j else 0  # the count until the change at timeline[j]
        low, high = min(low, before), max(high, before)
        if _fits(count, low, high, tolerance):
            return trace_ms - timeline[j][0]
    return math.inf


def _range(timeline: Timeline, offsets: Sequence[int], start_ms: float, end_ms: float) -> tuple[int, int]:
    """(min, max) over ``[start_ms, end_ms]``: the count at ``start_ms`` and every change after it."""
    first = bisect_right(offsets, start_ms)
    last = bisect_right(offsets, end_ms)
    values = [timeline[first - 1][1] if first else 0] + [count for _, count in timeline[first:last]]
    return min(values), max(values)


def deadline_ms(
    timeline: Timeline,
    trace_ms: float,
    count: int,
    *,
    tolerance: int,
    max_lag_ms: float,
    until_ms: float,
) -> float:
    """The first trace instant from ``trace_ms`` at which ``count`` pods would be outside the recorded
    range over the preceding ``max_lag_ms`` (a lag of ``max_lag_ms``): ``trace_ms`` itself when they are
    already, ``math.inf`` when they are not before ``until_ms`` (looking further is not asked for).

    Adding a recorded change to the window only widens its range, so the count can leave the range
    only when an old count leaves the window: at ``t + max_lag_ms`` for a change at ``t``."""
    offsets = [t for t, _ in timeline]
    if not _fits(count, *_range(timeline, offsets, trace_ms - max_lag_ms, trace_ms), tolerance):
        return trace_ms
    for j in range(bisect_right(offsets, trace_ms - max_lag_ms), len(offsets)):
        at = offsets[j] + max_lag_ms
        if at > until_ms:
            break
        if at > trace_ms and not _fits(count, *_range(timeline, offsets, offsets[j], at), tolerance):
            return at
    return math.inf
