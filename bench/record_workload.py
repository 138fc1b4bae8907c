"""The seeded workload of the recording benchmark (:mod:`bench.bench_record`): what is applied, and what
an exact recording of it must then hold. Pure logic, no cluster: the benchmark applies the plan.

* the ramp: ``deployments`` Deployments whose replicas add up to ``pods`` (seeded weights, largest
  remainder), created at once; the control plane ramps the pods;
* the steady phase: ``changes_per_min`` changes spread evenly over ``steady_s`` seconds, each on a
  seeded Deployment, of three kinds: a *scale* (``spec.replicas`` by 1 to 3, up or down, leaning back
  towards the planned total so the cluster stays near ``pods``), an *annotate* (a metadata annotation:
  the recorder keeps spec changes only, so it must publish nothing for it) and a *roll* (a pod-template
  annotation: a spec change, every pod of the Deployment replaced).

:func:`expected_spec_changes` is what the recording must count per Deployment: its creation and each
scale and roll.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import Enum

ANNOTATION = "bench.kubetape.dev/note"
"""Set by an *annotate* change on the Deployment's own metadata (not recorded: not a spec change)."""
ROLLOUT_ANNOTATION = "bench.kubetape.dev/rollout"
"""Set by a *roll* change on the pod template (a spec change: recorded, and every pod replaced)."""


class ChangeKind(Enum):
    SCALE = "scale"
    ANNOTATE = "annotate"
    ROLL = "roll"


KIND_WEIGHTS = {ChangeKind.SCALE: 0.5, ChangeKind.ANNOTATE: 0.25, ChangeKind.ROLL: 0.25}


@dataclass(frozen=True, slots=True)
class Change:
    at_s: float
    """Seconds after the steady phase starts."""
    index: int
    """Which Deployment (its position in :func:`names`)."""
    kind: ChangeKind
    replicas: int
    """The Deployment's replicas after the change (unchanged but for a scale)."""
    serial: int
    """The change's number: the annotation value, so every annotate or roll writes something new."""


def names(deployments: int) -> list[str]:
    return [f"rec-{i:04d}" for i in range(deployments)]


def split(total: int, weights: list[float]) -> list[int]:
    """``total`` over ``weights`` (largest remainder: the parts add up to ``total``)."""
    scale = sum(weights)
    exact = [total * w / scale for w in weights]
    parts = [math.floor(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - parts[i], reverse=True)[: total - sum(parts)]:
        parts[i] += 1
    return parts


def initial_replicas(pods: int, deployments: int, seed: int) -> list[int]:
    """Each Deployment's replicas at creation: ``pods`` in all, at least one each."""
    if deployments < 1 or pods < deployments:
        raise ValueError(f"{pods} pods cannot be spread over {deployments} Deployments (at least one each)")
    rng = random.Random(seed)
    weights = [rng.uniform(0.5, 1.5) for _ in range(deployments)]
    return [1 + n for n in split(pods - deployments, weights)]


def steady_changes(
    replicas: list[int], *, changes_per_min: float, steady_s: float, seed: int
) -> list[Change]:
    """The steady phase's changes, evenly spaced, starting from ``replicas`` (left unchanged)."""
    rng = random.Random(seed + 1)
    current = list(replicas)
    target = sum(replicas)
    count = math.floor(steady_s * changes_per_min / 60)
    kinds = list(KIND_WEIGHTS)
    weights = list(KIND_WEIGHTS.values())
    out = []
    for serial in range(count):
        index = rng.randrange(len(current))
        kind = rng.choices(kinds, weights)[0]
        if kind is ChangeKind.SCALE:
            step = rng.randint(1, 3)
            total = sum(current)
            # lean back towards the target: below it, grow twice as often as shrink, and the reverse
            up = rng.random() < (2 / 3 if total < target else 1 / 3 if total > target else 1 / 2)
            down = current[index] - step
            # never below one pod: a Deployment at the floor grows instead
            current[index] = current[index] + step if up or down < 1 else down
        out.append(Change(serial * 60 / changes_per_min, index, kind, current[index], serial))
    return out


def expected_spec_changes(deployments: int, changes: list[Change], initial: list[int]) -> list[int]:
    """Per Deployment, the spec versions an exact recording publishes: the creation, each roll, and
    each scale that changed ``spec.replicas`` (annotations of the Deployment itself are not spec)."""
    counts = [1] * deployments
    current = list(initial)
    for change in changes:
        if change.kind is ChangeKind.ROLL:
            counts[change.index] += 1
        elif change.kind is ChangeKind.SCALE and change.replicas != current[change.index]:
            counts[change.index] += 1
            current[change.index] = change.replicas
    return counts


def nodes_for(pods: int, per_node: int = 110, headroom: float = 1.25) -> int:
    """Fake nodes enough for ``pods`` at ``per_node`` each (kubelet's default), with room for rollouts'
    surge pods."""
    return math.ceil(pods * headroom / per_node)
