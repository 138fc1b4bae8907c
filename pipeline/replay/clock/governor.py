"""Convergence-aware time scaling: the trace clock waits for a simulated cluster that falls behind.

A replay at speed 10 asks the simulated control plane for ten times the recorded rate of change. When
the scheduler, the controllers or KWOK cannot keep up, the replay's pods trail the recording further
and further, and from then on the run simulates nothing of the recording: its figures measure the
machine. The governor compares each sample of the replay's pods with the recording (per owner, as
:mod:`pipeline.replay.report.fidelity` does) and holds the trace clock while an owner is more than
:data:`~pipeline.replay.report.fidelity.BOUND_PODS` off every count the recording took during the last
``max_lag_ms`` of trace time. The clock runs again once every owner has caught up.

The clock must not run on where nobody looks: at speed 34 it covers 17 trace seconds between two
samples half a second apart, and a Deployment that asked for 34 more pods just after one sample was 42
trace seconds behind at the next (measured at 1,000 nodes, ``--max-lag 15``). So each observation also
sets the trace instant up to which the clock may run before the next one (:attr:`horizon_ms`): the
first instant at which an owner whose pods stay as they are would be ``max_lag_ms`` behind the
recording (:func:`pipeline.replay.clock.lag.deadline_ms`: a change is due, or an old count leaves the
window), and no further than ``max_advance_ms`` (``max_lag_ms`` by default) past this observation in
any case. The scheduler stops the clock there by itself (``Scheduler.limit``), and the sampler looks
again. So an owner's lag while the clock moves stays within ``max_lag_ms``, unless its pods went away
between two observations, and then by at most the trace time between them. The report states the
largest lag any owner reached at an observation the clock had moved to, whose it was, and the longest
stretch of trace time between two observations (the sample period of the clock's path).

An owner that cannot converge at all (too few virtual nodes for its pods, an object the apiserver
refused) would hold the clock for ever; so a hold ends once ``max_hold_s`` of wall time pass without
progress (no owner behind got closer to the recording), and the owners still behind then are
given up on: they no longer hold the clock, and the report names them. A slow cluster that keeps
converging is waited for however long it takes: a 1,000-node cluster needs minutes to start the
first 11,000 pods of a trace, and a hold cut at a fixed time gave up every owner there and never
held again (measured: 60 % of owner-samples within one pod instead of the bound). An owner given up
on holds the clock again once it has caught up: it could converge after all.

Each hold also says where the cluster was behind, from the replay's pods at that sample:

* ``scheduling``: pods pending without a node (the scheduler is the bottleneck);
* ``kwok``: pods bound to a node but not Running yet (KWOK's stages are);
* ``controllers``: pods missing altogether (the replayed controllers, or the replayer's writes, are).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from pipeline.replay.clock.lag import deadline_ms, lag_ms
from pipeline.replay.report.fidelity import BOUND_PODS, Timeline, range_over
from pipeline.replay.report.pod_tally import PodCounts


@dataclass(slots=True)
class GovernorReport:
    """What the governor did, for the replay report."""

    holds: int = 0
    held_s: float = 0.0
    bottlenecks: Counter[str] = field(default_factory=Counter)
    """Samples taken while holding, by where the cluster was behind."""
    given_up: dict[str, float] = field(default_factory=dict)
    """Owners that never caught up, with the trace ms at which the governor gave up on them."""
    achieved: list[tuple[float, float]] = field(default_factory=list)
    """(wall seconds since trace start, trace ms reached), once per sample: the achieved speed."""
    largest_lag: tuple[float, str, float] | None = None
    """(lag ms, owner, trace ms) of the largest lag seen at an observation the clock had moved to;
    owners given up on are left out (they are named in ``given_up``)."""
    clock_period_ms: float = 0.0
    """The most trace time the clock covered between two observations: the sample period of its path."""

    def to_json(self, max_lag_ms: float, speed: float) -> dict[str, Any]:
        total = sum(self.bottlenecks.values())
        lag, owner, at = self.largest_lag or (0.0, None, None)
        return {
            "max_lag_ms": max_lag_ms,
            "largest_lag": {
                # a count the recording never took is behind by no finite time: null, with the owner
                "lag_ms": round(lag, 3) if math.isfinite(lag) else None,
                "owner": owner,
                "trace_ms": None if at is None else round(at, 3),
            },
            "clock_period_ms": round(self.clock_period_ms, 3),
            "holds": self.holds,
            "held_seconds": round(self.held_s, 3),
            "bottleneck_share": {k: round(v / total, 3) for k, v in sorted(self.bottlenecks.items())},
            "given_up_owners": dict(sorted(self.given_up.items())),
            "achieved_speed": _speeds(self.achieved, speed),
        }


def _speeds(achieved: list[tuple[float, float]], requested: float) -> dict[str, Any]:
    """Overall achieved speed and per-interval speeds at about ten points of the run."""
    if len(achieved) < 2:
        return {"overall": None, "requested": requested, "over_time": []}
    (w0, t0), (w1, t1) = achieved[0], achieved[-1]
    step = max(1, len(achieved) // 10)
    points = achieved[::step] + ([achieved[-1]] if (len(achieved) - 1) % step else [])
    over_time = [
        {"wall_s": round(b[0] - w0, 2), "speed": round((b[1] - a[1]) / 1000 / (b[0] - a[0]), 3)}
        for a, b in pairwise(points)
        if b[0] > a[0]
    ]
    overall = (t1 - t0) / 1000 / (w1 - w0) if w1 > w0 else None
    return {
        "overall": None if overall is None else round(overall, 3),
        "requested": requested,
        "over_time": over_time,
    }


MAX_POINTS = 20_000
"""Achieved-speed points kept (thinned to half beyond)."""


class ConvergenceGovernor:
    """Decides, at each sample, whether the trace clock must wait for the cluster (module docstring)."""

    def __init__(
        self,
        recorded: Mapping[str, Timeline],
        *,
        max_lag_ms: float,
        max_hold_s: float = 60.0,
        tolerance: int = BOUND_PODS,
        max_advance_ms: float | None = None,
    ) -> None:
        self._recorded = recorded
        self.tolerance = tolerance
        self.max_lag_ms = max_lag_ms
        self.max_hold_s = max_hold_s
        self.max_advance_ms = max_lag_ms if max_advance_ms is None else max_advance_ms
        """The most trace time the clock may cover between two observations, whatever lies ahead."""
        self._held_since: float | None = None
        self._last: dict[str, int] = {}
        """The owners behind at the previous sample, with their distance (pods) from the recording."""
        self._progress_at = 0.0
        """When an owner behind last got closer to the recording (wall seconds)."""
        self._ignored: set[str] = set()
        """Owners given up on and not caught up since."""
        self.report = GovernorReport()
        self._observed_ms: float | None = None
        """The trace instant of the last observation."""
        self.horizon_ms = self.horizon(0.0, {})
        """Where the trace clock must stand still until the next observation (module docstring)."""

    @property
    def holding(self) -> bool:
        return self._held_since is not None

    def behind(self, trace_ms: float, counts: Mapping[str, PodCounts]) -> list[str]:
        """Owners whose Running pods are more than ``tolerance`` (by default the fidelity bound) off
        every count of the recording's last ``max_lag_ms``."""
        return list(self._distances(trace_ms, counts))

    def _distances(self, trace_ms: float, counts: Mapping[str, PodCounts]) -> dict[str, int]:
        """Per owner behind (and not given up on), how many pods it is outside the bound."""
        out = {}
        for owner, timeline in self._recorded.items():
            low, high = range_over(timeline, trace_ms - self.max_lag_ms, trace_ms)
            running = counts.get(owner, PodCounts()).running
            distance = max(low - self.tolerance - running, running - high - self.tolerance, 0)
            if owner in self._ignored:
                if distance == 0:
                    self._ignored.discard(owner)  # caught up after all: it holds the clock again
                continue
            if distance:
                out[owner] = distance
        return out

    def horizon(self, trace_ms: float, counts: Mapping[str, PodCounts]) -> float:
        """The trace instant up to which the clock may run from ``trace_ms`` before the cluster is
        looked at again: where the first owner (not given up on) whose pods stay as ``counts`` says
        would fall ``max_lag_ms`` behind, and no more than ``max_advance_ms`` ahead."""
        until = trace_ms + self.max_advance_ms
        horizon = until
        for owner, timeline in self._recorded.items():
            if owner in self._ignored:
                continue
            running = counts.get(owner, PodCounts()).running
            deadline = deadline_ms(
                timeline,
                trace_ms,
                running,
                tolerance=self.tolerance,
                max_lag_ms=self.max_lag_ms,
                until_ms=horizon,
            )
            horizon = min(horizon, deadline)
        return horizon

    def _note_lags(self, trace_ms: float, counts: Mapping[str, PodCounts]) -> None:
        """At an observation the clock moved to: the trace time it covered, and the largest lag."""
        if self._observed_ms is not None:
            if trace_ms <= self._observed_ms:
                return  # the clock stood still: the lags in trace time are the ones already seen
            self.report.clock_period_ms = max(self.report.clock_period_ms, trace_ms - self._observed_ms)
        self._observed_ms = trace_ms
        for owner, timeline in self._recorded.items():
            if owner in self._ignored:
                continue
            lag = lag_ms(timeline, trace_ms, counts.get(owner, PodCounts()).running, self.tolerance)
            if lag > 0 and (self.report.largest_lag is None or lag > self.report.largest_lag[0]):
                self.report.largest_lag = (lag, owner, trace_ms)

    def begin(self, wall_s: float) -> None:
        """Trace time began at ``wall_s``: the first point of the clock's path, so the stretch before
        the first sample counts in the achieved speed and in the windows of the samples after it."""
        if not self.report.achieved:
            self.report.achieved.append((wall_s, 0.0))

    def observe(self, wall_s: float, trace_ms: float, counts: Mapping[str, PodCounts]) -> bool:
        """One sample at ``wall_s`` (the clock, seconds) and trace time ``trace_ms``: whether to hold."""
        self.report.achieved.append((wall_s, trace_ms))
        if len(self.report.achieved) > MAX_POINTS:  # a followed topic runs for months: thin, keep the ends
            self.report.achieved = [*self.report.achieved[:-1:2], self.report.achieved[-1]]
        distances = self._distances(trace_ms, counts)
        if distances and self._held_since is not None:
            # Progress: an owner behind at the last sample got closer (or caught up). While the clock
            # holds, the recording's counts stand still, so only the cluster moves these distances.
            if any(distances.get(owner, 0) < before for owner, before in self._last.items()):
                self._progress_at = wall_s
            elif wall_s - self._progress_at > self.max_hold_s:
                for owner in distances:
                    self.report.given_up[owner] = trace_ms
                    self._ignored.add(owner)
                distances = {}
        self._last = distances
        self._note_lags(trace_ms, counts)
        self.horizon_ms = trace_ms if distances else self.horizon(trace_ms, counts)
        behind = list(distances)
        if behind:
            self.report.bottlenecks[_bottleneck(behind, counts)] += 1
            if self._held_since is None:
                self._held_since = self._progress_at = wall_s
                self.report.holds += 1
            return True
        if self._held_since is not None:
            self.report.held_s += wall_s - self._held_since
            self._held_since = None
        return False

    def finish(self, wall_s: float) -> None:
        """Close a hold still open when the replay ends."""
        if self._held_since is not None:
            self.report.held_s += wall_s - self._held_since
            self._held_since = None


def _bottleneck(owners: list[str], counts: Mapping[str, PodCounts]) -> str:
    unscheduled = sum(counts.get(o, PodCounts()).unscheduled for o in owners)
    bound = sum(counts.get(o, PodCounts()).bound for o in owners)
    if unscheduled == 0 and bound == 0:
        return "controllers"
    return "scheduling" if unscheduled >= bound else "kwok"
