"""Kubernetes access for the Simulation controller: the replayer's verbs plus replace, merge patches,
status patches, Events, change watches and in-cluster credentials.

Built on :class:`~pipeline.io.kube_apply.KubeApplier`, so bodies stay plain dicts and HTTP failures map
to the same exception tree (``ObjectRejectedError`` with the status, ``ApiUnavailableError`` retriable).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client

from pipeline.io.kube import error_for_status, kube_api, open_get, watch_lines
from pipeline.io.kube_apply import KubeApplier
from pipeline.model.errors import ApiUnavailableError, GoneError, UnknownKindError

log = logging.getLogger(__name__)

CONTROLLER_FIELD_MANAGER = "kubetape-controller"
EVENTS_NAMESPACE_FOR_CLUSTER_OBJECTS = "default"
"""Where Events about cluster-scoped objects go (what ``kubectl describe`` reads for them)."""
WATCH_TIMEOUT_S = 240
_WATCH_RETRY_S = 2.0


@asynccontextmanager
async def kube_api_auto(
    kubeconfig: Path | None, context: str | None = None
) -> AsyncIterator[client.ApiClient]:
    """An ``ApiClient`` from ``kubeconfig``, else ``$KUBECONFIG``, else the pod's service account."""
    if kubeconfig is None and os.environ.get("KUBECONFIG"):
        kubeconfig = Path(os.environ["KUBECONFIG"])
    async with kube_api(kubeconfig, context) as api:
        yield api


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeControllerClient(KubeApplier):
    """Everything :class:`pipeline.controller.ports.ControllerCluster` asks for, on one ``ApiClient``."""

    def __init__(self, api: client.ApiClient, *, component: str = CONTROLLER_FIELD_MANAGER) -> None:
        super().__init__(api, field_manager=CONTROLLER_FIELD_MANAGER)
        self._api_client = api
        self._component = component

    async def resource_for(self, api_version: str, kind: str) -> Any:
        try:
            return await super().resource_for(api_version, kind)
        except UnknownKindError:
            # a CRD installed after the first lookup: look again instead of trusting the cached miss
            self._discovery.pop(api_version, None)
            return await super().resource_for(api_version, kind)

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT ``obj``; ConflictError when its resourceVersion is stale."""
        meta = obj["metadata"]
        resource = await self.resource_for(obj["apiVersion"], obj["kind"])
        return await self._request(
            "PUT",
            resource.path(meta.get("namespace"), meta["name"]),
            query=[("fieldManager", self.field_manager)],
            body=obj,
            what=f"replace {obj['kind']} {meta['name']}",
        )

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        resource = await self.resource_for(api_version, kind)
        return await self._request(
            "PATCH",
            resource.path(namespace, name),
            query=[("fieldManager", self.field_manager)],
            body=patch,
            content_type="application/merge-patch+json",
            what=f"patch {kind} {name}",
        )

    async def patch_status(
        self, api_version: str, kind: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        resource = await self.resource_for(api_version, kind)
        return await self._request(
            "PATCH",
            resource.path(None, name) + "/status",
            query=[("fieldManager", self.field_manager)],
            body={"status": status},
            content_type="application/merge-patch+json",
            what=f"patch the status of {kind} {name}",
        )

    async def record_event(
        self, involved: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        meta = involved["metadata"]
        namespace = meta.get("namespace") or EVENTS_NAMESPACE_FOR_CLUSTER_OBJECTS
        now = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved["apiVersion"],
                "kind": involved["kind"],
                "name": meta["name"],
                "uid": meta.get("uid"),
                **({"namespace": meta["namespace"]} if meta.get("namespace") else {}),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.create(event)
        except Exception as exc:  # an Event is a courtesy; never let it stop a reconcile
            log.warning("could not record event %s on %s: %s", reason, meta["name"], exc)

    async def watch_changes(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str = ""
    ) -> AsyncIterator[str]:
        """Yield ``"RELIST"`` after each (re-)list and the type of every change after it, forever.

        The controller uses this only as a trigger (it reads the current state on every pass), so a
        dropped or expired watch is simply listed again after a short pause.
        """
        resource = await self.resource_for(api_version, kind)
        path = resource.path(namespace)
        selector = [("labelSelector", label_selector)] if label_selector else []
        while True:
            try:
                listing = await self._request(
                    "GET", path, query=[*selector, ("limit", "1")], what=f"list {kind}"
                )
                version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
                yield "RELIST"
                async for change in self._watch_from(path, selector, version, kind):
                    yield change
            except (
                ApiUnavailableError,
                GoneError,  # the listed resourceVersion expired before the watch began
                aiohttp.ClientError,
                TimeoutError,
                asyncio.IncompleteReadError,
            ) as exc:
                log.info("watch of %s interrupted (%s); listing again", kind, exc)
                await asyncio.sleep(_WATCH_RETRY_S)

    async def _watch_from(
        self, path: str, selector: list[tuple[str, str]], version: str, kind: str
    ) -> AsyncIterator[str]:
        query = [
            *selector,
            ("watch", "1"),
            ("resourceVersion", version),
            ("timeoutSeconds", str(WATCH_TIMEOUT_S)),
        ]
        response = await open_get(
            self._api_client,
            path,
            query,
            aiohttp.ClientTimeout(sock_connect=10, sock_read=WATCH_TIMEOUT_S + 60),
        )
        try:
            if response.status != 200:
                raise error_for_status(f"watch {kind}", response.status, await response.read())
            async for line in watch_lines(response):
                event = orjson.loads(line)
                kind_of_change = str(event.get("type", "")) if isinstance(event, dict) else ""
                if kind_of_change == "ERROR":
                    return  # usually 410 Gone: the caller lists again
                yield kind_of_change
        finally:
            response.release()
