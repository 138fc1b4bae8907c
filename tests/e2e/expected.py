"""What the end-to-end oracle expects of a replay, read from the trace file itself and nothing the
replay computed: per recorded owner, the Running pods it should have after each step, in trace time.

Naive on purpose. A Deployment should run ``spec.replicas`` pods after each recorded write of it, none
once it is deleted; a bare pod one pod from its first recorded write until its recorded end. *When* the
recorded cluster had done so comes from the recorded pod lifecycles (the latest event of each pod,
counted under its owner): a step is settled where the owner's recorded Running pods last became what
it asked for before the next write. The source cluster took a moment too, and a replay is held to the
recording, not to a cluster that reacts at once. Trace time 0 is the trace's first write, as a replay
starts it (``kubetape replay`` plans from the first change).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.formats.trace import initial_events, read_trace
from pipeline.model.events import Event, EventType

RECORDED_TIME_PRECISION_MS = 1000
"""Recorded pod start and end times have whole-second precision: a bare pod's end may come this much
before or after the recorded one."""
ROLLOUT_SURGE_FRACTION = 0.25
"""A Deployment's default maxSurge: while a changed pod template rolls out, this part of the replicas
(rounded up) may run beside them."""


@dataclass(frozen=True, slots=True)
class Step:
    """The owner should run ``count`` pods: the change may show from ``written_ms`` (less ``early_ms``,
    a recorded time's precision); the recording had settled on it at ``at_ms``, from which the settle
    counts; after a change of its pod template it may run ``surge`` more until then (a rollout)."""

    at_ms: int
    count: int
    surge: int = 0
    early_ms: int = 0
    written_ms: int | None = None
    """When the change was written (None: at ``at_ms``)."""

    @property
    def begins_ms(self) -> int:
        return (self.at_ms if self.written_ms is None else self.written_ms) - self.early_ms


@dataclass(frozen=True, slots=True)
class Expected:
    """Per recorded owner (``apps/Deployment/<ns>/<name>``, ``core/Pod/<ns>/<name>``), its steps in
    trace order; and how long the trace is."""

    steps: dict[str, list[Step]]
    span_ms: int
    namespaces: frozenset[str] = field(default_factory=frozenset)


def expected_from_trace(path: Path, namespace_prefix: str) -> Expected:
    """The Deployments and bare pods of the trace's namespaces starting with ``namespace_prefix``."""
    trace = read_trace(path)
    events = initial_events(trace, time_ordered=True)
    writes = [e for e in events if e.type in (EventType.APPLIED, EventType.DELETED)]
    assert writes, f"{path}: the trace has no write to replay"
    start = writes[0].ts_ms
    span = max(trace.header.end_ms, writes[-1].ts_ms) - start
    lifecycles: dict[str, Event] = {}
    for e in events:
        if e.type is EventType.POD_LIFECYCLE:
            lifecycles[str(e.key)] = e  # a pod's later lifecycle event supersedes its earlier one
    recorded = _running_by_owner(lifecycles.values(), start)
    steps: dict[str, list[Step]] = {}
    templates: dict[str, Any] = {}
    for e in writes:
        key = str(e.key)
        group_kind, _, rest = key.partition("/")
        kind, _, namespaced = rest.partition("/")
        if not namespaced.startswith(namespace_prefix):
            continue
        at = e.ts_ms - start
        if (group_kind, kind) == ("apps", "Deployment"):
            spec = (e.obj or {}).get("spec") or {}
            replicas = 0 if e.type is EventType.DELETED else int(spec.get("replicas", 1))
            rolled = (
                e.type is EventType.APPLIED and key in templates and templates[key] != spec.get("template")
            )
            if e.type is EventType.APPLIED:
                templates[key] = spec.get("template")
            surge = math.ceil(replicas * ROLLOUT_SURGE_FRACTION) if rolled else 0
            steps.setdefault(key, []).append(Step(at, replicas, surge))
        elif (group_kind, kind) == ("core", "Pod") and key not in steps:
            steps[key] = [Step(at, 1)]
            ended = lifecycles.get(key)
            if ended is not None and ended.pod_end_ms is not None:
                # the replay runs the pod for its recorded lifetime from when it started there, after
                # its write; the recorded start may be up to a second before the write (its precision)
                end = ended.pod_end_ms - start
                precision = RECORDED_TIME_PRECISION_MS
                steps[key].append(Step(end + precision, 0, early_ms=2 * precision))
    namespaces = frozenset(k.split("/")[2] for k in steps)
    return Expected(
        {k: _settled(_merged(v), recorded.get(k, []), span) for k, v in steps.items()}, span, namespaces
    )


def _running_by_owner(lifecycles: Iterable[Event], start_ms: int) -> dict[str, list[tuple[int, int]]]:
    """Per owner, (trace ms, recorded Running pods) at each change."""
    changes: dict[str, list[tuple[int, int]]] = {}
    for e in lifecycles:
        assert e.pod_start_ms is not None  # POD_LIFECYCLE invariants
        assert e.owner_key is not None
        deltas = changes.setdefault(str(e.owner_key), [])
        deltas.append((e.pod_start_ms - start_ms, 1))
        if e.pod_end_ms is not None:
            deltas.append((e.pod_end_ms - start_ms, -1))
    out: dict[str, list[tuple[int, int]]] = {}
    for owner, owner_deltas in changes.items():
        running, timeline = 0, list[tuple[int, int]]()
        for at, delta in sorted(owner_deltas):
            running += delta
            if timeline and timeline[-1][0] == at:
                timeline[-1] = (at, running)
            else:
                timeline.append((at, running))
        out[owner] = timeline
    return out


def _merged(steps: list[Step]) -> list[Step]:
    """Consecutive writes that keep the count make one step (a rollout keeps its surge allowance)."""
    out: list[Step] = []
    for step in sorted(steps, key=lambda s: s.at_ms):
        if out and out[-1].count == step.count and step.surge == 0:
            continue
        out.append(step)
    return out


def _settled(steps: Sequence[Step], recorded: Sequence[tuple[int, int]], span_ms: int) -> list[Step]:
    """Each write step with ``at_ms`` moved to where the recording settled on its count: the start of
    the recorded count's last run before the next step, when that run is at the step's count (a step
    the recording never settled on keeps its write time)."""
    if not recorded:
        return list(steps)
    out = []
    for index, step in enumerate(steps):
        if step.early_ms:  # a recorded end already: the lifecycle's own time
            out.append(step)
            continue
        ends = steps[index + 1].at_ms if index + 1 < len(steps) else span_ms
        during = [(at, n) for at, n in recorded if step.at_ms < at < ends]
        before = [n for at, n in recorded if at <= step.at_ms]
        last = during[-1] if during else (step.at_ms, before[-1] if before else 0)
        settled = last[0] if last[1] == step.count else step.at_ms
        out.append(Step(max(settled, step.at_ms), step.count, step.surge, written_ms=step.at_ms))
    return out
