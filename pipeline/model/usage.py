"""Recorded load: what the pods of one tracked owner used, sampled from the Metrics API.

The HPA decides from the Metrics API (``metrics.k8s.io`` PodMetrics), so that is what the watcher samples
and what a replay feeds back. One :class:`UsageSample` is one owner's load at one time, per pod-template
hash (a Deployment mid-rollout runs two templates): per container the *sum* over the owner's running pods
and the number of pods summed. The sum conserves the total load (the default replay model spreads it over
the pods the simulation runs); the sum over the count gives per-pod usage as recorded.

A sample with ``gap=True`` says the load was unknown from ``ts_ms`` on (Metrics API down, the owner's pods
not reported): a replay holds the last load across it or says it cannot, instead of reading zero.

Values are bounded (:data:`CPU_MILLICORES_MAX`, :data:`MEMORY_BYTES_MAX`, :data:`PODS_MAX`) so that one
absurd reading is rejected where it enters, with the owner named, rather than scaling a simulation to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.model.errors import FormatError
from pipeline.model.events import TS_MAX_MS
from pipeline.model.keys import ObjectKey, key_problem

CPU_MILLICORES_MAX = 100_000_000
"""The most CPU one owner's pods may use together: 100,000 cores. More is a broken reading."""
MEMORY_BYTES_MAX = 1 << 50
"""The most memory one owner's pods may use together: 1 PiB. More is a broken reading."""
PODS_MAX = 1_000_000
CONTAINERS_MAX = 64
"""A pod has at most a handful of containers; a sample naming more is malformed."""
NAME_MAX = 253


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """One container name's usage summed over the owner's pods in the sample."""

    name: str
    cpu_millicores: int
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class UsageSample:
    """One owner's load at ``ts_ms`` (milliseconds since the Unix epoch) for one pod-template hash.

    ``pods`` is the number of running pods whose usage is summed in ``containers``; ``template_hash`` is
    the pods' ``pod-template-hash`` (or ``controller-revision-hash``) label, empty when they carry none.
    Construction raises FormatError when a field does not fit.
    """

    ts_ms: int
    owner_key: ObjectKey
    template_hash: str
    pods: int
    containers: tuple[ContainerUsage, ...]
    gap: bool = False

    def __post_init__(self) -> None:
        problem = usage_problem(self)
        if problem is not None:
            raise FormatError(f"usage sample for {self.owner_key!r} at {self.ts_ms}: {problem}")

    @property
    def cpu_millicores(self) -> int:
        """All containers' CPU summed over the owner's pods."""
        return sum(c.cpu_millicores for c in self.containers)

    @property
    def memory_bytes(self) -> int:
        """All containers' memory summed over the owner's pods."""
        return sum(c.memory_bytes for c in self.containers)

    def per_pod(self) -> dict[str, tuple[float, float]]:
        """Per container name, the mean (CPU millicores, memory bytes) of one pod; empty without pods."""
        if self.pods == 0:
            return {}
        return {c.name: (c.cpu_millicores / self.pods, c.memory_bytes / self.pods) for c in self.containers}

    def to_wire(self) -> dict[str, Any]:
        """The sample as plain data (msgpack or JSON), the inverse of :func:`usage_from_wire`."""
        return {
            "ts": self.ts_ms,
            "owner": self.owner_key,
            "hash": self.template_hash,
            "pods": self.pods,
            "containers": [[c.name, c.cpu_millicores, c.memory_bytes] for c in self.containers],
            "gap": self.gap,
        }


def usage_problem(sample: UsageSample) -> str | None:
    """What makes ``sample`` invalid, or None when it is valid."""
    # Typed loosely on purpose: decoded data reaches here with whatever types the wire carried.
    fields: Any = sample
    container: Any
    if not _is_int(fields.ts_ms) or not 0 <= fields.ts_ms <= TS_MAX_MS:
        return f"time {_shown(fields.ts_ms)} is not milliseconds in 0..{TS_MAX_MS}"
    problem = key_problem(fields.owner_key)
    if problem is not None:
        return f"owner key: {problem}"
    if not isinstance(fields.template_hash, str) or len(fields.template_hash) > NAME_MAX:
        return "template hash is not a string of at most 253 characters"
    if not _is_int(fields.pods) or not 0 <= fields.pods <= PODS_MAX:
        return f"pod count {_shown(fields.pods)} is not in 0..{PODS_MAX}"
    if not isinstance(fields.gap, bool):
        return "gap is not a boolean"
    if not isinstance(fields.containers, tuple) or len(fields.containers) > CONTAINERS_MAX:
        return f"containers are not a tuple of at most {CONTAINERS_MAX}"
    names: set[str] = set()
    for container in fields.containers:
        if not isinstance(container, ContainerUsage):
            return "a container entry is not a ContainerUsage"
        if not isinstance(container.name, str) or not 0 < len(container.name) <= NAME_MAX:
            return "a container name is empty or longer than 253 characters"
        if container.name in names:
            return f"container {container.name!r} appears twice"
        names.add(container.name)
        if not _is_int(container.cpu_millicores) or not 0 <= container.cpu_millicores <= CPU_MILLICORES_MAX:
            return (
                f"container {container.name!r}: CPU {_shown(container.cpu_millicores)}m is negative or absurd"
            )
        if not _is_int(container.memory_bytes) or not 0 <= container.memory_bytes <= MEMORY_BYTES_MAX:
            return (
                f"container {container.name!r}: memory {_shown(container.memory_bytes)} bytes is negative or "
                "absurd"
            )
    if fields.pods == 0 and any(c.cpu_millicores or c.memory_bytes for c in fields.containers):
        return "usage is reported for zero pods"
    return None


def usage_from_wire(data: object) -> UsageSample:
    """Decodes :meth:`UsageSample.to_wire`'s plain data; FormatError says what is wrong."""
    if not isinstance(data, Mapping):
        raise FormatError(f"usage sample is a {type(data).__name__}, not a map")
    containers_data = data.get("containers")
    if not isinstance(containers_data, list) or len(containers_data) > CONTAINERS_MAX:
        raise FormatError(f"usage sample: containers are not a list of at most {CONTAINERS_MAX}")
    containers = []
    for entry in containers_data:
        if not isinstance(entry, list) or len(entry) != 3:
            raise FormatError("usage sample: a container entry is not [name, cpu millicores, memory bytes]")
        containers.append(ContainerUsage(name=entry[0], cpu_millicores=entry[1], memory_bytes=entry[2]))
    return UsageSample(
        ts_ms=data.get("ts", -1),  # every field is checked by usage_problem
        owner_key=data.get("owner", ""),
        template_hash=data.get("hash", ""),
        pods=data.get("pods", -1),
        containers=tuple(containers),
        gap=data.get("gap", False),
    )


SHOWN_MAX_CHARS = 64
"""How much of a rejected value a message shows."""


def _shown(value: object) -> str:
    """``value`` for a message, cut short: an absurd reading may be an integer of a million digits, whose
    text Python refuses to make (and no log line should hold)."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"{'-' if value < 0 else ''}(an integer of about {int(value.bit_length() * 0.30103)} digits)"
    text = repr(value)
    return text if len(text) <= SHOWN_MAX_CHARS else text[:SHOWN_MAX_CHARS] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
