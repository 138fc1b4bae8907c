"""A recording of an autoscaled cluster, replayed under the same autoscaler: the recorded nodes are the
reference, not part of the replay.

When ``source`` ran Karpenter, the trace holds the Nodes it launched and removed (tracked ``v1.Node``,
labelled ``karpenter.sh/nodepool``). Replaying them as KWOK nodes would hand the replayed pods the
recorded capacity and leave the simulated Karpenter nothing to do, so an autoscaled replay drops them
from its plan (:func:`without_autoscaler_nodes`) and keeps their count over time instead. After the
replay, the simulated Karpenter's node count (the autoscale figures' ``nodes_timeline``) is compared with
it at every scaled second (one wall second = ``speed`` trace seconds) after a settle
(:func:`node_count_fidelity`), and the result is a fidelity figure of the report.

The two autoscalers react with delays the time scaling does not remove (launch latency, node
termination's unscaled 5 s steps), so, as for owners' pod counts, the replay's count at trace time
``t`` is compared with the range the recorded count took within ``window`` either side of ``t``.
Pure logic, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipeline.model.events import Event, EventType
from pipeline.replay.autoscale.figures import NODEPOOL_LABEL
from pipeline.replay.plan import ReplayPlan
from pipeline.replay.report.report import ReplayReport

NODE_TOLERANCE = 1
"""Nodes the replay's count may differ from the recording's (beyond the window) and still hold."""
SETTLE_WALL_S = 10.0
"""Wall seconds at the start not judged: the simulated Karpenter's first launches."""
WINDOW_WALL_S = 10.0
"""Wall seconds either side within which the recorded count is matched: node termination's unscaled
5 s drain and 5 s requeue (``autoscale_settings.NOT_SCALED``) make a simulated consolidation about ten
wall seconds later than the scaled timers say."""


def is_autoscaler_node(event: Event) -> bool:
    obj = event.obj or {}
    if obj.get("kind") != "Node" or str(obj.get("apiVersion")) != "v1":
        return False
    return NODEPOOL_LABEL in ((obj.get("metadata") or {}).get("labels") or {})


def recorded_node_counts(events: Iterable[Event], start_ms: int) -> list[tuple[int, int]]:
    """(ms since ``start_ms``, autoscaler nodes present) after each recorded change, in time order."""
    live: set[str] = set()
    counts: list[tuple[int, int]] = []
    for event in sorted((e for e in events if is_autoscaler_node(e)), key=lambda e: e.ts_ms):
        name = str(((event.obj or {}).get("metadata") or {}).get("name"))
        if event.type is EventType.DELETED:
            live.discard(name)
        elif event.type is EventType.APPLIED:
            live.add(name)
        at = max(event.ts_ms - start_ms, 0)
        if counts and counts[-1][0] == at:
            counts[-1] = (at, len(live))
        else:
            counts.append((at, len(live)))
    return counts


def without_autoscaler_nodes(plan: ReplayPlan) -> tuple[ReplayPlan, list[tuple[int, int]]]:
    """``plan`` without the recorded autoscaler's Nodes, and their count over time."""
    events = [step.payload for step in plan.steps]
    counts = recorded_node_counts(events, plan.start_ms)
    kept = [step for step in plan.steps if not is_autoscaler_node(step.payload)]
    return dataclasses.replace(plan, steps=kept), counts


def _count_at(series: Sequence[tuple[float, int]], at_ms: float) -> int:
    """The step function's value at ``at_ms`` (0 before its first point)."""
    value = 0
    for point_ms, count in series:
        if point_ms > at_ms:
            break
        value = count
    return value


def node_count_fidelity(
    recorded: Sequence[tuple[int, int]],
    replayed: Sequence[Mapping[str, Any]],
    *,
    speed: float,
    end_ms: float,
    tolerance: int = NODE_TOLERANCE,
    settle_wall_s: float = SETTLE_WALL_S,
    window_wall_s: float = WINDOW_WALL_S,
) -> dict[str, Any]:
    """The replay's autoscaler node count (``nodes_timeline`` samples) against the recorded one at
    every scaled second from the settle to ``end_ms`` (trace ms since the start)."""
    samples = [(float(s["trace_ms"]), int(s["nodes"])) for s in replayed]
    step_ms = 1000.0 * speed
    window_ms = window_wall_s * step_ms
    errors: list[dict[str, float]] = []
    at = settle_wall_s * step_ms
    while at <= end_ms and samples:
        near = [_count_at(recorded, t) for t in _window(recorded, at - window_ms, at + window_ms)]
        low, high = min(near), max(near)
        value = _count_at(samples, at)
        errors.append(
            {
                "trace_s": round(at / 1000.0, 1),
                "recorded": _count_at(recorded, at),
                "replay": value,
                "error": max(low - value, value - high, 0),
            }
        )
        at += step_ms
    worst = max((e["error"] for e in errors), default=0)
    return {
        "tolerance_nodes": tolerance,
        "settle_wall_s": settle_wall_s,
        "window_wall_s": window_wall_s,
        "recorded_peak": max((c for _, c in recorded), default=0),
        "seconds_compared": len(errors),
        "seconds_outside": sum(1 for e in errors if e["error"] > tolerance),
        "max_error": worst,
        "held": bool(errors) and worst <= tolerance,
        "per_scaled_second": errors,
    }


def _window(series: Sequence[tuple[int, int]], low_ms: float, high_ms: float) -> list[float]:
    """The instants whose values make the step function's range over [low_ms, high_ms]."""
    return [low_ms, *(float(t) for t, _ in series if low_ms < t <= high_ms)]


def judge_node_counts(
    report: ReplayReport, recorded: Sequence[tuple[int, int]], speed: float, span_ms: float
) -> None:
    """Add the node-count fidelity to an autoscaled replay's report, when the trace recorded an
    autoscaler's nodes (a recording of a cluster without one has nothing to compare)."""
    if not recorded or report.autoscale is None:
        return
    fidelity = node_count_fidelity(recorded, report.autoscale["nodes_timeline"], speed=speed, end_ms=span_ms)
    report.autoscale["node_count_fidelity"] = fidelity
    report.autoscale_summary.append(summary_line(fidelity))


def summary_line(fidelity: Mapping[str, Any]) -> str:
    verdict = "held" if fidelity["held"] else "NOT held"
    return (
        f"autoscaler nodes vs recording: max error {fidelity['max_error']:g} node(s) over "
        f"{fidelity['seconds_compared']} scaled seconds after a {fidelity['settle_wall_s']:g} s settle "
        f"(tolerance {fidelity['tolerance_nodes']} node, window ±{fidelity['window_wall_s']:g} wall s): "
        f"{verdict}"
    )
