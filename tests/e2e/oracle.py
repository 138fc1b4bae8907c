"""The end-to-end tests' own judgment of a replay against its recording, independent of the report's
fidelity verdict (``pipeline.replay.fidelity``), which is what is being checked.

For every sample the replay took, and every owner of the scripted workload, the running pods it saw
must be within :data:`BOUND_PODS` of a count the recording had over the preceding :data:`SETTLE_TRACE_MS`
of trace time (the simulated cluster needs a moment to schedule and start what the replayer applied).
The settle is stated in trace time and is short beside the recording's steps, so a replay that lags a
step, skips one or reaches a wrong count is caught; it is not widened when the machine is slow.

The end-to-end replays run with ``--max-lag`` (:data:`MAX_LAG_S`): where the simulated cluster falls
that far behind the recording, the replay's trace clock holds until it catches up, so a slow machine
slows the replay down instead of making it unfaithful. When the replay misses the oracle, the run may
still pass as ``degraded``, but only when the product's own measures of the machine falling behind say
so: the replayer's writes ran late (lateness p99) or the pods could not be sampled as often as asked
(the largest gap between samples), beyond one wall second, or the trace clock held for the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BOUND_PODS = 1
"""Running pods per owner may differ from the recording by this many (a rollout overlaps old and new
pods for a moment, and recorded start times have whole-second precision)."""
SETTLE_TRACE_MS = 10_000
"""How long after a recorded change the replay may still show the count before it: ten trace seconds,
one wall second at speed 10, a tenth of what the report's settle ladder allows. On a 2-core machine at
load 15 the simulated cluster took 0.6–0.9 wall s to converge after a scale-down (five trace seconds
failed each of three replays the report called ``held``; eight, one of them), so a shorter settle would
measure the machine rather than the replay. A count the recording left more than ten trace seconds
before, a level never reached, or a count more than one pod off any recent one, is caught."""
MAX_LAG_S = 5.0
"""The end-to-end replays' ``--max-lag``, in trace seconds: half the settle."""
FELL_BEHIND_WALL_S = 1.0
"""Lateness (p99) or a gap between samples beyond this, in wall seconds, is the machine falling behind."""

Timeline = Sequence[tuple[int, int]]


def recorded_timelines(report: Mapping[str, Any]) -> dict[str, Timeline]:
    by_owner = report["timeline"]["recorded_by_owner"]
    return {owner: [(p["trace_ms"], p["pods_running"]) for p in points] for owner, points in by_owner.items()}


def count_at(timeline: Timeline, trace_ms: float) -> int:
    """The recorded count at ``trace_ms``: the last point at or before it (none yet: 0)."""
    count = 0
    for at, running in timeline:
        if at > trace_ms:
            break
        count = running
    return count


def counts_over(timeline: Timeline, start_ms: float, end_ms: float) -> tuple[int, int]:
    """The lowest and highest recorded count over [start_ms, end_ms]."""
    counts = [count_at(timeline, start_ms), *(running for at, running in timeline if start_ms < at <= end_ms)]
    return min(counts), max(counts)


def owner_errors(
    report: Mapping[str, Any], owners: Iterable[str], settle_ms: float = SETTLE_TRACE_MS
) -> list[str]:
    """Each (sample, owner) whose running pods are off the recording, described; empty when none is."""
    recorded = recorded_timelines(report)
    errors = []
    for sample in report["timeline"]["replay_by_owner"]:
        at = sample["trace_ms"]
        for owner in owners:
            seen = sample["pods_running"].get(owner, 0)
            low, high = counts_over(recorded.get(owner, []), at - settle_ms, at)
            if not low - BOUND_PODS <= seen <= high + BOUND_PODS:
                errors.append(f"{owner} at trace {at / 1000:.2f} s: {seen} running, recorded {low}..{high}")
    return errors


def machine_fell_behind(report: Mapping[str, Any]) -> list[str]:
    """The product's own measures of the machine not keeping up with the replay, where they say so."""
    reasons = []
    lateness_p99 = report["lateness_ms"]["p99"]
    if lateness_p99 is not None and lateness_p99 > FELL_BEHIND_WALL_S * 1000:
        reasons.append(f"lateness p99 {lateness_p99} ms")
    if report["largest_sample_gap_seconds"] > FELL_BEHIND_WALL_S:
        reasons.append(f"a gap of {report['largest_sample_gap_seconds']} s between samples")
    held = (report.get("convergence") or {}).get("held_seconds") or 0
    if held > 0:
        reasons.append(f"the trace clock held {held} s for the cluster to catch up (--max-lag)")
    return reasons


def assert_follows_recording(report: Mapping[str, Any], owners: Iterable[str]) -> None:
    """The replay's running pods per owner follow the recording (see the module's docstring); where they
    do not, the machine fell behind by the product's own measures and the report does not say ``held``."""
    owners = sorted(owners)
    assert owners, "no owner of the scripted workload in the recording"
    errors = owner_errors(report, owners)
    if not errors:
        return
    behind = machine_fell_behind(report)
    verdict = report["owner_fidelity"]["verdict"]
    summary = f"{len(errors)} sample(s) off the recording, the first: {errors[:5]}"
    assert behind, f"{summary}; the machine kept up (lateness, sampling), so the replay is wrong"
    assert verdict != "held", f"{summary}; yet the report says held"
