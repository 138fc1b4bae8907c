"""The Pareto frontier of configurations: no other point is at least as good on every objective and
strictly better on one. Every objective is minimized (cost, pending-pod seconds, ...)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` is no worse than ``b`` on every objective and better on at least one (all minimized)."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


def pareto_frontier(points: Mapping[K, Sequence[float]]) -> list[K]:
    """The keys of the non-dominated points, ordered by their first objective (then the others).

    Points with equal objectives are all kept (neither dominates the other)."""
    frontier = [
        key
        for key, value in points.items()
        if not any(dominates(other, value) for o, other in points.items() if o != key)
    ]
    return sorted(frontier, key=lambda key: tuple(points[key]))
