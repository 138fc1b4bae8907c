"""What the end-to-end oracle expects of a replay, read from the trace file itself and nothing the
replay computed: per recorded owner, the Running pods it should have after each step, in trace time.

Naive on purpose: a Deployment should run ``spec.replicas`` pods from each recorded write of it, none
once it is deleted; a bare pod one pod from its first recorded write until its recorded end. Trace time
0 is the trace's first write, as a replay starts it (``kubetape replay`` plans from the first change).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.formats.trace import initial_events, read_trace
from pipeline.model.events import EventType

RECORDED_TIME_PRECISION_MS = 1000
"""Recorded pod start and end times have whole-second precision: a bare pod's end may come this much
before the recorded one."""
ROLLOUT_SURGE_FRACTION = 0.25
"""A Deployment's default maxSurge: while a changed pod template rolls out, this part of the replicas
(rounded up) may run beside them."""


@dataclass(frozen=True, slots=True)
class Step:
    """From ``at_ms`` of trace time, the owner should run ``count`` pods; after a change of its pod
    template it may run ``surge`` more for the settle (a rollout); its change may come up to ``early_ms``
    before ``at_ms`` (a recorded time's precision)."""

    at_ms: int
    count: int
    surge: int = 0
    early_ms: int = 0


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
    steps: dict[str, list[Step]] = {}
    templates: dict[str, Any] = {}
    pod_ends: dict[str, int] = {}
    for e in events:
        if e.type is EventType.POD_LIFECYCLE and e.pod_end_ms is not None:
            pod_ends[str(e.key)] = e.pod_end_ms - start
    for e in writes:
        key = str(e.key)
        group_kind, _, rest = key.partition("/")
        kind, _, namespaced = rest.partition("/")
        if not namespaced.startswith(namespace_prefix):
            continue
        at = e.ts_ms - start
        if (group_kind, kind) == ("apps", "Deployment"):
            if e.type is EventType.DELETED:
                steps.setdefault(key, []).append(Step(at, 0))
                continue
            spec = (e.obj or {}).get("spec") or {}
            replicas = int(spec.get("replicas", 1))
            rolled = key in templates and templates[key] != spec.get("template")
            templates[key] = spec.get("template")
            surge = math.ceil(replicas * ROLLOUT_SURGE_FRACTION) if rolled else 0
            steps.setdefault(key, []).append(Step(at, replicas, surge))
        elif (group_kind, kind) == ("core", "Pod") and key not in steps:
            steps[key] = [Step(at, 1)]
            if key in pod_ends:
                steps[key].append(Step(pod_ends[key], 0, early_ms=RECORDED_TIME_PRECISION_MS))
    namespaces = frozenset(k.split("/")[2] for k in steps)
    return Expected({k: _merged(v) for k, v in steps.items()}, span, namespaces)


def _merged(steps: list[Step]) -> list[Step]:
    """Consecutive writes that keep the count make one step (a rollout keeps its surge allowance)."""
    out: list[Step] = []
    for step in sorted(steps, key=lambda s: s.at_ms):
        if out and out[-1].count == step.count and step.surge == 0:
            continue
        out.append(step)
    return out
