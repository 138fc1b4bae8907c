"""From a trace to a replay plan: the scheduler's steps, the pods' lifetimes and the recorded timelines.

Pod lifetimes. A recorded pod lifecycle that ended means one of two things: the pod's containers
exited by themselves (a Job's pod, a bare pod with ``restartPolicy: Never``), or the pod was deleted
(a rollout, a scale-down, a deleted Deployment; SimKube and the watcher then record the deletion time as
the end). Only the first is a property of the pod the simulation must reproduce; the second is
reproduced by replaying the owner's own changes, which make the simulated controller delete the pods.
Containers of a pod with ``restartPolicy: Always`` (the only policy Deployments, ReplicaSets,
StatefulSets and DaemonSets allow) are restarted by the kubelet, so such a pod never ends by itself: its
recorded end is always a deletion. So lifetimes are enforced only for owners whose pod templates all say
``Never`` or ``OnFailure``. Pods of one owner share one template, hence one lifetime annotation: the
median recorded duration (SimKube's mutating webhook picks per pod; a KWOK stage reads the template).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from pipeline.formats.segment.content import Segment
from pipeline.formats.trace import initial_events
from pipeline.model.desired import desired_pods
from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey, key_of
from pipeline.model.tracer_config import TracerConfig
from pipeline.replay.clock.schedule import ScheduledStep
from pipeline.replay.rewrite import pod_templates

Timeline = list[tuple[int, int]]
"""(trace offset ms, pods running) at each change."""
SELF_ENDING_POLICIES = frozenset({"Never", "OnFailure"})


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What to apply when, and the recorded pod lifetimes (scaled), all derived from one trace."""

    steps: list[ScheduledStep[Event]]
    lifetimes_ms: dict[ObjectKey, float]
    """Scaled pod lifetime per lifecycle owner (a bare pod is its own owner); absent = runs until deleted."""
    recorded_running: Timeline
    """All pods running, from the recorded lifecycles."""
    start_ms: int
    end_ms: int
    gaps: int
    config: TracerConfig | None
    recorded_by_owner: dict[str, Timeline] | None = None
    """Pods running per recorded owner (its object key): from the recorded lifecycles where they were
    tracked, else the pods the owner asked for (see :func:`desired_timelines`)."""
    desired_owners: frozenset[str] = frozenset()
    """The owners of ``recorded_by_owner`` whose counts are desired pods, not recorded lifecycles."""
    cronjobs_with_jobs: frozenset[str] = frozenset()
    """CronJobs (object keys) whose Jobs the trace recorded: replayed suspended (see rewrite)."""
    recorded_owners: Mapping[ObjectKey, ObjectKey] = field(default_factory=dict)
    """Pods the trace applies whose lifecycles were recorded under another owner (a SparkApplication):
    the replayed pod names that owner, so it is counted with the owner's recorded lifecycles."""

    @property
    def span_ms(self) -> int:
        """Trace time from the replay's start to the trace's end (the end of the range it was exported
        from, or a SimKube trace's last second), not to its last event: a range whose last change came
        early still simulates the quiet rest of it (pods ending by themselves, the autoscalers at work).
        Never short of the last step, whatever a trace's header says."""
        last = self.steps[-1].ts_ms if self.steps else self.start_ms
        return max(self.end_ms, last) - self.start_ms

    @property
    def last_step_ms(self) -> int | None:
        """The last step's offset from the start (None: no step)."""
        return self.steps[-1].ts_ms - self.start_ms if self.steps else None


def plan_replay(trace: Segment, speed: float) -> ReplayPlan:
    """Scheduler steps, scaled lifetimes and recorded timelines for ``trace`` (see the module docstring)."""
    events = initial_events(trace)
    steps = [
        ScheduledStep(e.ts_ms, str(e.key), e)
        for e in events
        if e.type in (EventType.APPLIED, EventType.DELETED)
    ]
    # stable: same-time changes keep their recorded order, but owners start before what they own (a
    # recorded pod of a custom resource is written owned by the replayed resource: see apply)
    steps.sort(key=lambda s: (s.ts_ms, _owned(s.payload)))
    start_ms = steps[0].ts_ms if steps else trace.header.start_ms
    latest: dict[ObjectKey, Event] = {}
    for e in events:
        if e.type is EventType.POD_LIFECYCLE:
            latest[e.key] = e  # a pod's later lifecycle event supersedes its earlier one
    self_ending = _self_ending_owners(events, trace.config)
    durations: dict[ObjectKey, list[int]] = {}
    for e in latest.values():
        assert e.owner_key is not None  # POD_LIFECYCLE invariants
        assert e.pod_start_ms is not None
        if e.pod_end_ms is not None and e.owner_key in self_ending:
            durations.setdefault(e.owner_key, []).append(e.pod_end_ms - e.pod_start_ms)
    lifetimes = {owner: median(d) / speed for owner, d in durations.items()}
    # a recorded pod replayed as itself (its owner makes no pods in a simulation, see assemble) keeps
    # its own lifetime when it ends by itself, whoever its lifecycles were recorded under
    pods = _applied_pods(events)
    for e in latest.values():
        obj = pods.get(e.key)
        if (
            obj is not None
            and e.owner_key != e.key
            and e.pod_end_ms is not None
            and pods_end_by_themselves(obj, trace.config)
        ):
            assert e.pod_start_ms is not None
            lifetimes[e.key] = (e.pod_end_ms - e.pod_start_ms) / speed
    gaps = sum(1 for e in events if e.type is EventType.GAP)
    by_owner = {
        str(owner): running_timeline(lcs, start_ms) for owner, lcs in _by_owner(latest.values()).items()
    }
    desired = desired_timelines(
        events, start_ms, lifecycle_kinds=_lifecycle_kinds(latest.values(), trace.config)
    )
    return ReplayPlan(
        steps,
        lifetimes,
        running_timeline(latest.values(), start_ms),
        start_ms,
        trace.header.end_ms,
        gaps,
        trace.config,
        {**by_owner, **desired},
        frozenset(desired),
        cronjobs_with_recorded_jobs(events),
        {e.key: e.owner_key for e in latest.values() if e.key in pods and e.owner_key not in (None, e.key)},
    )


def _owned(event: Event) -> bool:
    return bool(((event.obj or {}).get("metadata") or {}).get("ownerReferences"))


def _applied_pods(events: Iterable[Event]) -> dict[ObjectKey, Mapping[str, Any]]:
    """The latest recorded object of every pod the trace applies."""
    return {
        e.key: e.obj
        for e in events
        if e.type is EventType.APPLIED and e.obj is not None and e.key.startswith("core/Pod/")
    }


def cronjobs_with_recorded_jobs(events: Iterable[Event]) -> frozenset[str]:
    """Object keys of the CronJobs that own a Job applied in the trace."""
    out: set[str] = set()
    for e in events:
        obj = e.obj or {}
        if e.type is not EventType.APPLIED or obj.get("kind") != "Job":
            continue
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("kind") == "CronJob" and ref.get("name"):
                stub = {
                    "apiVersion": ref.get("apiVersion") or "batch/v1",
                    "kind": "CronJob",
                    "metadata": {"name": ref["name"], "namespace": meta.get("namespace") or "default"},
                }
                with contextlib.suppress(FormatError):
                    out.add(str(key_of(stub)))
    return frozenset(out)


def _lifecycle_kinds(lifecycles: Iterable[Event], config: TracerConfig | None) -> set[tuple[str, str]]:
    """(group, kind) of the owners whose pods' lifecycles were tracked: as the trace's tracer config
    says, and wherever the trace holds a lifecycle of one owner of that kind."""
    kinds = (
        {(gvk.group or "core", gvk.kind) for gvk in (t.gvk for t in config.tracked if t.track_lifecycle)}
        if config
        else set()
    )
    for e in lifecycles:
        assert e.owner_key is not None  # POD_LIFECYCLE invariants
        group, kind = str(e.owner_key).split("/", 2)[:2]
        kinds.add((group, kind))
    return kinds


def desired_timelines(
    events: Iterable[Event], start_ms: int, lifecycle_kinds: set[tuple[str, str]]
) -> dict[str, Timeline]:
    """Pods each owner asked for over time, for owners whose lifecycles were not recorded.

    Lifecycles are optional in SimKube (``trackLifecycle``) and in tracer configs, yet a replay must
    still be judged. What an owner asks for is the truth then: ``spec.replicas`` of Deployments,
    StatefulSets and ReplicaSets (1 when unset, as Kubernetes defaults it), and a bare pod itself (1
    while it exists, unless its recorded phase says it ended). Jobs are left out: without lifecycles,
    nothing in a trace says how long their pods ran. Owners of ``lifecycle_kinds`` are judged by their
    lifecycles (none recorded: no pod ran), so they are left out too.
    """
    changes: dict[str, Timeline] = {}
    for e in sorted(events, key=lambda e: e.ts_ms):
        owner = str(e.key)
        group, kind = owner.split("/", 2)[:2]
        if (group, kind) in lifecycle_kinds or e.type not in (EventType.APPLIED, EventType.DELETED):
            continue
        wanted = 0 if e.type is EventType.DELETED else desired_pods(group, kind, e.obj)
        if wanted is None:
            continue
        if owner not in changes and e.type is EventType.DELETED:
            continue  # a delete of something the trace never showed asks for nothing
        timeline = changes.setdefault(owner, Timeline())
        offset = max(e.ts_ms - start_ms, 0)
        if timeline and timeline[-1][0] == offset:
            timeline[-1] = (offset, wanted)
        elif not timeline or timeline[-1][1] != wanted:
            timeline.append((offset, wanted))
    return changes


def _by_owner(lifecycles: Iterable[Event]) -> dict[ObjectKey, list[Event]]:
    out: dict[ObjectKey, list[Event]] = {}
    for e in lifecycles:
        assert e.owner_key is not None
        out.setdefault(e.owner_key, []).append(e)
    return out


def running_timeline(lifecycles: Iterable[Event], start_ms: int) -> Timeline:
    """Pods running over time from their latest lifecycle events, as offsets from ``start_ms``."""
    changes: list[tuple[int, int]] = []
    for e in lifecycles:
        assert e.pod_start_ms is not None
        changes.append((max(e.pod_start_ms - start_ms, 0), 1))
        if e.pod_end_ms is not None:
            changes.append((max(e.pod_end_ms - start_ms, 0), -1))
    running, timeline = 0, Timeline()
    for offset, delta in sorted(changes):
        running += delta
        if timeline and timeline[-1][0] == offset:
            timeline[-1] = (offset, running)
        else:
            timeline.append((offset, running))
    return timeline


def _self_ending_owners(events: Iterable[Event], config: TracerConfig | None) -> set[ObjectKey]:
    """Owners whose recorded object has pod templates that all let pods end by themselves."""
    latest_obj: dict[ObjectKey, Mapping[str, Any]] = {}
    for e in events:
        if e.type is EventType.APPLIED and e.obj is not None:
            latest_obj[e.key] = e.obj
    return {key for key, obj in latest_obj.items() if pods_end_by_themselves(obj, config)}


def pods_end_by_themselves(obj: Mapping[str, Any], config: TracerConfig | None) -> bool:
    templates = pod_templates(obj, config)
    # the default restartPolicy is Always (Kubernetes' defaulting, which a trace may have dropped)
    return bool(templates) and all(
        (t.get("spec") or {}).get("restartPolicy", "Always") in SELF_ENDING_POLICIES for t in templates
    )
