"""A replay with the simulated HPA deciding: what it writes besides the recorded objects.

* :class:`HpaWrites` adjusts recorded writes: HPAs are applied as ``autoscaling/v2`` with their timers
  divided by the speed (:func:`~pipeline.replay.hpa.timing.scale_hpa`), and a later write of an HPA's
  scale target keeps the replicas the simulation has (see :mod:`pipeline.replay.hpa.targets`).
* :class:`UsageDriver` drives the usage of the autoscaled owners' pods over trace time from the
  recorded load (:mod:`pipeline.replay.hpa.load`), as KWOK reads it: the ``kwok.x-k8s.io/usage-*``
  annotations of each running pod, rewritten in place (KWOK's ``usage-from-annotation`` evaluates them
  at every scrape, so no pod restarts). It also gives every node of the replay the annotation naming
  where KWOK serves its kubelet metrics, which nodes an autoscaler launches lack. What it writes, the
  pods it sees and the nodes are the ticks of the replay's pressure measure
  (:mod:`pipeline.replay.hpa.pressure`), in the report for what-ifs and sweeps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.model.errors import KubetapeError
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey
from pipeline.model.timespec import format_duration
from pipeline.replay.autoscale.settings import ScaledSetting
from pipeline.replay.clock.schedule import Clock, pause
from pipeline.replay.hpa.load import LoadModel, RecordedLoad, pod_usage, usage_annotations
from pipeline.replay.hpa.pressure import OwnerTick, PressureMeter, pod_cpu_request_m
from pipeline.replay.hpa.targets import HpaPlan, is_hpa
from pipeline.replay.hpa.timing import scale_hpa
from pipeline.replay.ports import ReplayCluster
from pipeline.replay.rewrite import (
    RECORDED_OWNER_ANNOTATION,
    REPLAY_LABEL,
    RESOURCE_METRICS_PATH_ANNOTATION,
    resource_metrics_path,
)

log = logging.getLogger(__name__)

USAGE_INTERVAL_S = 1.0
"""Trace seconds between two updates of the pods' usage: a scrape sees the recorded load of its
moment within a trace second, and the pressure measure has that resolution, at every speed."""
USAGE_INTERVAL_FLOOR_S = 0.1
"""The shortest wall interval between two updates: each lists the replay's pods and nodes, so above
x10 the updates stay 10 a second and span more than a trace second each."""
USAGE_INTERVAL_SETTING = "kubetape replay: the usage driver's update period"


def usage_interval(speed: float) -> tuple[float, ScaledSetting]:
    """Wall seconds between two usage updates at ``speed`` (one per trace second, at most 10 a wall
    second), and the setting as given (trace) and applied (wall) for the report."""
    ideal = USAGE_INTERVAL_S / speed
    applied = min(max(ideal, USAGE_INTERVAL_FLOOR_S), USAGE_INTERVAL_S)
    note = ""
    if applied > ideal + 1e-9:
        note = (
            f"ideal {format_duration(ideal)}; at most {1 / USAGE_INTERVAL_FLOOR_S:g} updates a wall second "
            f"(each lists the replay's pods and nodes): {format_duration(applied * speed)} of trace each"
        )
    elif applied < ideal - 1e-9:
        note = f"ideal {format_duration(ideal)}; at least one update a wall second"
    return applied, ScaledSetting(
        USAGE_INTERVAL_SETTING, format_duration(USAGE_INTERVAL_S), format_duration(applied), note
    )


@dataclass(frozen=True, slots=True)
class HpaReplay:
    """Everything the replayer needs to let the simulated HPA decide (made by ReplayRun.prepare)."""

    plan: HpaPlan
    load: RecordedLoad
    model: LoadModel = LoadModel.CONSERVE
    process_settings: tuple[ScaledSetting, ...] = ()
    """The controller-manager's and metrics-server's timers, as given and as applied."""
    reaction_ms: float = 0.0
    """The HPA's reaction time in trace ms (:mod:`pipeline.replay.hpa.reaction`): the window its
    owners' replicas are judged over."""
    speed: float = 1.0
    """The replay's speed: the usage driver updates the pods once per trace second
    (:func:`usage_interval`)."""


@dataclass(slots=True)
class UsageFigures:
    """What the driver did, for the report."""

    pod_writes: int = 0
    node_writes: int = 0
    failures: int = 0
    last_failure: str = ""


class HpaWrites:
    """Adjusts one recorded write for the simulated HPA (see the module docstring)."""

    def __init__(self, cluster: ReplayCluster, hpa: HpaReplay, speed: float) -> None:
        self._cluster = cluster
        self._targets = hpa.plan.targets
        self._speed = speed

    async def adjust(self, event: Event, body: dict[str, Any]) -> dict[str, Any]:
        if is_hpa(body):
            return scale_hpa(body, self._speed)[0]
        if event.key not in self._targets:
            return body
        meta = body.get("metadata") or {}
        live = await self._cluster.get(
            str(body.get("apiVersion")), str(body.get("kind")), meta.get("namespace"), str(meta.get("name"))
        )
        spec = body.get("spec")
        if live is not None and isinstance(spec, dict):
            replicas = (live.get("spec") or {}).get("replicas")
            if replicas is None:
                spec.pop("replicas", None)
            else:
                spec["replicas"] = replicas  # the simulated HPA's decision, not the recorded one
        return body


class UsageDriver:
    """Writes each autoscaled owner's recorded load onto its running simulated pods, every
    ``interval_s`` wall seconds (default: once per trace second, :func:`usage_interval`), at the trace
    time ``trace_now_ms()`` says."""

    def __init__(
        self,
        cluster: ReplayCluster,
        hpa: HpaReplay,
        replay_name: str,
        trace_now_ms: Callable[[], float],
        clock: Clock,
        *,
        interval_s: float | None = None,
    ) -> None:
        self._cluster = cluster
        self._hpa = hpa
        self._selector = f"{REPLAY_LABEL}={replay_name}"
        self._trace_now_ms = trace_now_ms
        self._clock = clock
        self._interval_s, self._interval_setting = usage_interval(hpa.speed)
        if interval_s is not None:
            self._interval_s = interval_s
        self._owners = frozenset(hpa.plan.owners)
        self.figures = UsageFigures()
        self.pressure = PressureMeter(hpa.plan.cpu_targets)

    async def run_forever(self) -> None:
        while True:
            await self.update()
            await pause(self._clock, self._interval_s)

    async def update(self) -> None:
        """One pass: the replay's nodes get their metrics path, the owners' pods their usage."""
        try:
            nodes = await self._annotate_nodes()
            pods = await self._cluster.list_objects("v1", "Pod", label_selector=self._selector)
        except KubetapeError as exc:
            self._failed(f"listing the replay's pods and nodes: {exc}")
            return
        now_ms = round(self._trace_now_ms())
        by_owner: dict[ObjectKey, list[dict[str, Any]]] = {owner: [] for owner in self._owners}
        pending = dict.fromkeys(self._owners, 0)
        for pod in pods:
            meta = pod.get("metadata") or {}
            owner = (meta.get("annotations") or {}).get(RECORDED_OWNER_ANNOTATION)
            if owner in self._owners and _running(pod):
                by_owner[ObjectKey(owner)].append(pod)
            elif owner in self._owners and _pending(pod):
                pending[ObjectKey(owner)] += 1
        writes = []
        ticks = {}
        for owner, running in by_owner.items():
            load = self._hpa.load.at(owner, now_ms)
            # before the first reading the pods keep KWOK's default usage
            usage = None if load is None else pod_usage(load, len(running), self._hpa.model)
            request = pod_cpu_request_m(running[0]) if running else None
            cpu = None if usage is None else usage.cpu_millicores
            ticks[owner] = OwnerTick(len(running), pending[owner], cpu, request)
            if usage is None:
                continue
            for pod in running:
                containers = len((pod.get("spec") or {}).get("containers") or [])
                wanted = usage_annotations(usage, containers)
                have = (pod.get("metadata") or {}).get("annotations") or {}
                if any(have.get(k) != v for k, v in wanted.items()):
                    writes.append(self._annotate("v1", "Pod", pod, wanted))
        self.pressure.observe(now_ms, ticks, nodes)
        results = await asyncio.gather(*writes)
        self.figures.pod_writes += sum(results)

    async def _annotate_nodes(self) -> int:
        """The replay's nodes (annotated as needed), counted."""
        nodes = await self._cluster.list_objects("v1", "Node", label_selector=self._selector)
        writes = []
        for node in nodes:
            meta = node.get("metadata") or {}
            path = resource_metrics_path(str(meta.get("name")))
            if (meta.get("annotations") or {}).get(RESOURCE_METRICS_PATH_ANNOTATION) != path:
                writes.append(self._annotate("v1", "Node", node, {RESOURCE_METRICS_PATH_ANNOTATION: path}))
        results = await asyncio.gather(*writes)
        self.figures.node_writes += sum(results)
        return len(nodes)

    async def _annotate(
        self, api_version: str, kind: str, obj: Mapping[str, Any], annotations: Mapping[str, str]
    ) -> bool:
        meta = obj.get("metadata") or {}
        body: dict[str, Any] = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": meta.get("name"), "annotations": dict(annotations)},
        }
        if meta.get("namespace"):
            body["metadata"]["namespace"] = meta["namespace"]
        try:
            await self._cluster.apply(body)
        except KubetapeError as exc:  # gone meanwhile, or the apiserver busy: the next pass tries again
            self._failed(f"annotating {kind} {meta.get('namespace', '')}/{meta.get('name')}: {exc}")
            return False
        return True

    def _failed(self, problem: str) -> None:
        self.figures.failures += 1
        self.figures.last_failure = problem
        log.warning("usage update failed", extra={"ctx": {"problem": problem}})

    def report(self) -> dict[str, Any]:
        """The report's ``pod_autoscaling`` section."""
        plan = self._hpa.plan
        load = self._hpa.load.to_json()
        return {
            "autoscaler": "hpa",
            "load_model": self._hpa.model.value,
            "reaction_ms": round(self._hpa.reaction_ms),
            "owners": [
                {
                    "owner": str(owner),
                    "hpa": str(plan.targets[owner]),
                    **load.get(str(owner), {}),
                    "replica_writes_left_out": plan.replica_writes_left_out.get(owner, 0),
                }
                for owner in plan.owners
            ],
            "settings": [
                s.to_json() for s in (*plan.settings, *self._hpa.process_settings, self._interval_setting)
            ],
            "usage_writes": self.figures.pod_writes,
            "node_annotations_written": self.figures.node_writes,
            "usage_write_failures": self.figures.failures,
            "last_failure": self.figures.last_failure,
            "pressure": self.pressure.to_json(),
        }


def _pending(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return (pod.get("status") or {}).get("phase") == "Pending" and not meta.get("deletionTimestamp")


def _running(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return (pod.get("status") or {}).get("phase") == "Running" and not meta.get("deletionTimestamp")
