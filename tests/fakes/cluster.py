"""One in-memory apiserver for unit tests: the whole :class:`pipeline.io.kube.cluster.Cluster` protocol.

Objects by (apiVersion, kind, namespace, name); resourceVersions with conflicts; label selectors
(``k=v``, ``k in (a,b)``); merge patches; finalizers (a delete marks, the last finalizer removed
deletes); Events; server-side apply; every write recorded as a watch event, so the watcher's reads
(list, then watch from the listed version) see the same history a real apiserver would give them.
Tests that need an odd apiserver subclass it and override one verb.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pipeline.io.kube.cluster import Cluster
from pipeline.io.kube.types import ApiResource, ListPage, ResourceVersion, WatchEvent, WatchEventType
from pipeline.model.errors import ConflictError, NotFoundError, UnknownKindError
from pipeline.model.keys import GroupVersionKind

Key = tuple[str, str, str | None, str]
_IN = re.compile(r"^\s*([^\s]+)\s+in\s+\(([^)]*)\)\s*$")

CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "StorageClass",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ReplayRoot",
        "Simulation",
        "NodePool",
        "KWOKNodeClass",
    }
)


def matches(labels: dict[str, str], selector: str) -> bool:
    """Whether ``labels`` satisfy a label selector of ``k=v`` and ``k in (a,b)`` terms."""
    # terms are comma-separated, but an "in (a,b)" set has commas of its own
    for term in re.findall(r"[^,(]+(?:\([^)]*\))?", selector):
        found = _IN.match(term)
        if found:
            key, values = found.groups()
            if labels.get(key) not in {v.strip() for v in values.split(",")}:
                return False
            continue
        key, _, value = term.strip().partition("=")
        if labels.get(key) != value:
            return False
    return True


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) applied to ``target`` in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class MemoryCluster:
    """An apiserver in a dict (see the module's docstring); ``unknown_kinds`` are served by nobody."""

    def __init__(self, *, unknown_kinds: frozenset[str] = frozenset()) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str, str]] = []
        self.writes = 0
        self.unknown_kinds = unknown_kinds
        self.changes: list[tuple[str, WatchEvent]] = []
        """Every write as ``(api_version/kind label, WatchEvent)``, in order."""
        self.list_page_size = 2
        """Objects per page of :meth:`list_pages` (small: the watcher's tests list over several pages)."""
        self._versions = itertools.count(1)
        self._next_change = asyncio.Event()

    @staticmethod
    def key(obj: dict[str, Any]) -> Key:
        meta = obj["metadata"]
        return (obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])

    def _stamp(self, obj: dict[str, Any], change: WatchEventType = "MODIFIED") -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self.writes += 1
        self._record(change, obj)
        return copy.deepcopy(obj)

    def _record(self, change: WatchEventType, obj: dict[str, Any]) -> None:
        version = ResourceVersion(obj["metadata"]["resourceVersion"])
        label = f"{obj['apiVersion']}.{obj['kind']}"
        self.changes.append((label, WatchEvent(change, copy.deepcopy(obj), version)))
        self._next_change.set()  # wakes the open watches; the next change gets a fresh event
        self._next_change = asyncio.Event()

    # ---- direct access for tests (no resourceVersion check, no watch of its own) ----------------
    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Put ``obj`` into the cluster as a controller or kubelet would, whatever was there."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("generation", 1)
        meta.setdefault("creationTimestamp", f"2026-01-01T00:00:{len(self.objects):02d}Z")
        self.objects[self.key(obj)] = obj
        return self._stamp(obj, "ADDED")

    def find(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get((api_version, kind, namespace, name))

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for (_, k, _, _), o in self.objects.items() if k == kind]

    # ---- ClusterObjects ---------------------------------------------------------------------------
    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(o)
            for (v, k, ns, _), o in self.objects.items()
            if v == api_version
            and k == kind
            and (namespace is None or ns == namespace)
            and matches(o["metadata"].get("labels") or {}, label_selector)
        ]

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        found = self.find(api_version, kind, namespace, name)
        return copy.deepcopy(found) if found else None

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
    ) -> bool:
        del propagation
        live = self.find(api_version, kind, namespace, name)
        if live is None:
            return False
        if live["metadata"].get("finalizers"):
            live["metadata"]["deletionTimestamp"] = "2026-01-01T01:00:00Z"
            self._stamp(live)
        else:
            del self.objects[(api_version, kind, namespace, name)]
            self._stamp(live, "DELETED")
        return True

    # ---- ClusterWrites ----------------------------------------------------------------------------
    async def resource_for(self, api_version: str, kind: str) -> ApiResource:
        if kind in self.unknown_kinds:
            raise UnknownKindError(f"the apiserver serves no kind {kind!r} in {api_version!r}")
        return ApiResource(api_version, kind, kind.lower() + "s", kind not in CLUSTER_SCOPED_KINDS)

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        await self.resource_for(obj["apiVersion"], obj["kind"])
        live = self.objects.get(self.key(obj))
        if live is None:
            return self.add(obj)
        merge(live, {k: v for k, v in obj.items() if k != "metadata"})
        merge(live["metadata"], {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"})
        return self._stamp(live)

    # ---- ClusterUpdates ---------------------------------------------------------------------------
    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        await self.resource_for(obj["apiVersion"], obj["kind"])
        if self.key(obj) in self.objects:
            raise ConflictError("exists", status=409, reason="AlreadyExists")
        return self.add(obj)

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        live = self.objects.get(self.key(obj))
        if live is None:
            raise NotFoundError("gone", status=404)
        if obj["metadata"].get("resourceVersion") != live["metadata"]["resourceVersion"]:
            raise ConflictError("conflict", status=409, reason="Conflict")
        obj = copy.deepcopy(obj)
        obj["metadata"]["uid"] = live["metadata"]["uid"]
        self.objects[self.key(obj)] = obj
        return self._stamp(obj)

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        live = self.find(api_version, kind, namespace, name)
        if live is None:
            raise NotFoundError("gone", status=404)
        version = (patch.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != live["metadata"]["resourceVersion"]:
            raise ConflictError("conflict", status=409, reason="Conflict")
        merge(live, patch)
        if live["metadata"].get("deletionTimestamp") and not live["metadata"].get("finalizers"):
            del self.objects[(api_version, kind, namespace, name)]
            return self._stamp(live, "DELETED")
        return self._stamp(live)

    async def patch_status(
        self, api_version: str, kind: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        return await self.merge_patch(api_version, kind, None, name, {"status": status})

    async def record_event(
        self, involved: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        self.events.append((involved["metadata"]["name"], event_type, reason, message))

    # ---- ChangeFeed -------------------------------------------------------------------------------
    async def watch_changes(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str = ""
    ) -> AsyncIterator[str]:
        """One ``RELIST`` and no more: the controller's tests drive its passes themselves."""
        del api_version, kind, namespace, label_selector
        yield "RELIST"

    # ---- ClusterReads -----------------------------------------------------------------------------
    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        if gvk.kind in self.unknown_kinds:
            return None
        return await self.resource_for(gvk.api_version, gvk.kind)

    async def list_pages(self, res: ApiResource) -> AsyncIterator[ListPage]:
        """The objects of ``res`` in pages of :attr:`list_page_size`, every page at the current version."""
        items = await self.list_objects(res.api_version, res.kind)
        version = ResourceVersion(str(self._current_version()))
        size = self.list_page_size
        for start in range(0, max(len(items), 1), size):
            yield ListPage(items[start : start + size], version)

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        return await self.get(res.api_version, res.kind, namespace, name)

    async def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        """The changes of ``res`` after ``since``, then those still to come (the watch stays open)."""
        seen = 0
        while True:
            while seen < len(self.changes):  # by index: changes made while a test consumes are kept
                label, event = self.changes[seen]
                seen += 1
                if label == res.label and int(event.resource_version) > int(since or 0):
                    yield event
            await self._next_change.wait()

    def _current_version(self) -> int:
        return max((int(e.resource_version) for _, e in self.changes), default=0)


_IMPLEMENTS_CLUSTER: type[Cluster] = MemoryCluster  # mypy checks here that the fake is a whole Cluster
