"""What a cluster timeline says: one row per second and owner, and when each pod was created and ran.

The rows are what :mod:`pipeline.analytics.timeline` folds events into, what the ``timeline`` consumer
stores (:mod:`pipeline.analytics.timeline_store`) and what comparisons and reports read.
"""

from __future__ import annotations

from dataclasses import dataclass

CLUSTER_OWNER = "*"
"""The ``owner`` of a row that sums every owner (the whole cluster)."""

PHASES = ("Pending", "Running", "Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """The state at the end of one second, for one owner (or :data:`CLUSTER_OWNER` for the sum)."""

    second: int
    """Seconds since the timeline's origin (for a replay: trace seconds since the trace start)."""
    owner: str
    pending: int
    running: int
    succeeded: int
    failed: int
    cpu_requested_m: float
    memory_requested_bytes: float
    nodes: int
    """Nodes in the cluster (the same on every row of a second)."""
    nodes_used: int
    """Nodes with at least one running pod of this owner (cluster row: of any owner)."""
    desired: int | None = None
    """Pods the owner asks for (its ``spec.replicas``; a bare pod: itself), None where its kind says
    nothing (Jobs, DaemonSets, custom kinds) or it was not seen; cluster row: the sum of those known."""
    cpu_used_m: float | None = None
    """CPU the owner's pods used, summed (millicores), from its last recorded usage sample (the Metrics
    API's, ``kubetape.usage``); None where no usage is recorded for it or its load is unknown (a gap);
    cluster row: the sum over owners, None while any owner's load is unknown."""
    memory_used_bytes: float | None = None
    """Memory the owner's pods used, summed (bytes); None as for ``cpu_used_m``."""
    usage_pods: int | None = None
    """Running pods the Metrics API reported for the owner in its last usage sample; None as for
    ``cpu_used_m``."""


TIMELINE_COLUMNS = tuple(TimelineRow.__slots__)


@dataclass(frozen=True, slots=True)
class PodTimes:
    """When one pod was first seen pending and first seen running (ms since the origin)."""

    pod: str
    owner: str
    created_s: float | None
    running_s: float | None

    @property
    def scheduling_delay_s(self) -> float | None:
        if self.created_s is None or self.running_s is None:
            return None
        return max(self.running_s - self.created_s, 0.0)
