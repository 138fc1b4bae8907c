"""Figures of an autoscaled replay, folded from the replayer's periodic samples of nodes and pods.

Each sample gives the autoscaler's nodes (those labelled ``karpenter.sh/nodepool`` with one of the
replay's pools) and the replay's pods. Between two samples the state is taken as constant, so
node-hours, cost and pending-pod seconds are sums of counts × the wall gap × the speed (trace time).
Launches and terminations are node names appearing and disappearing between samples, so a node that
lived shorter than one sample interval is missed. Pending→running comes from Kubernetes' own
timestamps (creation, the Ready condition's transition): whole seconds of wall time, which the report
states as the resolution. Pure logic, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipeline.replay.clock.schedule import rounded_percentile

NODEPOOL_LABEL = "karpenter.sh/nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
PRICE_LABEL = "eks-node-viewer/instance-price"
"""The KWOK provider labels each node with its offering's hourly price."""
MAX_TIMELINE = 20_000


def _k8s_time(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _running_since(pod: Mapping[str, Any]) -> float | None:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return _k8s_time(condition.get("lastTransitionTime"))
    return _k8s_time(status.get("startTime"))


def _is_pending(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return (pod.get("status") or {}).get("phase") == "Pending" and not meta.get("deletionTimestamp")


@dataclass(slots=True)
class AutoscaleFigures:
    """Accumulates samples; :meth:`to_json` and :meth:`summary_lines` give the report's figures."""

    speed: float
    prices: Mapping[str, float] = field(default_factory=dict)
    """$/hour by instance type; a node's price label is used for types not in it."""
    timeline: list[tuple[float, int, dict[str, int]]] = field(default_factory=list)
    """(trace ms, autoscaler nodes, nodes by instance type) per sample."""
    launches: int = 0
    terminations: int = 0
    present_at_start: int = 0
    peak_nodes: int = 0
    node_seconds: float = 0.0
    cost: float = 0.0
    priced: bool = True
    pending_pod_seconds: float = 0.0
    pending_to_running_s: list[float] = field(default_factory=list)
    """Wall seconds from a pod's creation to Running, one per pod seen Running."""
    _seen_nodes: set[str] = field(default_factory=set)
    _live_nodes: set[str] = field(default_factory=set)
    _pods_timed: set[str] = field(default_factory=set)
    _node_prices: dict[str, float] = field(default_factory=dict)
    _pending: int = 0
    _samples: int = 0
    _last_wall_s: float | None = None

    def observe(
        self,
        at_ms: float,
        wall_s: float,
        nodes: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
    ) -> None:
        """One sample taken at ``wall_s`` (a monotonic clock, seconds) and trace offset ``at_ms``."""
        gap_s = 0.0 if self._last_wall_s is None else max(wall_s - self._last_wall_s, 0.0)
        self._last_wall_s = wall_s
        trace_hours = gap_s * self.speed / 3600.0
        # the state since the previous sample is the previous sample's
        for name in self._live_nodes:
            self.node_seconds += gap_s * self.speed
            price = self._node_prices.get(name)
            if price is None:
                self.priced = False
            else:
                self.cost += price * trace_hours
        self.pending_pod_seconds += self._pending * gap_s * self.speed

        live = {str((n.get("metadata") or {}).get("name")) for n in nodes}
        if self._samples == 0:
            self.present_at_start = len(live)
        else:
            self.launches += len(live - self._seen_nodes)
            self.terminations += len(self._live_nodes - live)
        self._seen_nodes |= live
        self._live_nodes = live
        self._node_prices = {
            str((n.get("metadata") or {}).get("name")): price
            for n in nodes
            if (price := self._price(n)) is not None
        }
        self._pending = sum(1 for p in pods if _is_pending(p))
        self.peak_nodes = max(self.peak_nodes, len(live))
        by_type: dict[str, int] = {}
        for node in nodes:
            kind = ((node.get("metadata") or {}).get("labels") or {}).get(INSTANCE_TYPE_LABEL, "unknown")
            by_type[kind] = by_type.get(kind, 0) + 1
        if len(self.timeline) < MAX_TIMELINE:
            self.timeline.append((at_ms, len(live), by_type))
        self._time_pods(pods)
        self._samples += 1

    def _price(self, node: Mapping[str, Any]) -> float | None:
        labels = (node.get("metadata") or {}).get("labels") or {}
        kind = str(labels.get(INSTANCE_TYPE_LABEL, ""))
        if kind in self.prices:
            return float(self.prices[kind])
        try:
            return float(labels[PRICE_LABEL])
        except (KeyError, ValueError):
            return None

    def _time_pods(self, pods: Sequence[Mapping[str, Any]]) -> None:
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid") or meta.get("name"))
            if uid in self._pods_timed:
                continue
            running = _running_since(pod)
            created = _k8s_time(meta.get("creationTimestamp"))
            if running is None or created is None:
                continue
            self._pods_timed.add(uid)
            self.pending_to_running_s.append(max(running - created, 0.0))

    @property
    def final_nodes(self) -> int:
        return len(self._live_nodes)

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes_peak": self.peak_nodes,
            "nodes_at_start": self.present_at_start,
            "nodes_at_end": self.final_nodes,
            "launches": self.launches,
            "terminations": self.terminations,
            "node_hours": round(self.node_seconds / 3600.0, 6),
            "cost": round(self.cost, 6) if self.priced else None,
            "pending_pod_seconds": round(self.pending_pod_seconds, 3),
            "pending_to_running": {
                "pods": len(self.pending_to_running_s),
                "p50_wall_s": rounded_percentile(self.pending_to_running_s, 0.5),
                "p99_wall_s": rounded_percentile(self.pending_to_running_s, 0.99),
                "resolution_wall_s": 1.0,
            },
            "time_basis": "node-hours, cost and pending-pod seconds in trace time (wall × speed)",
            "nodes_timeline": [
                {"trace_ms": round(at, 1), "nodes": count, "by_instance_type": by_type}
                for at, count, by_type in self.timeline
            ],
        }

    def summary_lines(self) -> list[str]:
        data = self.to_json()
        p2r = data["pending_to_running"]
        cost = "unpriced" if data["cost"] is None else f"cost {data['cost']:.4f}"
        return [
            f"  autoscaler: {data['launches']} launches, {data['terminations']} terminations, nodes "
            f"peak {data['nodes_peak']}, at end {data['nodes_at_end']}; {data['node_hours']:.4f} "
            f"node-hours, {cost} (trace time)",
            f"  pending pods: {data['pending_pod_seconds']:.1f} pod-seconds (trace time); pending→"
            f"running p50 {p2r['p50_wall_s']} s, p99 {p2r['p99_wall_s']} s over {p2r['pods']} pods "
            f"(wall, 1 s resolution)",
        ]
