"""What pods ask of the scheduler: Kubernetes quantities, and the requests of a pod spec or of a
workload's pod template (CPU in millicores, memory in bytes)."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def is_map(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``, answered at once for the dicts decoded objects are made of (the
    ABC's check costs several times more, and the timeline fold asks it a dozen times per event)."""
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def parse_quantity(value: object) -> float | None:
    """A Kubernetes quantity (``"250m"``, ``"1.5"``, ``"128Mi"``, ``2``) as a number; None if malformed."""
    if type(value) is str:  # nearly always: answered before the isinstance checks
        return _parse_text_quantity(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    return _parse_text_quantity(value)


@functools.lru_cache(maxsize=4096)
def _parse_text_quantity(value: str) -> float | None:
    """A quantity's text as a number (a cluster uses few distinct quantities: each is parsed once)."""
    match = _QUANTITY.match(value.strip())
    if match is None or match.group(2) not in _SUFFIX:
        return None
    try:
        return float(match.group(1)) * _SUFFIX[match.group(2)]
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Requests:
    """What a pod asks of the scheduler: CPU in millicores, memory in bytes."""

    cpu_m: float = 0.0
    memory_bytes: float = 0.0


def pod_spec_requests(spec: Mapping[str, Any] | None) -> Requests:
    """The sum of the main containers' requests (limits stand in for missing requests, as the API does)."""
    cpu = memory = 0.0
    containers = (spec or {}).get("containers")
    if not isinstance(containers, list):
        return _requests(cpu, memory)
    # the timeline folds every pod object through here: dicts and quantity texts are recognised
    # before is_map and parse_quantity are called (the same answers, fewer calls)
    for container in containers:
        resources = container.get("resources") if type(container) is dict or is_map(container) else None
        if not (type(resources) is dict or is_map(resources)):
            continue
        requests = resources.get("requests") or resources.get("limits") or {}
        if type(requests) is dict or is_map(requests):
            value = requests.get("cpu")
            cpu += (
                (_parse_text_quantity(value) if type(value) is str else parse_quantity(value)) or 0.0
            ) * 1000
            value = requests.get("memory")
            memory += (_parse_text_quantity(value) if type(value) is str else parse_quantity(value)) or 0.0
    return _requests(cpu, memory)


_KNOWN_REQUESTS: dict[tuple[float, float], Requests] = {}


def _requests(cpu: float, memory: float) -> Requests:
    """``Requests(cpu, memory)``, one shared value per pair (a cluster's pods ask for few distinct pairs;
    the sums start at +0.0, so they are never -0.0, which would compare equal to 0.0)."""
    found = _KNOWN_REQUESTS.get((cpu, memory))
    if found is None:
        if len(_KNOWN_REQUESTS) >= 4096:
            _KNOWN_REQUESTS.clear()  # bounded (NaN pairs never match): values are simply made again
        found = _KNOWN_REQUESTS[(cpu, memory)] = Requests(cpu, memory)
    return found


_TEMPLATE_PATHS: tuple[tuple[str, ...], ...] = (
    ("spec", "template", "spec"),  # Deployment, ReplicaSet, StatefulSet, DaemonSet, Job
    ("spec", "jobTemplate", "spec", "template", "spec"),  # CronJob
)


def template_requests(obj: Mapping[str, Any]) -> Requests | None:
    """What each pod of a workload object requests, from its pod template; None if it has none."""
    for path in _TEMPLATE_PATHS:
        node: Any = obj
        for part in path:
            node = node.get(part) if is_map(node) else None
            if node is None:  # most objects have no template: the rest of the path is None too
                break
        if is_map(node):
            return pod_spec_requests(node)
    return None
