"""Writing plain-dict objects to a Kubernetes apiserver: server-side apply, create, get, list, delete.

Bodies stay plain dicts (decoded with orjson), never generated models. Kinds are resolved to resources
(plural, namespaced or not) once per group/version through discovery, so any kind the apiserver
serves works, custom resources included. HTTP failures become kubetape exceptions through
:func:`pipeline.io.kube.error_for_status`: retriable (429, 5xx, connection trouble) or not (the object is
invalid, forbidden, of an unknown kind).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client

from pipeline.io.kube import error_for_status
from pipeline.io.kube_types import ApiResource
from pipeline.model.errors import ApiUnavailableError, NotFoundError, UnknownKindError
from pipeline.model.keys import group_of, version_of

FIELD_MANAGER = "kubetape-replayer"
"""The server-side apply field manager of everything the replayer writes."""

DEFAULT_REQUEST_TIMEOUT_S = 30.0
REDISCOVER_AFTER_S = 1.0
"""A kind missing from a discovery older than this is looked up again: a CRD may have been installed
since (the replayer installs its root's); younger misses are trusted, so a trace full of an unknown
kind costs one discovery a second, not one per object."""


def _describe(kind: str, namespace: str | None, name: str | None) -> str:
    return f"{kind} {namespace + '/' if namespace else ''}{name or ''}".rstrip()


class KubeApplier:
    """Server-side apply and friends on one ``ApiClient`` (from :func:`pipeline.io.kube.kube_api`)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        field_manager: str = FIELD_MANAGER,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ) -> None:
        self._api = api
        self.field_manager = field_manager
        self._timeout = request_timeout_s
        self._discovery: dict[str, dict[str, ApiResource]] = {}
        self._discovered_at: dict[str, float] = {}
        self._discovery_locks: dict[str, asyncio.Lock] = {}

    # ---- discovery ------------------------------------------------------------------------------
    async def resource_for(self, api_version: str, kind: str) -> ApiResource:
        """The resource serving ``kind`` in ``api_version``; raises UnknownKindError if there is none."""
        kinds = self._discovery.get(api_version)
        if kinds is None:
            lock = self._discovery_locks.setdefault(api_version, asyncio.Lock())
            async with lock:
                kinds = self._discovery.get(api_version)
                if kinds is None:
                    kinds = await self._discover(api_version)
                    self._discovery[api_version] = kinds
                    self._discovered_at[api_version] = time.monotonic()
        resource = kinds.get(kind)
        if (
            resource is None
            and time.monotonic() - self._discovered_at.get(api_version, 0.0) >= REDISCOVER_AFTER_S
        ):
            kinds = await self._discover(api_version)
            self._discovery[api_version] = kinds
            self._discovered_at[api_version] = time.monotonic()
            resource = kinds.get(kind)
        if resource is None:
            raise UnknownKindError(
                f"the apiserver serves no kind {kind!r} in {api_version!r}; install its CRD or API "
                f"group in the target cluster, or leave the kind out of the trace",
                status=404,
                reason="UnknownKind",
            )
        return resource

    async def _discover(self, api_version: str) -> dict[str, ApiResource]:
        path = f"/apis/{api_version}" if group_of(api_version) else f"/api/{version_of(api_version)}"
        try:
            listing = await self._request("GET", path, what=f"discovery of {api_version}")
        except NotFoundError:
            return {}  # the whole group/version is unknown: every kind in it is
        kinds: dict[str, ApiResource] = {}
        for entry in listing.get("resources") or []:
            name = entry.get("name", "")
            if "/" in name:  # subresources (pods/status, deployments/scale)
                continue
            kinds.setdefault(
                entry["kind"], ApiResource(api_version, entry["kind"], name, bool(entry.get("namespaced")))
            )
        return kinds

    # ---- object verbs ---------------------------------------------------------------------------
    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply ``obj`` (create or update) as :attr:`field_manager`; returns the live object.

        ``force`` takes over fields another manager set: the replay is the source of truth for the
        objects it creates (SimKube does not force; a controller touching a replayed field would then
        make the replay fail).
        """
        meta = obj.get("metadata") or {}
        resource = await self.resource_for(obj["apiVersion"], obj["kind"])
        query = [("fieldManager", self.field_manager)]
        if force:
            query.append(("force", "true"))
        return await self._request(
            "PATCH",
            resource.path(meta.get("namespace"), meta["name"]),
            query=query,
            body=obj,
            content_type="application/apply-patch+yaml",  # JSON is valid YAML; the client sends JSON
            what=f"apply {_describe(obj['kind'], meta.get('namespace'), meta['name'])}",
        )

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj``; raises ConflictError if it exists."""
        meta = obj.get("metadata") or {}
        resource = await self.resource_for(obj["apiVersion"], obj["kind"])
        return await self._request(
            "POST",
            resource.path(meta.get("namespace")),
            query=[("fieldManager", self.field_manager)],
            body=obj,
            what=f"create {_describe(obj['kind'], meta.get('namespace'), meta.get('name'))}",
        )

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """The live object, or None if it does not exist."""
        resource = await self.resource_for(api_version, kind)
        try:
            return await self._request(
                "GET", resource.path(namespace, name), what=f"get {_describe(kind, namespace, name)}"
            )
        except NotFoundError:
            return None

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Objects of a kind (in every namespace unless ``namespace``), filtered by a label selector."""
        resource = await self.resource_for(api_version, kind)
        query = [("labelSelector", label_selector)] if label_selector else []
        found = await self._request(
            "GET", resource.path(namespace), query=query, what=f"list {kind} ({label_selector})"
        )
        items: list[dict[str, Any]] = found.get("items") or []
        return items

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
    ) -> bool:
        """Delete an object; False if it did not exist (not an error: replays delete what may be gone)."""
        resource = await self.resource_for(api_version, kind)
        try:
            await self._request(
                "DELETE",
                resource.path(namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation},
                what=f"delete {_describe(kind, namespace, name)}",
            )
        except NotFoundError:
            return False
        return True

    # ---- transport ------------------------------------------------------------------------------
    async def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        try:
            response = await self._api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            try:
                status: int = response.status
                data: bytes = await response.read()
            finally:
                response.release()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ApiUnavailableError(
                f"{what}: apiserver unreachable ({type(exc).__name__}: {exc}); check that the cluster "
                f"is up and the kubeconfig points at it",
                reason=type(exc).__name__,
            ) from exc
        if 200 <= status < 300:
            decoded = orjson.loads(data) if data else {}
            return decoded if isinstance(decoded, dict) else {}
        raise error_for_status(what, status, data)
