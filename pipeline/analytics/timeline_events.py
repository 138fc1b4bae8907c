"""Reading events into the cluster timeline: the dated transitions each event queues for
:class:`~pipeline.analytics.timeline.TimelineFolder`, and what the fold remembers of the objects it has
seen (controller chains, pod templates' requests) to attribute them.

What each event contributes:

* ``APPLIED`` Pod: the pod exists, in ``status.phase`` (``Pending`` when the object has no status, as a
  just-created pod), on ``spec.nodeName``, requesting the sum of its containers' requests. Its owner is
  found by following ``controller`` owner references through the objects seen so far (pod → ReplicaSet
  → Deployment); a pod without a controller is its own owner, as in SimKube.
* ``POD_LIFECYCLE``: the pod runs from ``pod_start_ms`` and has succeeded at ``pod_end_ms``; its owner is
  the event's ``owner_key``. Transitions may lie in the future of the event (a trace carries a finished
  lifecycle at the pod's start), so they are queued by time and applied when the fold gets there.
* ``APPLIED`` Node / ``DELETED`` Node: the node exists / is gone.
* ``APPLIED`` workload at the top of its controller chain (a Deployment, StatefulSet or ReplicaSet, or a
  bare pod): the pods it asks for (:func:`~pipeline.model.desired.desired_pods`), the ``desired``
  column; ``DELETED``: it asks for nothing more. Traces without recorded pods (SimKube's) still give
  each owner a row, so their timelines say what the cluster was asked to run.
* any other ``APPLIED`` object: remembered for owner chains and pod templates (a pod known only from its
  lifecycle requests what its owner's template requests).
* ``DELETED`` Pod, or a Pod with ``metadata.deletionTimestamp`` (terminating): the pod is gone.

A base class of :class:`~pipeline.analytics.timeline.TimelineFolder`, apart from
:mod:`pipeline.analytics.timeline` because reading events is one concern and the fold's seconds,
horizon, idle stretches and saved state another. The attributes below are the folder's, set in its
``__init__``.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any, NamedTuple

from pipeline.analytics.pod_requests import Requests, is_map, pod_spec_requests, template_requests
from pipeline.analytics.timeline_rows import PHASES
from pipeline.analytics.timeline_tally import DESIRED, GONE, NODE_ADDED, NODE_GONE, Transition
from pipeline.model.desired import desired_pods
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey, object_key, parse_object_key

_LIFECYCLE, _APPLIED, _DELETED = EventType.POD_LIFECYCLE, EventType.APPLIED, EventType.DELETED
_new_tuple = tuple.__new__  # builds a Transition without its Python-level __new__ (all fields given)
_MAX_PARENT_KEYS = 100_000


class EventTransitions:
    """Turns each event into the transitions it contributes (see the module docstring)."""

    _watermark_ms: int | None
    _seq: int
    _queue: list[Transition]
    _parents: dict[str, str]
    _parent_keys: dict[tuple[str, str, str, str], str]
    _templates: dict[str, Requests]

    def _add(self, event: Event) -> None:
        ts_ms, key = event.ts_ms, event.key
        watermark = self._watermark_ms
        if not watermark or ts_ms > watermark:
            self._watermark_ms = ts_ms
        event_type = event.type
        if event_type is _LIFECYCLE:
            self._lifecycle(event)
        elif event_type is _APPLIED:
            obj = event.obj
            if obj is None:
                return
            kind = _kind_of(key)
            if kind.is_node:
                self._queue_node(ts_ms, key, present=True)
                return
            self._remember(key, obj)
            if kind.is_pod:
                self._pod_applied(ts_ms, key, obj)
            if kind.may_ask:
                self._queue_desired(ts_ms, key, desired_pods(kind.group, kind.kind, obj))
        elif event_type is _DELETED:
            kind = _kind_of(key)
            if kind.is_node:
                self._queue_node(ts_ms, key, present=False)
                return
            if kind.is_pod:
                self._push(ts_ms, key, "", "")
            if kind.may_ask:
                self._queue_desired(ts_ms, key, GONE)

    def _remember(self, key: ObjectKey, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or ():
            if is_map(ref) and ref.get("controller") and ref.get("kind") and ref.get("name"):
                self._parents[key] = self._parent_key(key, ref)
        spec = obj.get("spec")
        if spec is None or (type(spec) is dict and "template" not in spec and "jobTemplate" not in spec):
            return  # no pod template (a pod, a ConfigMap...): what template_requests finds at once
        requests = template_requests(obj)
        if requests is not None:
            self._templates[key] = requests

    def _parent_key(self, key: ObjectKey, ref: Mapping[str, Any]) -> str:
        """The key of the object ``ref`` (a controller reference of ``key``'s object) names."""
        api_version, kind, name = ref.get("apiVersion") or "v1", ref["kind"], ref["name"]
        if type(api_version) is not str or type(kind) is not str or type(name) is not str:
            namespace = parse_object_key(key).namespace
            return object_key(str(api_version), str(kind), namespace, str(name))
        # the namespace part as the key spells it (a cluster-scoped "_" builds the same key as None)
        memo = (key.split("/", 3)[2], api_version, kind, name)
        found = self._parent_keys.get(memo)
        if found is None:
            found = object_key(api_version, kind, parse_object_key(key).namespace, name)
            if len(self._parent_keys) >= _MAX_PARENT_KEYS:
                self._parent_keys.clear()  # bounded: keys are simply built again
            self._parent_keys[memo] = found
        return found

    def owner_of(self, key: str) -> str:
        """The top of ``key``'s controller chain among the objects seen (``key`` itself without one)."""
        parents = self._parents
        parent = parents.get(key)
        if parent is None or parent == key:
            return key
        top = parents.get(parent)
        if top is None or top in (parent, key):
            return parent  # the usual chains: a pod's owner, or a Deployment's ReplicaSet's
        if parents.get(top) is None:
            return top
        seen = {key}
        while key in self._parents and self._parents[key] not in seen:
            key = self._parents[key]
            seen.add(key)
        return key

    def _pod_applied(self, ts_ms: int, key: ObjectKey, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata")
        if is_map(meta) and meta.get("deletionTimestamp"):
            # terminating: on its way out, no longer serving (kubectl shows "Terminating", the
            # replayer's sampler skips it too), so it leaves the counts now, not when it is gone
            self._push(ts_ms, key, "", "")
            return
        status = obj.get("status") or {}
        phase = status.get("phase") if is_map(status) else None
        if phase not in PHASES:
            phase = "Pending"
        raw_spec = obj.get("spec")
        spec: Mapping[str, Any] = raw_spec if is_map(raw_spec) else {}
        owner = self.owner_of(key)
        node = spec.get("nodeName")
        requests = pod_spec_requests(spec)
        self._seq = seq = self._seq + 1  # what _push does, without the call
        transition = (
            ts_ms,
            seq,
            key,
            str(phase),
            owner,
            node if isinstance(node, str) else None,
            requests,
            False,
            0,
        )
        heapq.heappush(self._queue, _new_tuple(Transition, transition))

    def _lifecycle(self, event: Event) -> None:
        assert event.owner_key is not None
        assert event.pod_start_ms is not None
        owner = self.owner_of(event.owner_key)
        key, queue = event.key, self._queue
        self._seq = seq = self._seq + 1  # what _push does, without the call
        heapq.heappush(
            queue,
            _new_tuple(Transition, (event.pod_start_ms, seq, key, "Running", owner, None, None, True, 0)),
        )
        if event.pod_end_ms is not None:
            self._seq = seq = seq + 1
            ended = (event.pod_end_ms, seq, key, "Succeeded", owner, None, None, True, 0)
            heapq.heappush(queue, _new_tuple(Transition, ended))

    def _queue_desired(self, ts_ms: int, key: ObjectKey, count: int | None) -> None:
        """A change of what ``key`` asks for, if the rule says and ``key`` heads its controller chain
        (a ReplicaSet of a Deployment, or a pod of a ReplicaSet, is counted by its owner)."""
        if count is None or self.owner_of(key) != key:
            return
        self._seq += 1
        heapq.heappush(self._queue, Transition(ts_ms, self._seq, key, DESIRED, key, pods=count))

    def _queue_node(self, ts_ms: int, key: ObjectKey, *, present: bool) -> None:
        self._push(ts_ms, key, NODE_ADDED if present else NODE_GONE, "")

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
        self._seq = seq = self._seq + 1  # ties keep arrival order
        node_name = node if isinstance(node, str) else None
        heapq.heappush(
            self._queue,
            _new_tuple(Transition, (at_ms, seq, key, phase, owner, node_name, requests, lifecycle, 0)),
        )


class _Kind(NamedTuple):
    """What the fold needs to know of an event's kind, worked out once per kind."""

    group: str
    kind: str
    is_node: bool
    is_pod: bool
    may_ask: bool
    """Whether :func:`desired_pods` can say anything of this kind (it says None, whatever the object,
    of every kind but a pod and a replicated workload): if not, the fold does not ask it."""


_KINDS: dict[str, _Kind] = {}


def _kind_of(key: ObjectKey) -> _Kind:
    """The API group (``""`` for core) and kind of an event's key, as :func:`parse_object_key` gives
    them; an event's key is valid by construction, so only its kind prefix is split off (parsing the
    whole key was a tenth of the fold's time). Few prefixes exist: each is kept."""
    prefix = key[: key.index("/", key.index("/") + 1)]
    found = _KINDS.get(prefix)
    if found is None:
        parsed = parse_object_key(key)
        group, kind = parsed.group, parsed.kind
        core = group == ""
        asks = desired_pods(group, kind, None) is not None
        found = _KINDS[prefix] = _Kind(group, kind, core and kind == "Node", core and kind == "Pod", asks)
    return found
