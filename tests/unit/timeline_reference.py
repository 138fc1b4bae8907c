"""The timeline fold as it was before it was made faster (ba23026), kept as the reference the fast fold is
tested against (``test_analytics_timeline_model.py``): the straightforward form of the same rules, one
method call per step, every pod's requests parsed again. Do not optimise it: its worth is being plainly
the definition the rows are checked against.

It shares the value types (:class:`Requests`, :class:`Transition`, :class:`TimelineRow`) with the
fold and copies everything that computes.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.analytics.pod_requests import Requests, parse_quantity
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, PHASES, PodTimes, TimelineRow
from pipeline.analytics.timeline_tally import (
    DESIRED,
    GONE,
    NODE_ADDED,
    NODE_GONE,
    USAGE,
    USAGE_GAP,
    Transition,
)
from pipeline.model.desired import desired_pods
from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey, object_key, parse_object_key
from pipeline.model.usage import UsageSample

ACTIVE_PHASES = ("Pending", "Running")


def reference_pod_spec_requests(spec: Mapping[str, Any] | None) -> Requests:
    cpu = memory = 0.0
    containers = (spec or {}).get("containers")
    for container in containers if isinstance(containers, list) else []:
        resources = container.get("resources") if isinstance(container, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        requests = resources.get("requests") or resources.get("limits") or {}
        if isinstance(requests, Mapping):
            cpu += (parse_quantity(requests.get("cpu")) or 0.0) * 1000
            memory += parse_quantity(requests.get("memory")) or 0.0
    return Requests(cpu, memory)


def reference_template_requests(obj: Mapping[str, Any]) -> Requests | None:
    for path in (("spec", "template", "spec"), ("spec", "jobTemplate", "spec", "template", "spec")):
        node: Any = obj
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
            if node is None:
                break
        if isinstance(node, Mapping):
            return reference_pod_spec_requests(node)
    return None


@dataclass(frozen=True, slots=True)
class _Used:
    cpu_m: float
    memory_bytes: float
    pods: int


@dataclass(slots=True)
class _Pod:
    owner: str
    phase: str = "Pending"
    node: str | None = None
    requests: Requests = field(default_factory=Requests)
    from_lifecycle: bool = False


@dataclass(slots=True)
class _Totals:
    phases: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    cpu_m: float = 0.0
    memory_bytes: float = 0.0
    running_per_node: dict[str, int] = field(default_factory=dict)


class ReferenceTally:
    def __init__(self) -> None:
        self._pods: dict[str, _Pod] = {}
        self._usage: dict[str, dict[str, _Used | None]] = {}
        self._totals: dict[str, _Totals] = {}
        self._nodes: set[str] = set()
        self._desired: dict[str, int] = {}
        self._created: dict[str, tuple[str, int]] = {}
        self._running: dict[str, int] = {}

    def apply(self, t: Transition, templates: Mapping[str, Requests]) -> None:
        if t.phase == DESIRED:
            if t.pods == GONE:
                self._desired.pop(t.key, None)
            else:
                self._desired[t.key] = t.pods
            return
        if t.phase in {USAGE, USAGE_GAP}:
            self._use(t)
            return
        if t.phase in {NODE_ADDED, NODE_GONE}:
            name = parse_object_key(t.key).name
            if t.phase == NODE_ADDED:
                self._nodes.add(name)
            else:
                self._nodes.discard(name)
            return
        if not t.phase:
            gone = self._pods.pop(t.key, None)
            if gone is not None:
                self._count(gone, -1)
            return
        pod = self._pods.get(t.key)
        if pod is None:
            pod = self._pods[t.key] = _Pod(t.owner)
            self._created.setdefault(t.key, (t.owner, t.at_ms))
        else:
            self._count(pod, -1)
        if t.from_lifecycle:
            pod.from_lifecycle = True
            if pod.requests == Requests():
                pod.requests = templates.get(t.owner, Requests())
        elif t.requests is not None:
            pod.requests = t.requests
        pod.owner = t.owner or pod.owner
        if t.from_lifecycle or not (pod.from_lifecycle and t.phase == "Pending"):
            pod.phase = t.phase
        pod.node = t.node or pod.node
        self._count(pod, +1)
        if t.phase == "Running":
            self._running.setdefault(t.key, t.at_ms)

    def _use(self, t: Transition) -> None:
        hashes = self._usage.setdefault(t.owner, {})
        if t.phase == USAGE_GAP:
            hashes[t.key] = None
        elif t.pods == 0:
            hashes.pop(t.key, None)
        else:
            requests = t.requests or Requests()
            hashes[t.key] = _Used(requests.cpu_m, requests.memory_bytes, t.pods)
        if not hashes:
            del self._usage[t.owner]

    def _used_of(self, owner: str) -> _Used | None:
        if owner == CLUSTER_OWNER:
            parts = [self._used_of(o) for o in self._usage]
            if not parts or any(p is None for p in parts):
                return None
            known = [p for p in parts if p is not None]
        else:
            hashes = list(self._usage.get(owner, {}).values())
            if not hashes or any(h is None for h in hashes):
                return None
            known = [h for h in hashes if h is not None]
        return _Used(
            sum(u.cpu_m for u in known), sum(u.memory_bytes for u in known), sum(u.pods for u in known)
        )

    def _count(self, pod: _Pod, sign: int) -> None:
        for owner in (pod.owner, CLUSTER_OWNER):
            totals = self._totals.setdefault(owner, _Totals())
            totals.phases[pod.phase] += sign
            if pod.phase in ACTIVE_PHASES:
                totals.cpu_m += sign * pod.requests.cpu_m
                totals.memory_bytes += sign * pod.requests.memory_bytes
            if pod.phase == "Running" and pod.node:
                left = totals.running_per_node.get(pod.node, 0) + sign
                if left:
                    totals.running_per_node[pod.node] = left
                else:
                    totals.running_per_node.pop(pod.node, None)
            if sign < 0 and owner != CLUSTER_OWNER and not any(totals.phases.values()):
                del self._totals[owner]

    def rows(self, second: int) -> list[TimelineRow]:
        self._totals.setdefault(CLUSTER_OWNER, _Totals())
        asking = {owner for owner, count in self._desired.items() if count and owner not in self._totals}
        loaded = {owner for owner in self._usage if owner not in self._totals}
        rows = []
        for owner in sorted({*self._totals, *asking, *loaded}):
            totals = self._totals.get(owner, _Totals())
            if owner == CLUSTER_OWNER:
                desired = sum(self._desired.values()) if self._desired else None
            else:
                desired = self._desired.get(owner)
            used = self._used_of(owner)
            rows.append(
                TimelineRow(
                    second=second,
                    owner=owner,
                    pending=totals.phases["Pending"],
                    running=totals.phases["Running"],
                    succeeded=totals.phases["Succeeded"],
                    failed=totals.phases["Failed"],
                    cpu_requested_m=round(totals.cpu_m, 3),
                    memory_requested_bytes=round(totals.memory_bytes),
                    nodes=len(self._nodes),
                    nodes_used=len(totals.running_per_node),
                    desired=desired,
                    cpu_used_m=None if used is None else float(used.cpu_m),
                    memory_used_bytes=None if used is None else float(used.memory_bytes),
                    usage_pods=None if used is None else used.pods,
                )
            )
        return rows

    def pod_times(self, origin_ms: int) -> list[PodTimes]:
        out = []
        for pod, (owner, created_ms) in sorted(self._created.items()):
            running_ms = self._running.get(pod)
            out.append(
                PodTimes(
                    pod,
                    owner,
                    (created_ms - origin_ms) / 1000,
                    None if running_ms is None else (running_ms - origin_ms) / 1000,
                )
            )
        return out


class ReferenceFolder:
    """The offline fold (no clock) with the default quiet limit, as :class:`TimelineFolder` was."""

    def __init__(self, max_idle_s: int) -> None:
        self.origin_ms: int | None = None
        self.max_idle_s = max_idle_s
        self._tally = ReferenceTally()
        self._parents: dict[str, str] = {}
        self._templates: dict[str, Requests] = {}
        self._queue: list[Transition] = []
        self._seq = 0
        self._next_second = 0
        self._watermark_ms: int | None = None
        self._quiet = 0
        self.skipped = 0

    def add(self, event: Event) -> None:
        try:
            self._add(event)
        except (AttributeError, TypeError, ValueError, FormatError):
            self.skipped += 1

    def add_usage(self, sample: UsageSample) -> None:
        self._seq += 1
        phase = USAGE_GAP if sample.gap else USAGE
        requests = Requests(float(sample.cpu_millicores), float(sample.memory_bytes))
        owner = self.owner_of(sample.owner_key)
        self._enqueue(
            Transition(
                sample.ts_ms, self._seq, sample.template_hash, phase, owner, None, requests, pods=sample.pods
            )
        )

    def _enqueue(self, transition: Transition) -> None:
        heapq.heappush(self._queue, transition)

    def _add(self, event: Event) -> None:
        self._watermark_ms = max(self._watermark_ms or event.ts_ms, event.ts_ms)
        key = parse_object_key(event.key)
        if event.type is EventType.POD_LIFECYCLE:
            assert event.owner_key is not None
            assert event.pod_start_ms is not None
            owner = self.owner_of(event.owner_key)
            self._push(event.pod_start_ms, event.key, "Running", owner, lifecycle=True)
            if event.pod_end_ms is not None:
                self._push(event.pod_end_ms, event.key, "Succeeded", owner, lifecycle=True)
        elif event.type is EventType.APPLIED and event.obj is not None:
            if key.kind == "Node" and key.group == "":
                self._push(event.ts_ms, event.key, NODE_ADDED, "")
            elif key.kind == "Pod" and key.group == "":
                self._remember(event.key, event.obj)
                self._pod_applied(event.ts_ms, event.key, event.obj)
                self._queue_desired(event.ts_ms, event.key, desired_pods(key.group, key.kind, event.obj))
            else:
                self._remember(event.key, event.obj)
                self._queue_desired(event.ts_ms, event.key, desired_pods(key.group, key.kind, event.obj))
        elif event.type is EventType.DELETED:
            if key.kind == "Node" and key.group == "":
                self._push(event.ts_ms, event.key, NODE_GONE, "")
                return
            if key.kind == "Pod" and key.group == "":
                self._push(event.ts_ms, event.key, "", "")
            if desired_pods(key.group, key.kind, None) is not None:
                self._queue_desired(event.ts_ms, event.key, GONE)

    def _remember(self, key: ObjectKey, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") and ref.get("name"):
                parsed = parse_object_key(key)
                self._parents[key] = object_key(
                    str(ref.get("apiVersion") or "v1"), str(ref["kind"]), parsed.namespace, str(ref["name"])
                )
        requests = reference_template_requests(obj)
        if requests is not None:
            self._templates[key] = requests

    def owner_of(self, key: str) -> str:
        seen = {key}
        while key in self._parents and self._parents[key] not in seen:
            key = self._parents[key]
            seen.add(key)
        return key

    def _pod_applied(self, ts_ms: int, key: ObjectKey, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata")
        if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
            self._push(ts_ms, key, "", "")
            return
        status = obj.get("status") or {}
        phase = status.get("phase") if isinstance(status, Mapping) else None
        if phase not in PHASES:
            phase = "Pending"
        raw_spec = obj.get("spec")
        spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
        self._push(
            ts_ms,
            key,
            str(phase),
            self.owner_of(key),
            node=spec.get("nodeName"),
            requests=reference_pod_spec_requests(spec),
        )

    def _queue_desired(self, ts_ms: int, key: ObjectKey, count: int | None) -> None:
        if count is None or self.owner_of(key) != key:
            return
        self._seq += 1
        self._enqueue(Transition(ts_ms, self._seq, key, DESIRED, key, pods=count))

    def _push(
        self,
        at_ms: int,
        key: str,
        phase: str,
        owner: str,
        *,
        node: object = None,
        requests: Requests | None = None,
        lifecycle: bool = False,
    ) -> None:
        self._seq += 1
        node_name = node if isinstance(node, str) else None
        self._enqueue(Transition(at_ms, self._seq, key, phase, owner, node_name, requests, lifecycle))

    def advance(self, until_ms: int | None = None) -> list[TimelineRow]:
        until = self._watermark_ms if until_ms is None else until_ms
        if until is None:
            return []
        if self.origin_ms is None:
            earliest = min([self._watermark_ms or until, *(t.at_ms for t in self._queue)])
            self.origin_ms = earliest - earliest % 1000
        origin = self.origin_ms
        complete = (until - origin) // 1000
        rows: list[TimelineRow] = []
        while self._next_second < complete:
            end_ms = origin + (self._next_second + 1) * 1000
            changed = False
            while self._queue and self._queue[0].at_ms < end_ms:
                self._tally.apply(heapq.heappop(self._queue), self._templates)
                changed = True
            if changed:
                self._quiet = 0
            elif self._quiet >= self.max_idle_s:
                next_change = (self._queue[0].at_ms - origin) // 1000 if self._queue else complete
                self._next_second = min(max(next_change, self._next_second + 1), complete)
                continue
            else:
                self._quiet += 1
            rows.extend(self._tally.rows(self._next_second))
            self._next_second += 1
        return rows

    def finish(self, end_ms: int | None = None) -> list[TimelineRow]:
        last = max([t.at_ms for t in self._queue] + [self._watermark_ms or 0])
        return self.advance(end_ms if end_ms is not None else last + 1000)

    def pod_times(self) -> list[PodTimes]:
        return self._tally.pod_times(self.origin_ms or 0)


def reference_rows(events: Iterable[Event]) -> list[TimelineRow]:
    """Every row of ``events`` folded in one pass (a convenience for tests)."""
    folder = ReferenceFolder(86_400)
    for event in events:
        folder.add(event)
    return folder.finish()
