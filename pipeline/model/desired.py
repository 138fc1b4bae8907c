"""What a recorded object asks for: the pods a workload wants running, read from its own spec.

Recorded pods are the best truth of what ran, but many traces hold none: lifecycles are optional in
SimKube (``trackLifecycle``) and in tracer configs, and SimKube traces record no Pods at all. The
workload's desired pods are the truth then, and the replay's fidelity and the analytics timelines both
take them from this one rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REPLICATED_KINDS = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet")})
"""Workloads whose ``spec.replicas`` is the number of Running pods they ask for."""
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
"""Phases of a pod that has ended and asks for nothing more."""


def desired_pods(group: str, kind: str, obj: Mapping[str, Any] | None) -> int | None:
    """Pods ``obj`` (of API ``group``, ``""`` or ``core`` for the core group) asks to have running.

    ``spec.replicas`` of Deployments, StatefulSets and ReplicaSets (1 when unset or malformed, as
    Kubernetes defaults it), and a bare pod itself (1, unless its recorded phase says it ended). None
    where the rule says nothing: a pod with a controller (its owner asks), Jobs (nothing in a trace
    says how long their pods ran) and every other kind.
    """
    obj = obj or {}
    if (group, kind) in REPLICATED_KINDS:
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        return replicas if isinstance(replicas, int) and replicas >= 0 else 1
    if group in ("", "core") and kind == "Pod":
        if (obj.get("metadata") or {}).get("ownerReferences"):
            return None
        return 0 if (obj.get("status") or {}).get("phase") in ENDED_PHASES else 1
    return None
