"""How closely a replay's running pods followed the recording, per owner: pure functions.

The replay is sampled every so often (the sampler lists the replay's pods and groups them by the
recorded owner the rewriting stamped on their templates); the recording is a step function per owner
built from the recorded lifecycles, or from the pods each owner asked for. Comparing a sample with the
recording at exactly the same trace instant would punish a replay for the simulated controllers'
reaction time around every change. So each sample is judged over a **settle** stated in trace time: a
sample at trace offset ``t`` is right when its count lies within :data:`BOUND_PODS` of the range the
recording took over ``[t - settle, t]``, i.e. when the owner's lag (:mod:`pipeline.replay.clock.lag`) is less
than the settle; its error is its distance to that range. The settle is one number for every sample
of a run, at fixed speeds and at ``--speed max`` alike (``--settle``; by default ``--max-lag``, the lag
the convergence governor keeps while the clock moves). The machine falling behind (late writes, samples
too far apart) makes the verdict ``degraded``; it never widens the window: a window that followed the
clock's speed at ``--speed max`` counted a Deployment 42 trace seconds and 34 pods behind as within
one pod (issue 33).

Fidelity is counted per instant of trace time, not per wall-clock sample. While the trace clock stands
still (the convergence governor waits for a cluster that fell behind, or the replay is paused), every
sample repeats one trace instant with the simulated cluster still catching up; in simulated time all
of that happens at that instant. So consecutive samples at one trace instant count once, as the last
of them: the state the cluster reached when the clock went on (:func:`trace_instants`). Without that,
a 1,000-node replay whose first 11,000 pods take the scheduler four minutes counted those minutes of
catching up, sampled twice a second for each of its 200 owners, as misses at trace time 0. The time the
clock waited is reported beside the fidelity (``convergence.held_seconds``), so it is not hidden.

**Owners the simulated HPA decides** (``--autoscaler hpa``) are judged against the replicas the
recorded HPA chose, with the HPA's own reaction time ``R`` (trace ms, per owner, see
:func:`pipeline.replay.hpa.reaction.reaction_time_ms`) in place of the settle: two HPAs fed the same
load decide at their own sync and scrape instants, so either may act up to ``R`` after the load
changed, the simulated one *before* the recorded one as well as after it. A sample at ``t`` is right
when it lies within :data:`BOUND_PODS` of the range the recording took over ``[t - R, t + R]`` (the
settle, when longer, extends the past side), *and* the count the recording had at ``t`` lies within
:data:`BOUND_PODS` of the range the replay took over ``[t - R, t + R]``: the window forgives when a
decision came, never whether it came, so a recorded peak shorter than ``2R`` the simulated HPA never
reached is still a miss. Samples before ``R`` (the simulated HPA had no chance to act yet) are not
judged; a count the recording took only in that stretch, more than :data:`BOUND_PODS` from any it
takes later, is a decision nobody judged, so the verdict cannot be ``held`` (:func:`unjudged_decisions`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Timeline = Sequence[tuple[int, int]]
"""(trace offset ms, pods running) at each change, sorted by offset."""

BOUND_PODS = 1
"""The fidelity bound: every sample of every owner within this many pods of the recording."""


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
    hpa_reaction_ms: float | None = None
    """The simulated HPA decides this owner: its reaction time, the window it is judged over."""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "owner": self.owner,
            "samples": self.samples,
            "max_error": self.max_error,
            "mean_error": round(self.mean_error, 4),
            "samples_within_one_pod": self.within_one,
            "recorded_peak": self.recorded_peak,
            "replay_peak": self.replay_peak,
        }
        if self.hpa_reaction_ms is not None:
            out["hpa_reaction_ms"] = round(self.hpa_reaction_ms)
        return out


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


def compare_owners(
    recorded: Mapping[str, Timeline],
    samples: Sequence[OwnerSample],
    settle_ms: float,
    hpa_reactions: Mapping[str, float] | None = None,
) -> list[OwnerFidelity]:
    """Per owner seen in the recording or the replay, the sample errors against the recording over the
    preceding ``settle_ms`` of trace time; for an owner of ``hpa_reactions`` (owner → the simulated
    HPA's reaction time, trace ms), over ``[t - R, t + R]`` from ``R`` on (the module docstring)."""
    reactions = hpa_reactions or {}
    times = [s.trace_ms for s in samples]
    owners = sorted(set(recorded) | {owner for s in samples for owner in s.running})
    out = []
    for owner in owners:
        timeline = recorded.get(owner, ())
        reaction = reactions.get(owner)
        errors = []
        for sample in samples:
            missed = 0
            if reaction is None:
                start, end = sample.trace_ms - settle_ms, sample.trace_ms
            elif sample.trace_ms < reaction:
                continue  # the simulated HPA cannot have acted yet
            else:
                start, end = sample.trace_ms - max(settle_ms, reaction), sample.trace_ms + reaction
                # and the other way: what the recording had then, the replay had within R of it
                seen_low, seen_high = _replay_range(samples, times, owner, sample.trace_ms - reaction, end)
                then = value_at(timeline, sample.trace_ms)
                missed = max(0, seen_low - then, then - seen_high)
            low, high = range_over(timeline, start, end)
            count = sample.running.get(owner, 0)
            error = max(0, low - count, count - high)
            errors.append(max(error, missed))
        out.append(
            OwnerFidelity(
                owner,
                len(errors),
                max(errors, default=0),
                sum(1 for e in errors if e <= BOUND_PODS),
                max((count for _, count in timeline), default=0),
                max((s.running.get(owner, 0) for s in samples), default=0),
                sum(errors) / len(errors) if errors else 0.0,
                reaction,
            )
        )
    return out


def _replay_range(
    samples: Sequence[OwnerSample], times: Sequence[float], owner: str, start_ms: float, end_ms: float
) -> tuple[int, int]:
    """(min, max) of the replay's count of ``owner`` over the samples in ``[start_ms, end_ms]``
    (``times``: the samples' trace times, sorted as the samples are)."""
    window = samples[bisect_left(times, start_ms) : bisect_right(times, end_ms)]
    counts = [s.running.get(owner, 0) for s in window]
    return (min(counts), max(counts)) if counts else (0, 0)


# ---- the verdict ----------------------------------------------------------------------------------
SETTLE_FACTORS = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0)
"""Multiples of the stated settle tried, when the bound was missed at it, to tell a cluster that took
longer to converge from one that never did. They never change the figures: those are at the stated
settle. The ladder stops at ten, and at a quarter of the trace
(:func:`~pipeline.replay.report.settle.longest_stretch_ms`): a longer window forgives almost any count
the recording took at some point, a skipped step among them, so it would no longer say anything about
the replay."""


def stretched_settles(settle_ms: float, longest_ms: float = float("inf")) -> list[float]:
    """The settles the verdict tries (trace ms): the stated one, then :data:`SETTLE_FACTORS` times it
    up to ``longest_ms`` (:func:`~pipeline.replay.report.settle.longest_stretch_ms`: a part of the
    trace, beyond which a window forgives a skipped step)."""
    return [settle_ms, *(settle_ms * f for f in SETTLE_FACTORS if settle_ms * f <= longest_ms)]


def settle_needed(
    recorded: Mapping[str, Timeline],
    samples: Sequence[OwnerSample],
    settle_ms: float,
    hpa_reactions: Mapping[str, float] | None = None,
    longest_ms: float = float("inf"),
) -> float | None:
    """The shortest settle of :func:`stretched_settles` at which every owner's samples are within
    :data:`BOUND_PODS` of the recording; None when even the longest is not enough. An HPA's owner's
    window is its reaction time, or the settle once longer."""
    for settle in stretched_settles(settle_ms, longest_ms):
        owners = compare_owners(recorded, samples, settle, hpa_reactions)
        if all(o.max_error <= BOUND_PODS for o in owners):
            return settle
    return None


def unjudged_decisions(recorded: Mapping[str, Timeline], hpa_reactions: Mapping[str, float]) -> list[str]:
    """A reason per autoscaled owner whose recording, before ``R``, went more than :data:`BOUND_PODS`
    beyond every count it has from ``R`` on. Samples before ``R`` are not judged and a sample at ``t``
    asks the replay for what the recording had at ``t``, so such a count (a whole peak before ``R``) is
    asked of no sample: without this, a simulated HPA that never made it was called held. A change
    before ``R`` whose count lasts past ``R`` is judged by the samples after it, and says nothing."""
    out = []
    for owner, reaction in sorted(hpa_reactions.items()):
        timeline = recorded.get(owner, ())
        low, high = range_over(timeline, 0, reaction)
        after_low, after_high = range_over(timeline, reaction, float("inf"))
        if low < after_low - BOUND_PODS or high > after_high + BOUND_PODS:
            out.append(
                f"{owner}: the recording went from {low} to {high} pods before the simulated HPA's "
                f"reaction time ({reaction / 1000:g} s of trace), where nothing is judged, and never "
                "again after it; replay from earlier in the recording, or at a speed whose reaction "
                "time is shorter"
            )
    return out


@dataclass(frozen=True, slots=True)
class FidelityVerdict:
    """What a replay's fidelity figures mean, in one word and its reasons.

    * ``held``: every owner-instant within the bound at the stated settle, and the machine kept up;
    * ``degraded``: the machine did not keep up (the replayer's writes ran late, the samples were
      further apart than the wall-time resolution), or an autoscaled owner's recording took a count
      only before its HPA's reaction time, where nothing is judged, or the bound was missed at the
      stated settle but holds once the cluster is allowed longer to converge (an overloaded control
      plane). The figures stay those at the stated settle; the reasons say what fell behind;
    * ``failed``: the bound was missed, and allowing the cluster ten times the settle does not
      explain it;
    * ``unmeasured``: the recording has no pod counts to compare with.
    """

    verdict: str
    reasons: tuple[str, ...]
    settle_needed_ms: float | None
    """The shortest settle (trace ms) at which every owner was within the bound: the stated one when
    it held there, a multiple of it when the cluster needed longer, None if none did."""

    def to_json(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "settle_needed_ms": self.settle_needed_ms,
        }


def judge(
    recorded: Mapping[str, Timeline],
    samples: Sequence[OwnerSample],
    settle_ms: float,
    *,
    resolution_wall_s: float,
    lateness_p99_ms: float | None,
    largest_sample_gap_s: float = 0.0,
    hpa_reactions: Mapping[str, float] | None = None,
    longest_settle_ms: float = float("inf"),
) -> FidelityVerdict:
    """The verdict on a replay: samples judged at ``settle_ms`` of trace time (the owners of
    ``hpa_reactions`` over their HPA's reaction time); the machine's pace (``lateness_p99_ms`` and
    ``largest_sample_gap_s``, wall time) against ``resolution_wall_s``. A miss is a failure unless a
    settle of :func:`stretched_settles`, up to ``longest_settle_ms``, explains it."""
    if not recorded:
        return FidelityVerdict("unmeasured", ("the recording has no pod lifecycles to compare with",), None)
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
    reasons += unjudged_decisions(recorded, hpa_reactions or {})
    needed = settle_needed(recorded, samples, settle_ms, hpa_reactions, longest_settle_ms)
    if needed is None:
        longest = stretched_settles(settle_ms, longest_settle_ms)[-1]
        return FidelityVerdict(
            "failed",
            (
                f"an owner stayed more than {BOUND_PODS} pod(s) off the recording even when the cluster "
                f"is allowed {longest / 1000:g} s of trace time to settle",
                *reasons,
            ),
            None,
        )
    if needed > settle_ms:
        owners = compare_owners(recorded, samples, settle_ms, hpa_reactions)
        within, total = sum(o.within_one for o in owners), sum(o.samples for o in owners)
        reasons.append(
            f"the simulated cluster needed up to {needed / 1000:g} s of trace time to converge on the "
            f"recorded pod counts, beyond the {settle_ms / 1000:g} s settle ({within} of {total} "
            "owner-instants within the bound at the settle; a busy machine or an overloaded control plane)"
        )
    return FidelityVerdict("degraded" if reasons else "held", tuple(reasons), needed)
