"""The replay's pods counted per recorded owner and by how far they got, kept up to date pod by pod.

A sample of a large replay must be cheap: listing 20,000 pods takes the apiserver tens of seconds,
which spaces the samples too far apart for the fidelity resolution and for the convergence governor.
:class:`PodTally` holds one small :class:`PodView` per pod and counters beside them, so a pod event
costs O(1) and a sample O(owners). :func:`sample_of` is the plain recount from whole pods that the tally
must always agree with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


@dataclass(frozen=True, slots=True)
class PodCounts:
    """The replay's pods of one owner at one sample, by how far they got."""

    running: int = 0
    unscheduled: int = 0
    bound: int = 0
    """Bound to a node, not Running yet."""


class Stage(Enum):
    """How far a pod got; pods being deleted are left out of every count, as the fidelity sample
    leaves them out (a Terminating pod is on its way out, not part of the replayed workload)."""

    RUNNING = "running"
    UNSCHEDULED = "unscheduled"
    BOUND = "bound"
    FINISHED = "finished"
    DELETING = "deleting"


@dataclass(frozen=True, slots=True)
class PodView:
    """What the samples need of one pod."""

    owner: str | None
    """The recorded owner (the pod's owner annotation), None for pods without one."""
    stage: Stage
    node: str | None


def view_of(pod: Mapping[str, Any], owner_of: str) -> PodView:
    """The :class:`PodView` of a pod, its recorded owner read from the annotation ``owner_of``."""
    meta = pod.get("metadata") or {}
    owner = (meta.get("annotations") or {}).get(owner_of)
    node = (pod.get("spec") or {}).get("nodeName") or None
    phase = (pod.get("status") or {}).get("phase")
    if meta.get("deletionTimestamp"):
        stage = Stage.DELETING
    elif phase == "Running":
        stage = Stage.RUNNING
    elif phase in (None, "Pending"):
        stage = Stage.BOUND if node else Stage.UNSCHEDULED
    else:
        stage = Stage.FINISHED
    return PodView(owner if isinstance(owner, str) else None, stage, node)


@dataclass(frozen=True, slots=True)
class PodSample:
    """The replay's pods at one moment: Running (owner or not), the nodes they run on, per owner."""

    running: int
    nodes: int
    by_owner: dict[str, PodCounts]


_COUNTED = (Stage.RUNNING, Stage.UNSCHEDULED, Stage.BOUND)


def sample_of(pods: Iterable[Mapping[str, Any]], owner_of: str) -> PodSample:
    """The sample of a full list of pods, counted afresh (what a :class:`PodTally` must agree with)."""
    by_owner: Counter[tuple[str, Stage]] = Counter()
    running, nodes = 0, set()
    for view in (view_of(pod, owner_of) for pod in pods):
        if view.owner is not None and view.stage in _COUNTED:
            by_owner[(view.owner, view.stage)] += 1
        if view.stage is Stage.RUNNING:
            running += 1
            nodes.add(view.node)
    return PodSample(running, len(nodes - {None}), _per_owner(by_owner))


def count_pods(pods: Iterable[Mapping[str, Any]], owner_of: str) -> dict[str, PodCounts]:
    """Per recorded owner (the pod annotation ``owner_of``), pods Running, unscheduled and bound."""
    return sample_of(pods, owner_of).by_owner


def _per_owner(by_owner: Mapping[tuple[str, Stage], int]) -> dict[str, PodCounts]:
    fields: dict[str, dict[str, int]] = {}
    for (owner, stage), n in by_owner.items():
        if n:
            fields.setdefault(owner, {})[stage.value] = n
    return {owner: PodCounts(**f) for owner, f in fields.items()}


class PodTally:
    """Counts kept from pod changes: :meth:`reset` with a full list, then :meth:`observe` each watch
    event. Pods are told apart by namespace and name, which a watch delivers in order."""

    def __init__(self, owner_of: str) -> None:
        self._owner_of = owner_of
        self._views: dict[tuple[str, str], PodView] = {}
        self._by_owner: Counter[tuple[str, Stage]] = Counter()
        self._running_on: Counter[str] = Counter()
        """Running pods per node (a node with none is dropped: ``len`` is the nodes in use)."""
        self._running = 0

    def reset(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Forget every pod and count ``pods`` (a fresh list)."""
        self._views.clear()
        self._by_owner.clear()
        self._running_on.clear()
        self._running = 0
        for pod in pods:
            self.observe("ADDED", pod)

    def observe(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """One watch event (``ADDED``, ``MODIFIED`` or ``DELETED``) of one pod."""
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        old = self._views.pop(key, None)
        if old is not None:
            self._count(old, -1)
        if event_type != "DELETED":
            view = view_of(pod, self._owner_of)
            self._views[key] = view
            self._count(view, +1)

    def _count(self, view: PodView, sign: int) -> None:
        if view.owner is not None and view.stage in _COUNTED:
            self._by_owner[(view.owner, view.stage)] += sign
            if not self._by_owner[(view.owner, view.stage)]:
                del self._by_owner[(view.owner, view.stage)]
        if view.stage is Stage.RUNNING:
            self._running += sign
            if view.node is not None:
                self._running_on[view.node] += sign
                if not self._running_on[view.node]:
                    del self._running_on[view.node]

    def counts(self) -> dict[str, PodCounts]:
        """Per owner with at least one pod counted: Running, unscheduled and bound pods."""
        return _per_owner(self._by_owner)

    def sample(self) -> PodSample:
        return PodSample(self._running, len(self._running_on), self.counts())
