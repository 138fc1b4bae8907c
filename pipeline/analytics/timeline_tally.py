"""What the cluster holds at a cluster timeline's current second, as transitions are applied to it.

Besides pods, nodes and desired pods it keeps each owner's recorded load (its last usage sample per
template hash, or that its load is unknown since a gap sample).

:class:`~pipeline.analytics.timeline.TimelineFolder` turns events into :class:`Transition` values
dated when they take effect; :class:`ClusterTally` applies them in time order and keeps pods by owner
and phase, nodes and the pods each workload asks for, with running sums so that the rows of a second
never scan every pod ever seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pipeline.analytics.pod_requests import Requests
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, PHASES, PodTimes, TimelineRow
from pipeline.model.keys import parse_object_key

ACTIVE_PHASES = ("Pending", "Running")
"""Phases in which a pod holds its requested resources (the scheduler's view)."""
NODE_ADDED, NODE_GONE = "node+", "node-"  # transition "phases" of nodes
DESIRED, GONE = "desired", -1  # a workload's desired pods change to ``pods``; GONE: it was deleted
USAGE, USAGE_GAP = "usage", "usage-gap"
"""Transition "phases" of recorded load: ``owner``'s pods of template hash ``key`` used ``requests``
(CPU millicores, memory bytes) over ``pods`` pods from then on / their load is unknown from then on."""


@dataclass(frozen=True, slots=True)
class Used:
    """One owner and template hash's recorded load: summed CPU millicores and memory bytes, pods."""

    cpu_m: float
    memory_bytes: float
    pods: int


class Transition(NamedTuple):
    """One change at ``at_ms``: a pod's new phase ("" = gone) or a node's arrival/departure. Ordered in
    the fold's queue by ``(at_ms, seq)`` (``seq`` is unique: ties keep arrival order). A named tuple: the
    fold makes one or two per event, and a frozen dataclass cost 4x more to build."""

    at_ms: int
    seq: int
    key: str
    phase: str
    owner: str
    node: str | None = None
    requests: Requests | None = None
    from_lifecycle: bool = False
    pods: int = 0
    """For a ``desired`` change: the pods asked for (``GONE``: the workload was deleted); for a ``usage``
    one: the pods measured. (Named ``pods``: a tuple has a ``count`` method.)"""

    def to_json(self) -> list[Any]:
        """The transition as a JSON-able list (an entry of the fold's saved queue)."""
        requests = None if self.requests is None else [self.requests.cpu_m, self.requests.memory_bytes]
        return [
            self.at_ms,
            self.seq,
            self.key,
            self.phase,
            self.owner,
            self.node,
            requests,
            self.from_lifecycle,
            self.pods,
        ]

    @classmethod
    def from_json(cls, value: list[Any]) -> Transition:
        """The transition :meth:`to_json` gave (its last field is absent from states older than it)."""
        at, seq, key, phase, owner, node, req, lifecycle, *count = value
        requests = None if req is None else Requests(float(req[0]), float(req[1]))
        return cls(at, seq, key, phase, owner, node, requests, lifecycle, *count)


_NO_REQUESTS = Requests()
_POD_PHASES = frozenset(PHASES)


@dataclass(slots=True)
class _Pod:
    owner: str
    phase: str = "Pending"
    node: str | None = None
    requests: Requests = field(default_factory=Requests)
    from_lifecycle: bool = False


@dataclass(slots=True)
class _Totals:
    """Running sums of one owner's pods, kept up to date as pods change (a snapshot per second must
    not scan every pod ever seen)."""

    phases: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    cpu_m: float = 0.0
    memory_bytes: float = 0.0
    running_per_node: dict[str, int] = field(default_factory=dict)


class ClusterTally:
    """Pods, nodes and desired pods after every transition applied so far, and each pod's times."""

    def __init__(self) -> None:
        self._pods: dict[str, _Pod] = {}
        # owner → template hash → its last recorded load (None: unknown since a gap)
        self._usage: dict[str, dict[str, Used | None]] = {}
        self._totals: dict[str, _Totals] = {}
        self._nodes: set[str] = set()
        self._desired: dict[str, int] = {}  # owner → pods it asks for, while it exists
        self._created: dict[str, tuple[str, int]] = {}
        self._running: dict[str, int] = {}

    def apply(self, t: Transition, templates: Mapping[str, Requests]) -> None:
        """Apply ``t``; a pod known only from its lifecycle requests what ``templates`` (per owner) say."""
        at_ms, _seq, key, phase, owner, node, requests, from_lifecycle, _pods = t
        if phase not in _POD_PHASES and self._applied_other(t):  # rarely: what is not a pod's change
            return
        pod = self._pods.get(key)
        if pod is None:
            pod = self._pods[key] = _Pod(owner)
            if key not in self._created:
                self._created[key] = (owner, at_ms)
        else:
            self._count(pod, -1)
        if from_lifecycle:
            pod.from_lifecycle = True
            if pod.requests == _NO_REQUESTS:
                pod.requests = templates.get(owner, _NO_REQUESTS)
        elif requests is not None:
            pod.requests = requests
        if owner:
            pod.owner = owner
        # a recorded pod object keeps the status of its creation (the watcher publishes spec changes):
        # its "Pending" says nothing against the pod's lifecycle, which knows when it ran
        if from_lifecycle or not (pod.from_lifecycle and phase == "Pending"):
            pod.phase = phase
        if node:
            pod.node = node
        self._count(pod, +1)
        if phase == "Running" and key not in self._running:
            self._running[key] = at_ms

    def _applied_other(self, t: Transition) -> bool:
        """Apply a transition that is not a pod's new phase; False if it is none of those either (a
        hand-edited state), which then fails as a pod's would."""
        key, phase = t.key, t.phase
        if phase == DESIRED:
            if t.pods == GONE:
                self._desired.pop(key, None)
            else:
                self._desired[key] = t.pods
        elif phase in {USAGE, USAGE_GAP}:
            self._use(t)
        elif phase in {NODE_ADDED, NODE_GONE}:
            name = parse_object_key(key).name
            if phase == NODE_ADDED:
                self._nodes.add(name)
            else:
                self._nodes.discard(name)
        elif not phase:
            gone = self._pods.pop(key, None)
            if gone is not None:
                self._count(gone, -1)
        else:
            return False
        return True

    def _use(self, t: Transition) -> None:
        hashes = self._usage.setdefault(t.owner, {})
        if t.phase == USAGE_GAP:
            hashes[t.key] = None
        elif t.pods == 0:  # the owner's pods of this template are gone: its load ended, it is not unknown
            hashes.pop(t.key, None)
        else:
            requests = t.requests or Requests()
            hashes[t.key] = Used(requests.cpu_m, requests.memory_bytes, t.pods)
        if not hashes:
            del self._usage[t.owner]

    def _used_of(self, owner: str) -> Used | None:
        """The owner's load summed over its template hashes (the cluster's: over owners); None when
        nothing is recorded or any part is unknown."""
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
        return Used(
            sum(u.cpu_m for u in known), sum(u.memory_bytes for u in known), sum(u.pods for u in known)
        )

    def _count(self, pod: _Pod, sign: int) -> None:
        """Add (``sign`` +1) or take away (-1) the pod in its owner's and then the cluster's running
        sums: it runs twice for nearly every transition, so it is written out for both, without calls."""
        phase, node, owner, requests = pod.phase, pod.node, pod.owner, pod.requests
        active = phase in ACTIVE_PHASES
        running_on = node if phase == "Running" and node else None
        all_totals = self._totals
        totals = all_totals.get(owner)
        if totals is None:
            totals = all_totals[owner] = _Totals()
        phases = totals.phases
        phases[phase] += sign
        if active:
            totals.cpu_m += sign * requests.cpu_m
            totals.memory_bytes += sign * requests.memory_bytes
        if running_on is not None:
            per_node = totals.running_per_node
            left = per_node.get(running_on, 0) + sign
            if left:
                per_node[running_on] = left
            else:
                per_node.pop(running_on, None)
        if sign < 0 and owner != CLUSTER_OWNER and not any(phases.values()):
            del all_totals[owner]  # an owner without pods has no rows; keep the scan short
        # the same for the cluster (the same object if the owner is spelled "*": counted twice, as before)
        totals = all_totals.get(CLUSTER_OWNER)
        if totals is None:
            totals = all_totals[CLUSTER_OWNER] = _Totals()
        totals.phases[phase] += sign
        if active:
            totals.cpu_m += sign * requests.cpu_m
            totals.memory_bytes += sign * requests.memory_bytes
        if running_on is not None:
            per_node = totals.running_per_node
            left = per_node.get(running_on, 0) + sign
            if left:
                per_node[running_on] = left
            else:
                per_node.pop(running_on, None)

    def rows(self, second: int) -> list[TimelineRow]:
        """The rows of ``second``: one per owner with pods or asking for some, and the cluster's."""
        all_totals = self._totals
        if CLUSTER_OWNER not in all_totals:
            all_totals[CLUSTER_OWNER] = _Totals()
        nodes = len(self._nodes)
        desired, usage = self._desired, self._usage
        owners = all_totals.keys() | {
            # an owner asking for pods has a row even when none of them were recorded (SimKube traces)
            *(owner for owner, count in desired.items() if count),
            # and so does one whose load is recorded while its pods are not (filtered, or not seen yet)
            *usage,
        }
        none = _Totals()
        out = []
        for owner in sorted(owners):
            totals = all_totals.get(owner, none)
            phases = totals.phases
            if owner == CLUSTER_OWNER:
                wants = sum(desired.values()) if desired else None
            else:
                wants = desired.get(owner)
            used = self._used_of(owner) if usage else None  # nothing recorded: no sum to make
            out.append(
                TimelineRow(
                    second,
                    owner,
                    phases["Pending"],
                    phases["Running"],
                    phases["Succeeded"],
                    phases["Failed"],
                    round(totals.cpu_m, 3),
                    round(totals.memory_bytes),
                    nodes,
                    len(totals.running_per_node),
                    wants,
                    None if used is None else float(used.cpu_m),
                    None if used is None else float(used.memory_bytes),
                    None if used is None else used.pods,
                )
            )
        return out

    def pod_times(self, origin_ms: int) -> list[PodTimes]:
        """Per pod: when it was first seen and first seen running (seconds since ``origin_ms``)."""
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

    def to_state(self) -> dict[str, Any]:
        """Pods, nodes, desired pods and the pods' times as JSON-able data (the tally's part of
        :meth:`TimelineFolder.to_state <pipeline.analytics.timeline.TimelineFolder.to_state>`)."""
        return {
            "pods": {
                k: [p.owner, p.phase, p.node, p.requests.cpu_m, p.requests.memory_bytes, p.from_lifecycle]
                for k, p in self._pods.items()
            },
            "nodes": sorted(self._nodes),
            "desired": self._desired,
            "created": {k: [owner, at] for k, (owner, at) in self._created.items()},
            "running": self._running,
            "usage": {
                owner: {
                    h: None if u is None else [u.cpu_m, u.memory_bytes, u.pods] for h, u in hashes.items()
                }
                for owner, hashes in self._usage.items()
            },
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ClusterTally:
        """The tally :meth:`to_state` described (KeyError, TypeError or ValueError if it does not fit);
        the running sums are recomputed."""
        tally = cls()
        tally._pods = {
            k: _Pod(owner, phase, node, Requests(cpu, mem), lifecycle)
            for k, (owner, phase, node, cpu, mem, lifecycle) in state["pods"].items()
        }
        tally._nodes = set(state["nodes"])
        # absent in states written before it existed
        tally._desired = {k: int(v) for k, v in state.get("desired", {}).items()}
        for pod in tally._pods.values():
            tally._count(pod, +1)
        tally._created = {k: (owner, at) for k, (owner, at) in state["created"].items()}
        tally._running = {k: int(v) for k, v in state["running"].items()}
        tally._usage = {  # absent in states written before it existed
            owner: {
                h: None if u is None else Used(float(u[0]), float(u[1]), int(u[2])) for h, u in hashes.items()
            }
            for owner, hashes in state.get("usage", {}).items()
        }
        return tally
