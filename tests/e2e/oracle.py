"""The end-to-end tests' own judgment of a replay, whatever the report's verdict says (issue 43).

What it judges with: the trace file (:mod:`tests.e2e.expected`: per owner, the pods it should run after
each recorded step), the simulated cluster seen through its own watch (:mod:`tests.e2e.cluster_watch`),
and the replay's trace clock as the replay printed it (:mod:`tests.e2e.judged_replay`), which it checks
before using (:func:`clock_problems`). A held clock may stretch wall time; the comparison is in trace
time, at a settle stated here (:data:`SETTLE_TRACE_MS`), and a miss fails the test, held clock or not.

At each clock reading the watch's counts are a sample at that trace instant (while the clock held, the
last reading of the instant: the state the clock went on from, as the report counts it; and any count
the watch had up to :data:`WATCH_DELAY_WALL_S` later, for the watch's own delay); between two readings,
an owner whose count did not change held that count over the whole trace interval between them. Each
sample must lie, at every instant it covers, within :data:`BOUND_PODS` of what the steps allow then:
the step in force, and for :data:`SETTLE_TRACE_MS` after the recording settled on a step the count
before it too (and a rollout's surge). So:

* a step applied late by more than the settle and the watch's delay, or never (a scale-down skipped, a
  bare pod dropped), is a miss in the stretch after the settle where only the new count is allowed;
* a step applied early (every step at time 0) is a miss in the stretch before it;
* every step must be *reached* (its count seen while it was in force, or within the settle after) and,
  where the trace holds it :data:`LOOKED_AT_MS` past the settle, *judged* (a sample inside that
  stretch): a replay the oracle could not see is not a replay that passed;
* the clock must reach the trace's end, so the last part of the trace is judged too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from tests.e2e.cluster_watch import ClusterWatch
from tests.e2e.expected import Expected, Step
from tests.e2e.judged_replay import JudgedReplay

BOUND_PODS = 1
"""An owner's Running pods may differ from its steps by this many (a rollout overlaps old and new pods,
and the replay's clock runs on while an owner is no more than one pod off, as it does while a bare pod
runs late: KWOK ended an 0.8-wall-s pod 2.2 wall s after its start at load 14). So a step is *reached*
only at its exact count: a bare pod never run, or never ended, is caught there."""
MAX_LAG_S = 2.0
"""The end-to-end replays' ``--max-lag``, in trace seconds: the trace clock holds while the simulated
cluster is further behind, so a slow machine slows the replay down instead of making it unfaithful."""
SETTLE_TRACE_MS = 3_500
"""How long after a step the cluster may still show the count before it: ``--max-lag`` plus a trace
second and a half for the look at the cluster that finds it behind (the clock runs up to the governor's
horizon between two looks). Shorter than every step of the scripted workload (about 4.5 trace s apart)
so each is judged on its own."""
WATCH_DELAY_WALL_S = 0.6
"""How late the oracle's watch may show a change the replay's own pod watch already saw: on a 2-core
machine at load 14, a scale-down the replay saw at a hold reached the oracle's watch 0.55 wall s later.
A reading is judged by any count the watch had from it to this much later (a late replay is caught
once it is later than this too: at x10, 6 trace s past the settle; a step skipped or never reached, one
at the wrong time by more, is caught whatever the delay)."""
LOOKED_AT_MS = 2_000
"""A step the trace holds this long past the settle must have been looked at there (shorter ones are
judged by being reached, and by the samples around them)."""
EARLY_MS = 500
"""A change may show this much trace time before its step: a clock reading arrives a moment after the
replay printed it, while the cluster goes on."""
FASTEST_FACTOR = 1.5
"""The trace clock may not run faster than this times ``--speed`` over :data:`RATE_WINDOW_WALL_S` (the
readings state tenths of a trace second)."""
RATE_WINDOW_WALL_S = 0.5
MOVING_WALL_FACTOR = 3.0
"""While the clock moves (wall time between readings where it advanced), it may take at most this many
times span/speed, plus :data:`MOVING_WALL_SLACK_S`: a clock ignoring ``--speed`` takes ``speed`` times."""
MOVING_WALL_SLACK_S = 3.0


@dataclass(frozen=True, slots=True)
class Sample:
    """Running pods over trace [start_ms, end_ms] (a point when equal): one of ``counts`` (the watch
    saw these within :data:`WATCH_DELAY_WALL_S` of the reading; an interval has one)."""

    start_ms: float
    end_ms: float
    counts: tuple[int, ...]


def samples(replay: JudgedReplay, owner: str) -> list[Sample]:
    """The owner's samples: one per clock reading (of readings at one trace instant while the clock
    held, the last: the state the cluster reached when it went on, as in the report), with the counts
    the watch had from then to :data:`WATCH_DELAY_WALL_S` later; and the interval between two readings
    when the watch saw no change of the owner's count from the first to the delay after the second."""
    out = []
    clock, cluster = replay.clock, replay.cluster
    for index, (wall, trace) in enumerate(clock):
        following = clock[index + 1] if index + 1 < len(clock) else None
        if following is not None and following[1] == trace:
            continue  # the clock held here: judged by the state when it went on
        counts = cluster.counts_over(wall, wall + WATCH_DELAY_WALL_S, owner)
        out.append(Sample(trace, trace, counts))
        if following is not None:
            next_wall, next_trace = following
            if not cluster.changes_between(wall, next_wall + WATCH_DELAY_WALL_S, owner):
                out.append(Sample(trace, next_trace, counts))
    return out


def allowed(steps: Sequence[Step], at_ms: float, settle_ms: float, bound: int) -> tuple[int, int]:
    """The counts (low, high) the owner may run at trace ``at_ms``: those of each step in force then
    or less than ``settle_ms`` before (0 before the first), a rollout's surge for its settle, and
    ``bound`` either side."""
    counts = []
    surge = 0
    for index, step in enumerate(steps):
        begins = step.begins_ms - EARLY_MS
        ends = steps[index + 1].at_ms + settle_ms if index + 1 < len(steps) else float("inf")
        if begins <= at_ms < ends:
            counts.append(step.count)
            if at_ms < step.at_ms + settle_ms:
                surge = max(surge, step.surge)
    first = steps[0] if steps else None
    if first is None or at_ms < first.at_ms + settle_ms:
        counts.append(0)
    return min(counts) - bound, max(counts) + surge + bound


def _breakpoints(steps: Sequence[Step], settle_ms: float) -> list[float]:
    points: set[float] = set()
    for step in steps:
        points.update((step.begins_ms - EARLY_MS, step.at_ms + settle_ms))
    return sorted(points)


def owner_misses(owner: str, steps: Sequence[Step], seen: Sequence[Sample], settle_ms: float) -> list[str]:
    """Each sample off the steps at some instant it covers, described."""
    breaks = _breakpoints(steps, settle_ms)
    misses = []
    for sample in seen:
        # an interval's end is the next reading's instant, judged by that reading (held: as it went on)
        instants = [sample.start_ms, *(b for b in breaks if sample.start_ms < b < sample.end_ms)]
        for at in instants:
            low, high = allowed(steps, at, settle_ms, BOUND_PODS)
            if not any(low <= count <= high for count in sample.counts):
                over = (
                    f"trace {sample.start_ms / 1000:.2f} s"
                    if sample.start_ms == sample.end_ms
                    else f"trace {sample.start_ms / 1000:.2f}..{sample.end_ms / 1000:.2f} s"
                )
                misses.append(
                    f"{owner}: {'/'.join(map(str, sample.counts))} Running over {over}, "
                    f"expected {max(low, 0)}..{high} "
                    f"at {at / 1000:.2f} s"
                )
                break
    return misses


def step_problems(
    owner: str, steps: Sequence[Step], seen: Sequence[Sample], settle_ms: float, span_ms: float
) -> list[str]:
    """Each step never reached, or held longer than the settle and never looked at there."""
    problems = []
    for index, step in enumerate(steps):
        ends = steps[index + 1].at_ms if index + 1 < len(steps) else span_ms
        window = (step.begins_ms - EARLY_MS, ends + settle_ms)
        reached = any(
            step.count in s.counts and s.start_ms <= window[1] and s.end_ms >= window[0] for s in seen
        )
        if not reached:
            problems.append(
                f"{owner}: the step to {step.count} pod(s) at trace {step.at_ms / 1000:.2f} s was never "
                f"reached (no sample at that count from then to {window[1] / 1000:.2f} s)"
            )
        held = (
            step.at_ms + settle_ms,
            steps[index + 1].begins_ms - EARLY_MS if index + 1 < len(steps) else span_ms,
        )
        if held[1] - held[0] >= LOOKED_AT_MS and not any(
            s.start_ms < held[1] and s.end_ms >= held[0] for s in seen
        ):
            problems.append(
                f"{owner}: the step to {step.count} pod(s) at trace {step.at_ms / 1000:.2f} s was not "
                f"looked at while it held ({held[0] / 1000:.2f}..{held[1] / 1000:.2f} s)"
            )
    return problems


def clock_problems(replay: JudgedReplay, span_ms: float) -> list[str]:
    """What is wrong with the replay's trace clock as it printed it (the module docstring)."""
    clock = replay.clock
    if len(clock) < 2:
        return [f"the replay printed {len(clock)} clock reading(s); the oracle needs its progress lines"]
    problems = []
    moving_wall = 0.0
    for (wall, trace), (next_wall, next_trace) in pairwise(clock):
        if next_trace < trace:
            problems.append(f"the trace clock went back from {trace / 1000:g} s to {next_trace / 1000:g} s")
        if next_trace > trace:
            moving_wall += next_wall - wall
    problems += _too_fast(clock, replay.speed)[:1]
    if abs(clock[-1][1] - span_ms) > 100:
        problems.append(
            f"the replay's trace clock ended at {clock[-1][1] / 1000:g} s, not at the trace's end "
            f"({span_ms / 1000:g} s)"
        )
    limit = MOVING_WALL_FACTOR * span_ms / 1000 / replay.speed + MOVING_WALL_SLACK_S
    if moving_wall > limit:
        problems.append(
            f"the trace clock moved for {moving_wall:.1f} wall s to cover {span_ms / 1000:g} trace s at "
            f"speed {replay.speed:g} (at most {limit:.1f})"
        )
    return problems


def _too_fast(clock: Sequence[tuple[float, float]], speed: float) -> list[str]:
    """Each stretch of at least :data:`RATE_WINDOW_WALL_S` over which the clock ran faster than
    :data:`FASTEST_FACTOR` times ``speed``."""
    out = []
    later = 0
    for wall, trace in clock:
        while later < len(clock) and clock[later][0] - wall < RATE_WINDOW_WALL_S:
            later += 1
        if later == len(clock):
            break
        end_wall, end_trace = clock[later]
        if end_trace - trace - 100 > speed * FASTEST_FACTOR * (end_wall - wall) * 1000:
            out.append(
                f"the trace clock ran {(end_trace - trace) / 1000:g} trace s in {end_wall - wall:.2f} wall s "
                f"(from {trace / 1000:g} s), faster than speed {speed:g}"
            )
    (first_wall, first_trace), (last_wall, last_trace) = clock[0], clock[-1]
    if last_trace - first_trace - 100 > speed * FASTEST_FACTOR * (last_wall - first_wall) * 1000:
        out.append(
            f"the trace clock ran {(last_trace - first_trace) / 1000:g} trace s in "
            f"{last_wall - first_wall:.2f} wall s, faster than speed {speed:g}"
        )
    return out


def judge(replay: JudgedReplay, expected: Expected, settle_ms: float = SETTLE_TRACE_MS) -> list[str]:
    """Every way the replay departs from the trace: its clock, then each owner's misses and steps."""
    assert expected.steps, "the trace holds no Deployment or bare pod to judge"
    found = clock_problems(replay, expected.span_ms)
    for owner, steps in sorted(expected.steps.items()):
        seen = samples(replay, owner)
        found += owner_misses(owner, steps, seen, settle_ms)
        found += step_problems(owner, steps, seen, settle_ms, expected.span_ms)
    found += _unexpected_owners(replay.cluster, expected.steps)
    return found


def _unexpected_owners(cluster: ClusterWatch, owners: Iterable[str]) -> list[str]:
    """Owners that ran pods in the replay's namespaces without being in the trace."""
    known = set(owners)
    seen = {owner for _, counts in cluster.history for owner in counts}
    return [
        f"{owner}: ran pods in the replay, and the trace has no such owner" for owner in sorted(seen - known)
    ]


def assert_follows_trace(replay: JudgedReplay, expected: Expected) -> None:
    """The replay's cluster followed the trace (see the module docstring); else the first misses."""
    found = judge(replay, expected)
    if found:
        seen = replay.workdir / "oracle.json"
        seen.write_text(json.dumps(oracle_view(replay, expected), indent=1))
        raise AssertionError(
            f"{len(found)} miss(es) of the trace (what the oracle saw: {seen}), the first:\n"
            + "\n".join(found[:12])
        )


def oracle_view(replay: JudgedReplay, expected: Expected) -> dict[str, object]:
    """The steps, the clock readings and the cluster's counts the oracle judged by, for a failure."""
    origin = replay.clock[0][0] if replay.clock else 0.0
    return {
        "steps": {owner: [dataclasses.asdict(s) for s in steps] for owner, steps in expected.steps.items()},
        "span_ms": expected.span_ms,
        "clock": [[round(w - origin, 3), t] for w, t in replay.clock],
        "cluster": [[round(w - origin, 3), counts] for w, counts in replay.cluster.history],
    }
