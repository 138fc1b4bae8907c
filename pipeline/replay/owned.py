"""Recorded objects owned by other replayed objects: a custom resource's pods, written owned by it.

A custom resource without pod templates (a SparkApplication) has its pods made by an operator the
simulated cluster does not run, so the export keeps its recorded pods (see
``pipeline.formats.assemble``) and the replay writes them as recorded. Their recorded ``ownerReferences``
name objects by uids of the recorded cluster; the rewrite drops them. This module puts back each
reference to an object the replay itself wrote, with the uid it has in the simulated cluster, so the
replayed pods are owned by the replayed custom resource as the recorded ones were (deleting it deletes
them, ``kubectl`` shows the tree), and names the owner the pod's lifecycles were recorded under, so the
report counts the pod with them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from pipeline.model.errors import FormatError
from pipeline.model.keys import ObjectKey, object_key
from pipeline.replay.rewrite import RECORDED_OWNER_ANNOTATION


def recorded_owner_keys(obj: Mapping[str, Any]) -> list[tuple[ObjectKey, Mapping[str, Any]]]:
    """The recorded owner references of ``obj`` with the keys of the objects they name."""
    meta = obj.get("metadata") or {}
    out = []
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, Mapping):
            continue
        with contextlib.suppress(FormatError, KeyError, TypeError):
            out.append((object_key(ref["apiVersion"], ref["kind"], meta.get("namespace"), ref["name"]), ref))
    return out


def own_by_replayed(body: dict[str, Any], refs: list[tuple[Mapping[str, Any], str]]) -> None:
    """Add to the rewritten ``body`` a reference to each replayed owner (its recorded reference and its
    uid in the simulated cluster), beside the replay root's reference when it has one."""
    if not refs:
        return
    meta = body["metadata"]
    owners = list(meta.get("ownerReferences") or [])
    for ref, uid in refs:
        owner = {"apiVersion": ref["apiVersion"], "kind": ref["kind"], "name": ref["name"], "uid": uid}
        for flag in ("controller", "blockOwnerDeletion"):
            if isinstance(ref.get(flag), bool):
                owner[flag] = ref[flag]
        owners.append(owner)
    meta["ownerReferences"] = owners


def name_recorded_owner(body: dict[str, Any], owner: ObjectKey) -> None:
    """A replayed pod counted with the owner its recorded lifecycles name, not as a bare pod."""
    meta = body["metadata"]
    meta["annotations"] = {**(meta.get("annotations") or {}), RECORDED_OWNER_ANNOTATION: str(owner)}


class LiveUids:
    """The uid each object the replay wrote has in the simulated cluster, by recorded key.

    An owner whose write has started is waited for (the plan starts owners before what they own at the
    same instant, and a step in flight always finishes); one not written yet is not, and its dependent
    goes without the reference rather than stall the scheduler.

    A cluster-scoped object is never given a namespaced owner: Kubernetes does not allow it (the garbage
    collector treats the reference as unresolvable, and reports OwnerRefInvalidNamespace). A recorded
    key names no namespace for a namespaced object recorded without one, so the scope is the one the
    owner was written with."""

    def __init__(self) -> None:
        self._uids: dict[ObjectKey, asyncio.Future[str | None]] = {}
        self._namespaced: dict[ObjectKey, bool] = {}

    def writing(self, key: ObjectKey, *, namespaced: bool) -> asyncio.Future[str | None]:
        """Call when the write of ``key`` (of a ``namespaced`` kind or not) starts; resolve the future
        with its live uid (None if it failed)."""
        future = self._uids.get(key)
        if future is None or future.done():
            future = self._uids[key] = asyncio.get_running_loop().create_future()
        self._namespaced[key] = namespaced
        return future

    def forget(self, key: ObjectKey) -> None:
        """``key`` was deleted: later dependents must not name its old uid."""
        self._uids.pop(key, None)
        self._namespaced.pop(key, None)

    async def owners_of(
        self, obj: Mapping[str, Any], *, namespaced: bool
    ) -> list[tuple[Mapping[str, Any], str]]:
        """The recorded owner references of ``obj`` (of a ``namespaced`` kind or not) whose objects the
        replay wrote, with their live uids; namespaced owners only for a namespaced ``obj``."""
        out = []
        for key, ref in recorded_owner_keys(obj):
            future = self._uids.get(key)
            if future is None or (not namespaced and self._namespaced.get(key, True)):
                continue
            uid = await asyncio.shield(future)
            if uid:
                out.append((ref, uid))
        return out


def live_uid(live: Any) -> str | None:
    """The uid of an apply's answer, if it has one."""
    meta = live.get("metadata") if isinstance(live, Mapping) else None
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return uid if isinstance(uid, str) and uid else None
