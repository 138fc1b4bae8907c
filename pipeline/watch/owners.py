"""Pod owner chains, as SimKube's ``OwnersCache`` builds them: the pod's owner, that owner's owner, …

Each hop is found in the watcher's own index of published objects when the owner is a tracked kind, and
otherwise fetched once from the cluster (a ReplicaSet between a Pod and its Deployment) and cached by
uid: owners never change their owners, so the cache needs no invalidation while the uid lives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.model.keys import GroupVersionKind, ObjectKey, object_key
from pipeline.watch.ports import Cluster

MAX_CHAIN = 8
"""Ownership deeper than this is cut off (real chains have 1–3 hops; protects against cycles)."""


MAX_CACHED_OWNERS = 100_000
"""Owners whose references are cached; beyond this the cache starts over."""


@dataclass(frozen=True, slots=True)
class Owner:
    """One hop of an owner chain."""

    key: ObjectKey
    gvk: GroupVersionKind
    allowed: bool = True
    """Whether the owner passes the tracer config's filters (so it is, or will be, published)."""


def owner_references(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ownerReferences of ``obj``, the controller reference first (malformed entries dropped)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    good = [
        r
        for r in (refs if isinstance(refs, list) else [])
        if isinstance(r, Mapping) and all(isinstance(r.get(f), str) for f in ("apiVersion", "kind", "name"))
    ]
    return sorted(good, key=lambda r: not r.get("controller", False))


class OwnerResolver:
    """Builds and caches owner chains; ``known`` looks an object up among the published ones."""

    def __init__(
        self,
        cluster: Cluster,
        known: Callable[[ObjectKey], Mapping[str, Any] | None],
        admissible: Callable[[Mapping[str, Any]], bool] = lambda _obj: True,
    ) -> None:
        """``admissible`` tells whether an owner fetched from the cluster passes the config's filters."""
        self._cluster = cluster
        self._known = known
        self._admissible = admissible
        # owner uid → its owner refs, and whether it is admissible
        self._parents: dict[str, tuple[tuple[Mapping[str, Any], ...], bool]] = {}
        self.lookups = 0  # cluster GETs made, for tests and metrics

    async def chain(self, obj: Mapping[str, Any], namespace: str | None) -> tuple[tuple[Owner, ...], bool]:
        """The owners of ``obj`` (a pod), nearest first, and whether the chain is complete (False when an
        owner could not be found, so the caller should look again later). Owner references never cross
        namespaces."""
        chain: list[Owner] = []
        refs = owner_references(obj)
        while refs and len(chain) < MAX_CHAIN:
            ref = refs[0]
            gvk = GroupVersionKind.from_api_version(ref["apiVersion"], ref["kind"])
            key = object_key(ref["apiVersion"], ref["kind"], namespace, ref["name"])
            if any(o.key == key for o in chain):
                break
            found = await self._refs_of(ref, gvk, key, namespace)
            if found is None:
                chain.append(Owner(key, gvk))
                return tuple(chain), False
            refs, allowed = found
            chain.append(Owner(key, gvk, allowed))
        return tuple(chain), True

    async def _refs_of(
        self, ref: Mapping[str, Any], gvk: GroupVersionKind, key: ObjectKey, namespace: str | None
    ) -> tuple[list[Mapping[str, Any]], bool] | None:
        """The owner references of the owner ``ref`` points to and whether that owner is admissible,
        or None if it cannot be found."""
        uid = str(ref.get("uid", "")) or key
        if uid in self._parents:
            cached, allowed = self._parents[uid]
            return list(cached), allowed
        known = self._known(key)
        allowed = True  # a published object passed the filters
        if known is not None:
            found: Mapping[str, Any] | None = known
        else:
            res = await self._cluster.resolve(gvk)
            self.lookups += 1
            found = None if res is None else await self._cluster.get_object(res, namespace, ref["name"])
        if found is None:
            return None  # gone, not yet visible or not served: not cached, the caller may ask again
        if known is None:
            allowed = self._admissible(found)
        parents = tuple(owner_references(found))
        if len(self._parents) >= MAX_CACHED_OWNERS:
            self._parents.clear()  # bounded memory; chains are simply looked up again
        self._parents[uid] = (parents, allowed)
        return list(parents), allowed
