"""How closely a replay's running pods followed the recording, per owner: pure functions.

The replay is sampled every so often (the sampler lists the replay's pods and groups them by the
recorded owner the rewriting stamped on their templates); the recording is a step function per owner
built from the recorded lifecycles. Comparing a sample with the recording at exactly the same trace
instant would punish a replay for the simulated controllers' reaction time around every change, which
at speed 10 is ten times larger in trace time. So the comparison has a resolution: a sample at trace
offset ``t`` is right when its count lies within the range the recording took during the preceding
``resolution_ms`` of trace time (one second of scaled, i.e. wall, time by default), and its error is
its distance to that range.

Fidelity is counted per instant of trace time, not per wall-clock sample. While the trace clock stands
still (the convergence governor waits for a cluster that fell behind, or the replay is paused), every
sample repeats one trace instant with the simulated cluster still catching up; in simulated time all
of that happens at that instant. So consecutive samples at one trace instant count once, as the last
of them: the state the cluster reached when the clock went on (:func:`trace_instants`). Without that,
a 1,000-node replay whose first 11,000 pods take the scheduler four minutes counted those minutes of
catching up, sampled twice a second for each of its 200 owners, as misses at trace time 0. The time the
clock waited is reported beside the fidelity (``convergence.held_seconds``), so it is not hidden.

At ``--speed max`` the clock has no one speed: it runs as fast as the cluster keeps up, which at scale
ranges from 1 to 28 within one run. A resolution converted to trace time with the run's overall speed
is then too short wherever the clock ran faster than average (a change made a wall second ago looks
like one made a fraction of a second ago) and too long wherever it ran slower. So such a replay keeps
the clock's path (:class:`TraceClockPath`), and each sample's window is the trace time the clock covered
during the preceding wall seconds in which it ran.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

Timeline = Sequence[tuple[int, int]]
"""(trace offset ms, pods running) at each change, sorted by offset."""


@dataclass(frozen=True, slots=True)
class OwnerSample:
    """Pods running per recorded owner at one instant of the replay."""

    trace_ms: float
    running: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class OwnerFidelity:
    """One owner's comparison: the largest error, and how many samples were within one pod."""

    owner: str
    samples: int
    max_error: int
    within_one: int
    recorded_peak: int
    replay_peak: int
    mean_error: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "owner": self.owner,
            "samples": self.samples,
            "max_error": self.max_error,
            "mean_error": round(self.mean_error, 4),
            "samples_within_one_pod": self.within_one,
            "recorded_peak": self.recorded_peak,
            "replay_peak": self.replay_peak,
        }


def trace_instants(samples: Sequence[OwnerSample]) -> list[OwnerSample]:
    """One sample per instant of trace time: of consecutive samples taken while the trace clock stood
    still, the last (module docstring)."""
    out: list[OwnerSample] = []
    for sample in samples:
        if out and out[-1].trace_ms == sample.trace_ms:
            out[-1] = sample
        else:
            out.append(sample)
    return out


def value_at(timeline: Timeline, offset_ms: float) -> int:
    """The recorded count at ``offset_ms`` (0 before the first change)."""
    index = bisect_right([t for t, _ in timeline], offset_ms)
    return timeline[index - 1][1] if index else 0


def range_over(timeline: Timeline, start_ms: float, end_ms: float) -> tuple[int, int]:
    """(min, max) of the recorded count over ``[start_ms, end_ms]``."""
    values = [value_at(timeline, start_ms)]
    values += [count for t, count in timeline if start_ms < t <= end_ms]
    return min(values), max(values)


class TraceClockPath:
    """Where a replay's trace clock was over wall time, to turn a window of wall time before a sample
    into the trace time the clock covered in it (module docstring).

    ``points`` are (wall s, trace ms) as the sampler saw them; ``speed`` is the nominal speed the
    windows handed to :meth:`window_ms` were converted with (the run's overall speed). Wall time in
    which the clock stood still (a hold, a pause) does not count: at a fixed speed a window is that
    speed times the resolution whatever the holds, and so it is here, with the speed of the moment."""

    def __init__(self, points: Sequence[tuple[float, float]], speed: float) -> None:
        if not speed > 0:
            raise ValueError(f"a trace clock path needs a positive nominal speed, not {speed!r}")
        self.speed = speed
        self.points = list(points)
        start = points[0][1] if points else 0.0
        self._running_s = [0.0]
        """Wall seconds the clock ran, up to each point at which it had moved on."""
        self._trace_ms = [start]
        for (wall_a, trace_a), (wall_b, trace_b) in pairwise(points):
            if trace_b > trace_a and wall_b > wall_a:
                self._running_s.append(self._running_s[-1] + wall_b - wall_a)
                self._trace_ms.append(trace_b)
        # beyond either end the clock is taken to have gone on at the pace of the nearest stretch
        self._first_rate = self._rate(0) if len(self._trace_ms) > 1 else speed * 1000
        self._last_rate = self._rate(len(self._trace_ms) - 2) if len(self._trace_ms) > 1 else speed * 1000

    def _rate(self, index: int) -> float:
        """Trace ms per wall second over the stretch after point ``index``."""
        trace = self._trace_ms[index + 1] - self._trace_ms[index]
        return trace / (self._running_s[index + 1] - self._running_s[index])

    def _running_at(self, trace_ms: float) -> float:
        """Wall seconds the clock had run when it reached ``trace_ms``."""
        return _along(self._trace_ms, self._running_s, trace_ms, 1 / self._first_rate, 1 / self._last_rate)

    def _trace_at(self, running_s: float) -> float:
        """Trace ms the clock had reached after running ``running_s`` wall seconds."""
        return _along(self._running_s, self._trace_ms, running_s, self._first_rate, self._last_rate)

    def window_ms(self, trace_ms: float, nominal_ms: float) -> float:
        """The trace time the clock covered in the wall time ``nominal_ms`` stands for at the nominal
        speed, up to the moment it reached ``trace_ms``."""
        wall_s = nominal_ms / 1000 / self.speed
        return trace_ms - self._trace_at(self._running_at(trace_ms) - wall_s)


def _along(xs: Sequence[float], ys: Sequence[float], x: float, before: float, after: float) -> float:
    """``y`` at ``x`` on the straight stretches through the points (``xs`` strictly increasing),
    continued past the first point with slope ``before`` and past the last with slope ``after``."""
    if x <= xs[0]:
        return ys[0] + (x - xs[0]) * before
    if x >= xs[-1]:
        return ys[-1] + (x - xs[-1]) * after
    i = bisect_left(xs, x)
    share = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + share * (ys[i] - ys[i - 1])


def compare_owners(
    recorded: Mapping[str, Timeline],
    samples: Sequence[OwnerSample],
    resolution_ms: float,
    settle_ms: Mapping[str, float] | None = None,
    clock: TraceClockPath | None = None,
) -> list[OwnerFidelity]:
    """Per owner seen in the recording or the replay, the sample errors against the recording.

    ``settle_ms`` adds, per owner, trace time on top of the resolution: an owner judged by the pods it
    asked for (not by recorded lifecycles) needs its simulated controller, the scheduler and KWOK to
    turn a new ``spec.replicas`` into Running pods, which a recorded lifecycle already includes.
    With a ``clock``, both are nominal: each sample's window follows the clock's speed at that sample.
    """
    owners = sorted(set(recorded) | {owner for s in samples for owner in s.running})
    windows: dict[float, list[float]] = {}
    out = []
    for owner in owners:
        timeline = recorded.get(owner, ())
        window = resolution_ms + (settle_ms or {}).get(owner, 0.0)
        if window not in windows:
            windows[window] = [
                window if clock is None else clock.window_ms(s.trace_ms, window) for s in samples
            ]
        errors = []
        for sample, sample_window in zip(samples, windows[window], strict=True):
            low, high = range_over(timeline, sample.trace_ms - sample_window, sample.trace_ms)
            count = sample.running.get(owner, 0)
            errors.append(max(0, low - count, count - high))
        out.append(
            OwnerFidelity(
                owner,
                len(errors),
                max(errors, default=0),
                sum(1 for e in errors if e <= 1),
                max((count for _, count in timeline), default=0),
                max((s.running.get(owner, 0) for s in samples), default=0),
                sum(errors) / len(errors) if errors else 0.0,
            )
        )
    return out


# ---- the verdict ----------------------------------------------------------------------------------
BOUND_PODS = 1
"""The fidelity bound: every sample of every owner within this many pods of the recording."""

SETTLE_FACTORS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0)
"""Windows, in multiples of the resolution, tried when looking for how long the cluster took to settle.

The ladder stops at ten resolutions (ten wall seconds by default): a longer window forgives almost any
count that the recording took at some point, so it would no longer say anything about fidelity."""


def settle_needed(
    recorded: Mapping[str, Timeline],
    samples: Sequence[OwnerSample],
    resolution_ms: float,
    settle_ms: Mapping[str, float] | None = None,
    clock: TraceClockPath | None = None,
) -> float | None:
    """The shortest resolution (trace ms, from :data:`SETTLE_FACTORS`) at which every owner's samples
    are within :data:`BOUND_PODS` of the recording; None when even the longest is not enough."""
    for factor in SETTLE_FACTORS:
        extra = {owner: ms * factor for owner, ms in (settle_ms or {}).items()}
        window = resolution_ms * factor
        owners = compare_owners(recorded, samples, window, extra, clock)
        if all(o.max_error <= BOUND_PODS for o in owners):
            return window
    return None


@dataclass(frozen=True, slots=True)
class FidelityVerdict:
    """What a replay's fidelity figures mean, in one word and its reasons.

    * ``held``: every owner within the bound, and the replay kept up with the trace;
    * ``degraded``: the replayer's writes ran late or the simulated cluster converged more slowly than
      the resolution allows (a busy machine, an overloaded control plane). Where the bound was missed,
      it holds once the measured settle time is allowed, so the errors are the machine's, not the
      replay's; the figures are reported, but they are not a fidelity result;
    * ``failed``: the bound was missed, and allowing the cluster time to settle does not explain it;
    * ``unmeasured``: the recording has no pod counts to compare with (no lifecycles were recorded).
    """

    verdict: str
    reasons: tuple[str, ...]
    settle_ms: float | None
    """The window (trace ms) the comparison needed for the bound to hold, None if none did."""

    def to_json(self) -> dict[str, object]:
        return {"verdict": self.verdict, "reasons": list(self.reasons), "settle_ms": self.settle_ms}


def judge(
    recorded: Mapping[str, Timeline],
    samples: Sequence[OwnerSample],
    resolution_ms: float,
    *,
    speed: float,
    lateness_p99_ms: float | None,
    settle_ms: Mapping[str, float] | None = None,
    largest_sample_gap_s: float = 0.0,
    clock: TraceClockPath | None = None,
) -> FidelityVerdict:
    """The verdict on a replay: ``resolution_ms`` and ``settle_ms`` (see :func:`compare_owners`) are in
    trace time at ``speed`` (nominal, with a ``clock``), ``lateness_p99_ms`` in wall time."""
    if not recorded:
        return FidelityVerdict("unmeasured", ("the recording has no pod lifecycles to compare with",), None)
    resolution_wall_s = resolution_ms / 1000 / speed
    reasons = []
    if lateness_p99_ms is not None and lateness_p99_ms > resolution_wall_s * 1000:
        reasons.append(
            f"the replayer's writes ran late: lateness p99 {lateness_p99_ms:.0f} ms is beyond the "
            f"{resolution_wall_s:g} s resolution"
        )
    if largest_sample_gap_s > resolution_wall_s:
        reasons.append(
            f"the replay's pods could not be sampled as often as asked: {largest_sample_gap_s:.1f} s passed "
            f"between two samples, beyond the {resolution_wall_s:g} s resolution, so what happened in "
            "between was not seen"
        )
    settle = settle_needed(recorded, samples, resolution_ms, settle_ms, clock)
    if settle is None:
        longest = resolution_wall_s * SETTLE_FACTORS[-1]
        return FidelityVerdict(
            "failed",
            (
                f"an owner stayed more than {BOUND_PODS} pod(s) off the recording even when the cluster "
                f"is allowed {longest:g} s to settle",
                *reasons,
            ),
            None,
        )
    if settle > resolution_ms:
        reasons.append(
            f"the simulated cluster needed up to {settle / 1000 / speed:g} s to converge on the recorded "
            f"pod counts, beyond the {resolution_wall_s:g} s resolution (a busy machine or an "
            "overloaded control plane); within that time every owner was within the bound"
        )
    return FidelityVerdict("degraded" if reasons else "held", tuple(reasons), settle)
