"""How well the simulated HPA served the recorded load, and what it cost: pure logic, no I/O.

A what-if on an HPA's settings (``kubetape sweep --hpa-target 50 --hpa-target 80``) trades pods against
pressure. The usage driver (:class:`~pipeline.replay.hpa.replay.UsageDriver`) knows both at every tick:
the load it writes onto each autoscaled owner's running pods, their requests, and the pods pending; it
hands them to a :class:`PressureMeter`, which sums, per owner, in trace seconds:

* ``above_target_seconds``: the pods' CPU utilization (the usage written on each running pod over its
  CPU request, what a Resource metric of the HPA reads) was above the HPA's target utilization;
* ``overload_seconds``: it was above 100 % of the requests (the pods got more load than they asked
  for: a real service would slow down or fail);
* ``pending_pod_seconds``: the owner's pods waiting to run;
* ``pod_hours``: the owner's running pods (the HPA's cost).

and for the replay ``node_hours`` (the replay's nodes). Between two ticks the state of the earlier one
holds (the driver ticks once per wall second, so the resolution is the speed in trace seconds). With no
pod running there is no utilization to measure: such time counts in neither, and its pending pods say
what went wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.model.errors import FormatError
from pipeline.model.keys import ObjectKey
from pipeline.model.quantity import cpu_millicores, parse_quantity

OVERLOAD_PERCENT = 100.0


@dataclass(frozen=True, slots=True)
class OwnerTick:
    """One autoscaled owner at one tick of the usage driver."""

    running: int
    pending: int = 0
    cpu_per_pod_m: float | None = None
    """The CPU usage written on each running pod (None: no load known yet)."""
    request_per_pod_m: float | None = None
    """The CPU each pod requests (None: no request, so no utilization)."""

    @property
    def utilization_percent(self) -> float | None:
        if self.running <= 0 or self.cpu_per_pod_m is None or not self.request_per_pod_m:
            return None
        return 100.0 * self.cpu_per_pod_m / self.request_per_pod_m


@dataclass(slots=True)
class OwnerPressure:
    """One owner's sums, in trace seconds."""

    target_percent: float | None
    pod_seconds: float = 0.0
    pending_pod_seconds: float = 0.0
    above_target_seconds: float = 0.0
    overload_seconds: float = 0.0
    measured_seconds: float = 0.0
    """Time with a utilization to judge (a pod running, its load and request known)."""
    peak_utilization_percent: float = 0.0

    def add(self, tick: OwnerTick, seconds: float) -> None:
        self.pod_seconds += tick.running * seconds
        self.pending_pod_seconds += tick.pending * seconds
        utilization = tick.utilization_percent
        if utilization is None:
            return
        self.measured_seconds += seconds
        if self.target_percent is not None and utilization > self.target_percent:
            self.above_target_seconds += seconds
        if utilization > OVERLOAD_PERCENT:
            self.overload_seconds += seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "target_utilization_percent": self.target_percent,
            "pod_hours": round(self.pod_seconds / 3600.0, 6),
            "pending_pod_seconds": round(self.pending_pod_seconds, 3),
            "above_target_seconds": round(self.above_target_seconds, 3),
            "overload_seconds": round(self.overload_seconds, 3),
            "measured_seconds": round(self.measured_seconds, 3),
            "peak_utilization_percent": round(self.peak_utilization_percent, 1),
        }


@dataclass(slots=True)
class PressureMeter:
    """Sums the driver's ticks (see the module docstring). ``targets``: each autoscaled owner's HPA CPU
    target utilization in percent (None: its HPA scales on something else; above-target is not judged)."""

    targets: Mapping[ObjectKey, float | None]
    owners: dict[ObjectKey, OwnerPressure] = field(default_factory=dict)
    node_seconds: float = 0.0
    seconds: float = 0.0
    ticks: int = 0
    _last_ms: float | None = None
    _last_owners: Mapping[ObjectKey, OwnerTick] = field(default_factory=dict)
    _last_nodes: int = 0

    def __post_init__(self) -> None:
        self.owners = {owner: OwnerPressure(target) for owner, target in self.targets.items()}

    def observe(self, at_ms: float, owners: Mapping[ObjectKey, OwnerTick], nodes: int) -> None:
        """The state at trace time ``at_ms`` (ms since the trace's start; a tick earlier than the last
        adds no time). Owners not in ``owners`` run and wait for no pod."""
        if self._last_ms is not None:
            seconds = max(at_ms - self._last_ms, 0.0) / 1000.0
            self.seconds += seconds
            self.node_seconds += self._last_nodes * seconds
            for owner, tick in self._last_owners.items():
                self._owner(owner).add(tick, seconds)
        self._last_ms = at_ms if self._last_ms is None else max(at_ms, self._last_ms)
        self._last_owners = dict(owners)
        self._last_nodes = nodes
        for owner, tick in owners.items():
            utilization = tick.utilization_percent
            if utilization is not None:
                pressure = self._owner(owner)
                pressure.peak_utilization_percent = max(pressure.peak_utilization_percent, utilization)
        self.ticks += 1

    def _owner(self, owner: ObjectKey) -> OwnerPressure:
        if owner not in self.owners:
            self.owners[owner] = OwnerPressure(self.targets.get(owner))
        return self.owners[owner]

    def totals(self) -> dict[str, float]:
        """The replay's sums over its owners: what a sweep compares."""
        owners = self.owners.values()
        return {
            "pod_hours": round(sum(o.pod_seconds for o in owners) / 3600.0, 6),
            "node_hours": round(self.node_seconds / 3600.0, 6),
            "pending_pod_seconds": round(sum(o.pending_pod_seconds for o in owners), 3),
            "above_target_seconds": round(sum(o.above_target_seconds for o in owners), 3),
            "overload_seconds": round(sum(o.overload_seconds for o in owners), 3),
        }

    def to_json(self) -> dict[str, Any]:
        """The report's ``pod_autoscaling.pressure``."""
        return {
            **self.totals(),
            "seconds": round(self.seconds, 3),
            "ticks": self.ticks,
            "time_basis": "trace seconds; the state of one usage update holds until the next",
            "owners": {str(owner): pressure.to_json() for owner, pressure in sorted(self.owners.items())},
        }


def pod_cpu_request_m(pod: Mapping[str, Any]) -> float | None:
    """The CPU ``pod`` requests over its containers, in millicores (None: no container requests CPU,
    or a request is no quantity; the HPA cannot compute a utilization for such a pod either)."""
    total = 0
    requested = False
    for container in (pod.get("spec") or {}).get("containers") or []:
        request = ((container.get("resources") or {}).get("requests") or {}).get("cpu")
        if request is None:
            continue
        try:
            total += cpu_millicores(parse_quantity(request))
        except FormatError:
            return None
        requested = True
    return float(total) if requested else None
