"""What the replayer may do on a simulated cluster, as RBAC rules: the ClusterRole ``kubetape-replayer``.

k8s/sim/rbac.yaml ships it for the shipped tracer config (k8s/prod/tracer.yaml; a unit test keeps the
two equal), and ``kubetape sim rbac --config TRACER.yaml`` prints it for another one. Two parts:

* what every replay does, whatever the trace holds (:func:`infrastructure_rules`): its root (a
  ``ReplayRoot``), the CRDs it installs (the root's when missing, a custom kind's from the trace or
  ``--crd``), the namespaces it makes and deletes, the virtual nodes, the pods it watches and annotates
  (the simulated HPA's load), the cluster's stated profile, the autoscaler's NodePools;
* what the trace's kinds need (:func:`tracked_kind_rules`): every kind the tracer config tracks is
  written by server-side apply (``create`` for a new object, ``patch``), read back (``get``; ``list`` for
  a newly installed custom kind) and deleted as recorded.

Nothing is granted on ``*``, and nothing on Secrets unless a tracer config tracks them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipeline.model.tracer_config import TracerConfig

REPLAYER_ROLE = "kubetape-replayer"
VERB_ORDER = ("get", "list", "watch", "create", "update", "patch", "delete")
TRACKED_VERBS = ("get", "list", "create", "patch", "delete")
"""A tracked kind: applied (``create`` when new, ``patch``), read back, listed once installed, deleted."""

IRREGULAR_PLURALS = {"endpoints": "endpoints"}
"""Kinds whose resource name is not the English plural :func:`resource_of` makes (as
``meta.UnsafeGuessKindToResource`` knows them)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One RBAC rule: ``verbs`` on ``resources`` of ``group`` (only those named, if ``names``)."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"apiGroups": [self.group], "resources": list(self.resources)}
        if self.names:
            out["resourceNames"] = list(self.names)
        out["verbs"] = list(self.verbs)
        return out


def resource_of(kind: str) -> str:
    """The resource name of ``kind`` as the apiserver serves it by default: lower case, English plural
    (a CRD may declare another one: then write its rule by hand)."""
    lower = kind.lower()
    if lower in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[lower]
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    return lower + "s"


def infrastructure_rules() -> list[Rule]:
    """What every replay does on the cluster, whatever its trace holds (module docstring)."""
    return [
        Rule("kubetape.dev", ("replayroots",), ("get", "create", "patch", "delete")),
        # everything the replay writes names the root with blockOwnerDeletion, which a cluster
        # enforcing OwnerReferencesPermissionEnforcement allows only to who may update its finalizers
        Rule("kubetape.dev", ("replayroots/finalizers",), ("update",)),
        Rule("apiextensions.k8s.io", ("customresourcedefinitions",), ("get", "create", "patch")),
        Rule("", ("namespaces",), ("get", "create", "patch", "delete")),
        Rule("", ("serviceaccounts",), ("get",)),  # a new namespace's default one, before its pods
        Rule("", ("nodes",), ("get", "list", "create", "patch")),
        Rule("", ("pods",), ("get", "list", "watch", "patch")),
        Rule("", ("configmaps",), ("get",), names=("kubetape-cluster-profile",)),
        Rule("karpenter.sh", ("nodepools",), ("get", "create", "patch")),
    ]


def tracked_kind_rules(config: TracerConfig) -> list[Rule]:
    """What writing the trace's objects needs: :data:`TRACKED_VERBS` on every kind ``config`` tracks."""
    return [Rule(t.gvk.group, (resource_of(t.gvk.kind),), TRACKED_VERBS) for t in config.tracked]


def merged(rules: Iterable[Rule]) -> list[Rule]:
    """One rule per group and verb set (resources sorted), verbs of one resource united: the same
    grants, written once each."""
    verbs: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    for rule in rules:
        for resource in rule.resources:
            verbs.setdefault((rule.group, resource, rule.names), set()).update(rule.verbs)
    grouped: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for (group, resource, names), granted in verbs.items():
        ordered = tuple(v for v in VERB_ORDER if v in granted) + tuple(sorted(granted - set(VERB_ORDER)))
        grouped.setdefault((group, ordered, names), []).append(resource)
    return [
        Rule(group, tuple(sorted(resources)), ordered, names)
        for (group, ordered, names), resources in sorted(grouped.items())
    ]


def replayer_rules(config: TracerConfig) -> list[Rule]:
    """Every rule of the replayer's ClusterRole for traces recorded with ``config``."""
    return merged([*infrastructure_rules(), *tracked_kind_rules(config)])


def replayer_cluster_role(config: TracerConfig, name: str = REPLAYER_ROLE) -> dict[str, Any]:
    """The replayer's ClusterRole for traces recorded with ``config``."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [rule.to_json() for rule in replayer_rules(config)],
    }


def grants(rules: Iterable[dict[str, Any]]) -> set[tuple[str, str, tuple[str, ...], str]]:
    """(group, resource, resource names, verb) of each grant in ``rules`` (a ClusterRole's): for
    comparing two roles however their rules are grouped."""
    return {
        (group, resource, tuple(sorted(rule.get("resourceNames") or ())), verb)
        for rule in rules
        for group in rule.get("apiGroups") or ()
        for resource in rule.get("resources") or ()
        for verb in rule.get("verbs") or ()
    }
