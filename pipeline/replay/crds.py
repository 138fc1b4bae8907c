"""Custom resource definitions a replay needs: found in the trace, made fit for a simulated cluster."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.model.events import EventType
from pipeline.model.keys import group_of, version_of
from pipeline.replay.plan import ReplayPlan
from pipeline.replay.ports import ReplayCluster
from pipeline.replay.rewrite import RootRef

CRD_API_VERSION = "apiextensions.k8s.io/v1"
CRD_KIND = "CustomResourceDefinition"


def recorded_crd(plan: ReplayPlan, api_version: str, kind: str) -> dict[str, Any] | None:
    """The latest CustomResourceDefinition the trace applies that defines ``kind`` in ``api_version``."""
    applied = (s.payload.obj for s in plan.steps if s.payload.type is EventType.APPLIED)
    return defining_crd((obj for obj in applied if obj is not None), api_version, kind)


def defining_crd(objects: Iterable[Mapping[str, Any]], api_version: str, kind: str) -> dict[str, Any] | None:
    """The last of ``objects`` that is a CustomResourceDefinition of ``kind`` in ``api_version``."""
    group, version = group_of(api_version), version_of(api_version)
    found: dict[str, Any] | None = None
    for obj in objects:
        if obj.get("kind") != CRD_KIND:
            continue
        spec = obj.get("spec") or {}
        versions = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict)]
        if (
            spec.get("group") == group
            and (spec.get("names") or {}).get("kind") == kind
            and version in versions
        ):
            found = dict(obj)
    return found


def simulated_crd(body: dict[str, Any]) -> dict[str, Any]:
    """A rewritten CRD without its conversion webhook: the recorded operator serving it is not in the
    simulated cluster, and every read of a version other than the stored one would fail on it."""
    spec = body.get("spec")
    if not isinstance(spec, dict):
        return body
    conversion = spec.get("conversion")
    if isinstance(conversion, dict) and conversion.get("strategy") == "Webhook":
        spec["conversion"] = {"strategy": "None"}
    return body


async def not_the_replays(cluster: ReplayCluster, root: RootRef, name: str) -> bool:
    """Whether the simulated cluster has the CRD ``name`` from elsewhere (installed by its owner, or by
    another replay): the replay then neither changes nor deletes it, since the cleanup would take it
    and every object of its kind along, other replays' too."""
    live = await cluster.get(CRD_API_VERSION, CRD_KIND, None, name)
    if live is None:
        return False
    refs = (live.get("metadata") or {}).get("ownerReferences") or []
    return not any(isinstance(r, dict) and r.get("uid") == root.uid for r in refs)
