"""Autoscaler settings as the axes of a sweep: one NodePool file, several values per setting.

``kubetape sweep --autoscaler karpenter --nodepool POOL.yaml --consolidation-policy WhenEmpty
--consolidation-policy WhenEmptyOrUnderutilized`` replays the trace once per combination of the values
given (the cross product of every axis), each a variant of the same NodePools. An axis given no value
keeps what the file says. Each variant names its values as labels, which become part of the run's
configuration, so its repetitions are grouped and the Pareto frontier names it. The time settings are
scaled afterwards, per replay, like any NodePool's (``autoscale_settings``). Pure logic, no I/O.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.timespec import parse_go_duration
from pipeline.replay.autoscale.settings import NEVER

CONSOLIDATION_POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized")
INSTANCE_FAMILY_LABEL = "karpenter.kwok.sh/instance-family"
"""The KWOK provider's label for an instance type's family (``kwok/apis/v1alpha1/labels.go``)."""


@dataclass(frozen=True, slots=True)
class AutoscalerAxes:
    """The values of each swept setting; an empty axis is not varied."""

    consolidation_policies: Sequence[str] = ()
    consolidate_after: Sequence[str] = ()
    instance_families: Sequence[Sequence[str]] = ()
    """Each entry is one value of the axis: the families a NodePool may launch."""
    cpu_limits: Sequence[str] = ()

    def check(self) -> None:
        """ConfigError naming the flag of the first bad value."""
        for policy in self.consolidation_policies:
            if policy not in CONSOLIDATION_POLICIES:
                known = " and ".join(CONSOLIDATION_POLICIES)
                raise ConfigError(f"--consolidation-policy {policy!r}: Karpenter knows {known}")
        for duration in self.consolidate_after:
            if duration != NEVER:
                parse_go_duration(duration, "--consolidate-after")
        for families in self.instance_families:
            if not families or not all(families):
                raise ConfigError(
                    "--instance-families takes a comma-separated list of families, e.g. c,m (empty given)"
                )
        for limit in self.cpu_limits:
            if not limit or not limit.replace(".", "", 1).rstrip("m").isdigit():
                raise ConfigError(f"--limit-cpu {limit!r}: give a CPU quantity such as 64 or 500m")


@dataclass(frozen=True, slots=True)
class AutoscalerVariant:
    """One point of the autoscaler grid: its NodePools (unscaled) and the values that make it."""

    pools: tuple[dict[str, Any], ...]
    labels: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.labels.items()) or "as in the NodePool file"


def _set_families(spec: dict[str, Any], families: Sequence[str]) -> None:
    template_spec = spec.setdefault("template", {}).setdefault("spec", {})
    kept = [r for r in template_spec.get("requirements") or [] if r.get("key") != INSTANCE_FAMILY_LABEL]
    kept.append({"key": INSTANCE_FAMILY_LABEL, "operator": "In", "values": list(families)})
    template_spec["requirements"] = kept


def _variant_pool(
    pool: Mapping[str, Any],
    policy: str | None,
    consolidate_after: str | None,
    families: Sequence[str] | None,
    cpu_limit: str | None,
) -> dict[str, Any]:
    body = copy.deepcopy(dict(pool))
    spec = body.setdefault("spec", {})
    disruption = spec.setdefault("disruption", {})
    if policy is not None:
        disruption["consolidationPolicy"] = policy
    if consolidate_after is not None:
        disruption["consolidateAfter"] = consolidate_after
    if families is not None:
        _set_families(spec, families)
    if cpu_limit is not None:
        spec.setdefault("limits", {})["cpu"] = cpu_limit
    return body


def autoscaler_variants(pools: Sequence[Mapping[str, Any]], axes: AutoscalerAxes) -> list[AutoscalerVariant]:
    """Every combination of the axes' values applied to every NodePool of ``pools``."""
    axes.check()
    policies: Sequence[str | None] = axes.consolidation_policies or [None]
    afters: Sequence[str | None] = axes.consolidate_after or [None]
    families: Sequence[Sequence[str] | None] = axes.instance_families or [None]
    limits: Sequence[str | None] = axes.cpu_limits or [None]
    variants = []
    for policy, after, family, limit in itertools.product(policies, afters, families, limits):
        labels = {
            name: value
            for name, value in (
                ("consolidation", policy),
                ("consolidate_after", after),
                ("families", ",".join(family) if family is not None else None),
                ("limit_cpu", limit),
            )
            if value is not None
        }
        variant_pools = tuple(_variant_pool(p, policy, after, family, limit) for p in pools)
        variants.append(AutoscalerVariant(variant_pools, {"autoscaler": "karpenter", **labels}))
    return variants
