"""The recorded load of autoscaled owners, as the simulated pods' usage: pure logic, no I/O.

The recording holds, per owner and pod-template hash, the usage summed over the owner's running pods
and how many pods were summed (:class:`~pipeline.model.usage.UsageSample`). A replay with the HPA
deciding runs however many pods the *simulated* HPA chose, so the recorded load has to be turned into
one usage per simulated pod. Two models:

* ``conserve`` (the default): the owner's recorded total load is spread evenly over the pods the
  simulation is actually running. An HPA that scales less than production's sees each pod busier,
  one that scales more sees them idler: the consequence of its decision, as a real service would.
* ``per-pod``: every simulated pod uses what one recorded pod used on average, however many run.

The simulated pods' template hashes differ from the recorded ones (the replay rewrites the template),
so the hashes of one reading are summed into one owner load. A reading marked as a gap holds the last
known load, and is counted so the report can say so.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from pipeline.model.errors import ConfigError
from pipeline.model.keys import ObjectKey
from pipeline.model.usage import UsageSample


class LoadModel(Enum):
    """How the recorded load becomes each simulated pod's usage (``--load-model``)."""

    CONSERVE = "conserve"
    PER_POD = "per-pod"

    @classmethod
    def parse(cls, text: str, where: str = "--load-model") -> LoadModel:
        for model in cls:
            if model.value == text:
                return model
        raise ConfigError(f"{where}: {text!r} is not a load model; use conserve or per-pod")


@dataclass(frozen=True, slots=True)
class OwnerLoad:
    """One owner's load at one reading, all template hashes summed."""

    ts_ms: int
    pods: int
    cpu_millicores: int
    memory_bytes: int
    held_over_gap: bool = False
    """The reading at this time was a gap: this is the last load before it, held."""


@dataclass(frozen=True, slots=True)
class PodUsage:
    """What one simulated pod uses in total (all its containers)."""

    cpu_millicores: float
    memory_bytes: float


def pod_usage(load: OwnerLoad, running_pods: int, model: LoadModel) -> PodUsage | None:
    """Each of ``running_pods`` simulated pods' usage under ``model``; None when there is none to give
    (no pod runs, or the recording had no pod to average over for ``per-pod``)."""
    if running_pods <= 0:
        return None
    if model is LoadModel.CONSERVE:
        return PodUsage(load.cpu_millicores / running_pods, load.memory_bytes / running_pods)
    if load.pods == 0:
        return None
    return PodUsage(load.cpu_millicores / load.pods, load.memory_bytes / load.pods)


@dataclass(slots=True)
class OwnerTimeline:
    """One owner's readings in time order; :meth:`at` is the load in force at a trace time."""

    times_ms: list[int] = field(default_factory=list)
    loads: list[OwnerLoad] = field(default_factory=list)

    def at(self, ts_ms: int) -> OwnerLoad | None:
        """The last reading at or before ``ts_ms`` (None before the first)."""
        index = bisect.bisect_right(self.times_ms, ts_ms) - 1
        return self.loads[index] if index >= 0 else None


@dataclass(slots=True)
class RecordedLoad:
    """Every autoscaled owner's recorded load over trace time (see the module docstring)."""

    owners: dict[ObjectKey, OwnerTimeline] = field(default_factory=dict)
    gaps: dict[ObjectKey, int] = field(default_factory=dict)
    """Per owner, the readings that were gaps and hold the load before them."""
    unheld_gaps: dict[ObjectKey, int] = field(default_factory=dict)
    """Per owner, gaps before any load was known: the pods keep KWOK's default usage until one is."""

    @classmethod
    def from_samples(cls, samples: Iterable[UsageSample], owners: Iterable[ObjectKey]) -> RecordedLoad:
        """The load of ``owners`` (the autoscaled ones) from ``samples`` of any owners, in any order.

        Samples of one owner at one time are one reading (one per template hash); a reading with
        any gap sample is a gap."""
        wanted = set(owners)
        readings: dict[ObjectKey, dict[int, list[UsageSample]]] = {}
        for sample in samples:
            if sample.owner_key in wanted:
                readings.setdefault(sample.owner_key, {}).setdefault(sample.ts_ms, []).append(sample)
        load = cls({owner: OwnerTimeline() for owner in sorted(wanted)})
        for owner, by_time in readings.items():
            timeline = load.owners[owner]
            last: OwnerLoad | None = None
            for ts_ms in sorted(by_time):
                reading = by_time[ts_ms]
                if any(s.gap for s in reading):
                    if last is None:
                        load.unheld_gaps[owner] = load.unheld_gaps.get(owner, 0) + 1
                        continue
                    load.gaps[owner] = load.gaps.get(owner, 0) + 1
                    held = OwnerLoad(ts_ms, last.pods, last.cpu_millicores, last.memory_bytes, True)
                    timeline.times_ms.append(ts_ms)
                    timeline.loads.append(held)
                    continue
                last = OwnerLoad(
                    ts_ms,
                    sum(s.pods for s in reading),
                    sum(s.cpu_millicores for s in reading),
                    sum(s.memory_bytes for s in reading),
                )
                timeline.times_ms.append(ts_ms)
                timeline.loads.append(last)
        return load

    def at(self, owner: ObjectKey, ts_ms: int) -> OwnerLoad | None:
        timeline = self.owners.get(owner)
        return None if timeline is None else timeline.at(ts_ms)

    def samples_of(self, owner: ObjectKey) -> int:
        timeline = self.owners.get(owner)
        return 0 if timeline is None else len(timeline.loads)

    def to_json(self) -> dict[str, dict[str, int]]:
        """Per owner: readings, gaps held over, gaps before any load (for the report)."""
        return {
            str(owner): {
                "readings": self.samples_of(owner),
                "gaps_held": self.gaps.get(owner, 0),
                "gaps_before_any_load": self.unheld_gaps.get(owner, 0),
            }
            for owner in self.owners
        }


def usage_annotations(usage: PodUsage, containers: int) -> Mapping[str, str]:
    """The pod annotations that make KWOK report ``usage`` for a pod of ``containers`` containers.

    KWOK's ``usage-from-annotation`` gives *every* container of the pod the annotation's value, so the
    pod's total is divided among them: the pod's total (what a Resource metric of the HPA reads) is
    exact, the split between containers is even (a ContainerResource metric sees that split)."""
    share = max(containers, 1)
    return {
        CPU_ANNOTATION: f"{max(round(usage.cpu_millicores / share), 0)}m",
        MEMORY_ANNOTATION: str(max(round(usage.memory_bytes / share), 0)),
    }


CPU_ANNOTATION = "kwok.x-k8s.io/usage-cpu"
"""Read by KWOK's ``usage-from-annotation`` ClusterResourceUsage (the local stack's and k8s/sim's
metrics setup) at every scrape: changing it on a running pod changes its usage without a restart."""
MEMORY_ANNOTATION = "kwok.x-k8s.io/usage-memory"
