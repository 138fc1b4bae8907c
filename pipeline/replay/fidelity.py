"""How closely a replay's running pods followed the recording, per owner: pure functions.

The replay is sampled every so often (the sampler lists the replay's pods and groups them by the
recorded owner the rewriting stamped on their templates); the recording is a step function per owner
built from the recorded lifecycles. Comparing a sample with the recording at exactly the same trace
instant would punish a replay for the simulated controllers' reaction time around every change, which
at speed 10 is ten times larger in trace time. So the comparison has a resolution: a sample at trace
offset ``t`` is right when its count lies within the range the recording took during the preceding
``resolution_ms`` of trace time (one second of scaled, i.e. wall, time by default), and its error is
its distance to that range.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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

    def to_json(self) -> dict[str, object]:
        return {
            "owner": self.owner,
            "samples": self.samples,
            "max_error": self.max_error,
            "samples_within_one_pod": self.within_one,
            "recorded_peak": self.recorded_peak,
            "replay_peak": self.replay_peak,
        }


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
    recorded: Mapping[str, Timeline], samples: Sequence[OwnerSample], resolution_ms: float
) -> list[OwnerFidelity]:
    """Per owner seen in the recording or the replay, the sample errors against the recording."""
    owners = sorted(set(recorded) | {owner for s in samples for owner in s.running})
    out = []
    for owner in owners:
        timeline = recorded.get(owner, ())
        errors = []
        for sample in samples:
            low, high = range_over(timeline, sample.trace_ms - resolution_ms, sample.trace_ms)
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
            )
        )
    return out
