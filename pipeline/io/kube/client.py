"""The one Kubernetes client: :class:`KubeClient` implements :class:`pipeline.io.kube.cluster.Cluster` on
one ``ApiClient`` (from :mod:`pipeline.io.kube.connect`).

Bodies stay plain dicts (decoded with orjson), never generated models. HTTP failures become kubetape
exceptions through :mod:`pipeline.io.kube.status`: retriable (429, 5xx, connection trouble) or not (the
object is invalid, forbidden, of an unknown kind). The watcher's reads (:meth:`KubeClient.resolve`,
:meth:`~KubeClient.list_all`, :meth:`~KubeClient.get_object`, :meth:`~KubeClient.watch_objects`) turn
what a stream cannot go on with into ``WatchBrokenError`` (re-list) and refused credentials into
``ConfigError``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from pipeline.io.kube.cluster import Cluster
from pipeline.io.kube.discovery import Discovery
from pipeline.io.kube.transport import JsonTransport
from pipeline.io.kube.types import ApiResource, ListPage, ListResult, ResourceVersion, WatchEvent
from pipeline.io.kube.watch import watch_events
from pipeline.model.errors import (
    AccessDeniedError,
    ApiUnavailableError,
    ConfigError,
    GoneError,
    KubeApiError,
    NotFoundError,
    UnknownKindError,
    WatchBrokenError,
)
from pipeline.model.keys import GroupVersionKind

log = logging.getLogger(__name__)

FIELD_MANAGER = "kubetape-replayer"
"""The server-side apply field manager of everything the replayer writes."""
CONTROLLER_FIELD_MANAGER = "kubetape-controller"

DEFAULT_REQUEST_TIMEOUT_S = 30.0
LIST_TIMEOUT_S = 60.0
"""Per list page of the watcher's full lists (a page of 500 large objects takes longer than a write)."""
LIST_PAGE_SIZE = 500
"""Objects per list page: bounds one response's memory on large clusters."""
REDISCOVER_AFTER_S = 1.0
"""A kind missing from a discovery older than this is looked up again: a CRD may have been installed
since (the replayer installs its root's); younger misses are trusted, so a trace full of an unknown
kind costs one discovery a second, not one per object."""
EVENTS_NAMESPACE_FOR_CLUSTER_OBJECTS = "default"
"""Where Events about cluster-scoped objects go (what ``kubectl describe`` reads for them)."""
_CHANGE_FEED_RETRY_S = 2.0
POD_METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/pods"
"""PodMetrics of every namespace: the pod usage the HPA reads, which the watcher samples."""


def _describe(kind: str, namespace: str | None, name: str | None) -> str:
    return f"{kind} {namespace + '/' if namespace else ''}{name or ''}".rstrip()


class KubeClient:
    """Everything kubetape asks of one apiserver (the ``Cluster`` protocol)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        field_manager: str = FIELD_MANAGER,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        rediscover_after_s: float = REDISCOVER_AFTER_S,
        on_malformed: Callable[[str], None] | None = None,
    ) -> None:
        """``rediscover_after_s`` 0 looks every unknown kind up again (a controller waiting for CRDs);
        ``on_malformed`` is told about each watch event of unknown shape, which is skipped: one odd
        event must never stop the watcher."""
        self._api = api
        self._transport = JsonTransport(api, request_timeout_s)
        self._request = self._transport.request
        self.field_manager = field_manager
        self._rediscover_after_s = rediscover_after_s
        self._on_malformed = on_malformed
        self._discovery = Discovery(self._transport.get)

    # ---- discovery ------------------------------------------------------------------------------
    async def resource_for(self, api_version: str, kind: str) -> ApiResource:
        """The resource serving ``kind`` in ``api_version``; raises UnknownKindError if there is none."""
        resource = (await self._discovery.kinds(api_version)).get(kind)
        if resource is None and self._discovery.age(api_version) >= self._rediscover_after_s:
            resource = (await self._discovery.refresh(api_version)).get(kind)
        if resource is None:
            raise UnknownKindError(
                f"the apiserver serves no kind {kind!r} in {api_version!r}; install its CRD or API "
                f"group in the target cluster, or leave the kind out of the trace",
                status=404,
                reason="UnknownKind",
            )
        return resource

    def forget_discovery(self) -> None:
        """Drop cached discovery (after a CRD is installed, for example)."""
        self._discovery.forget()

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
        return await self._merge_patch(resource.path(namespace, name), patch, f"patch {kind} {name}")

    async def patch_status(
        self, api_version: str, kind: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        resource = await self.resource_for(api_version, kind)
        path = resource.path(None, name) + "/status"
        return await self._merge_patch(path, {"status": status}, f"patch the status of {kind} {name}")

    async def record_event(
        self, involved: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        meta = involved["metadata"]
        try:
            await self.create(_event(involved, event_type, reason, message, self.field_manager))
        except Exception as exc:  # an Event is a courtesy; never let it stop a reconcile
            log.warning("could not record event %s on %s: %s", reason, meta["name"], exc)

    # ---- change feed (the controller) -----------------------------------------------------------
    async def watch_changes(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str = ""
    ) -> AsyncIterator[str]:
        """Yield ``"RELIST"`` after each (re-)list and the type of every change after it, forever.

        The controller uses this only as a trigger (it reads the current state on every pass), so a
        dropped or expired watch is simply listed again after a short pause.
        """
        resource = await self.resource_for(api_version, kind)
        selector = [("labelSelector", label_selector)] if label_selector else []
        while True:
            try:
                listing = await self._request(
                    "GET", resource.path(namespace), query=[*selector, ("limit", "1")], what=f"list {kind}"
                )
                version = ResourceVersion(str((listing.get("metadata") or {}).get("resourceVersion") or ""))
                yield "RELIST"
                async for event in watch_events(
                    self._api, resource, version, namespace=namespace, label_selector=label_selector
                ):
                    if event.type != "BOOKMARK":
                        yield event.type
            except (ApiUnavailableError, GoneError) as exc:  # WatchBrokenError is an ApiUnavailableError
                log.info("watch of %s interrupted (%s); listing again", kind, exc)
                await asyncio.sleep(_CHANGE_FEED_RETRY_S)

    # ---- reads (the watcher) --------------------------------------------------------------------
    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        """The listable resource of ``gvk`` (custom resources included), or None if it is not served."""
        with _as_watch_errors(f"discovery of {gvk.api_version}"):
            resource = (await self._discovery.kinds(gvk.api_version)).get(gvk.kind)
        return resource if resource is not None and resource.listable else None

    async def list_all(self, res: ApiResource, *, label_selector: str = "") -> ListResult:
        """Every object of ``res`` cluster-wide (those matching ``label_selector``, if given), all pages,
        with apiVersion/kind filled in, held at once (for small lists; the watcher uses
        :meth:`list_pages`)."""
        items: list[dict[str, Any]] = []
        version = ResourceVersion("")
        async for page in self.list_pages(res, label_selector=label_selector):
            if page.restarted:
                items = []
            items += page.items
            version = page.resource_version
        return ListResult(items, version)

    async def list_pages(self, res: ApiResource, *, label_selector: str = "") -> AsyncIterator[ListPage]:
        """Every object of ``res`` cluster-wide (those matching ``label_selector``, if given), one page
        of :data:`LIST_PAGE_SIZE` at a time as the server answers, with apiVersion/kind filled in.

        A continue token that expires mid-list starts the list over from a fresh snapshot: the next page
        says ``restarted``. A first page answered 410 Gone raises ``WatchBrokenError``."""
        cont = ""
        restarted = False
        selector = [("labelSelector", label_selector)] if label_selector else []
        while True:
            query = [*selector, ("limit", str(LIST_PAGE_SIZE))] + ([("continue", cont)] if cont else [])
            try:
                with _as_watch_errors(f"list of {res.label}"):
                    doc = await self._request(
                        "GET",
                        res.path(),
                        query=query,
                        what=f"list {res.label}",
                        timeout_s=LIST_TIMEOUT_S,
                    )
            except GoneError as exc:
                # the continue token expired mid-list: start the list over from a fresh snapshot
                if not cont:
                    raise WatchBrokenError(f"listing {res.label} answered 410 Gone: {exc}") from None
                cont, restarted = "", True
                continue
            items: list[dict[str, Any]] = []
            for item in doc.get("items") or []:
                if isinstance(item, dict):
                    item["apiVersion"] = res.api_version
                    item["kind"] = res.kind
                    items.append(item)
            meta = doc.get("metadata") or {}
            cont = meta.get("continue") or ""
            del doc  # the page's items only, while the reader shapes them
            yield ListPage(items, ResourceVersion(str(meta.get("resourceVersion", ""))), restarted)
            restarted = False
            if not cont:
                return

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """One object, or None if it does not exist (used to follow owner chains)."""
        with _as_watch_errors(f"get of {res.label}"):
            try:
                doc = await self._request(
                    "GET", res.path(namespace, name), what=f"get {_describe(res.kind, namespace, name)}"
                )
            except NotFoundError:
                return None  # the owner is gone: the chain ends here
        doc.setdefault("apiVersion", res.api_version)
        doc.setdefault("kind", res.kind)
        return doc

    async def watch_objects(
        self, res: ApiResource, since: ResourceVersion, *, label_selector: str = ""
    ) -> AsyncIterator[WatchEvent]:
        """Watch events of ``res`` after ``since`` (bookmarks on; those matching ``label_selector``, if
        given), until the server ends the watch.

        Raises GoneError when ``since`` is too old and WatchBrokenError when the stream drops.
        """
        with _as_watch_errors(f"watch of {res.label}"):
            async for event in watch_events(
                self._api, res, since, label_selector=label_selector, on_malformed=self._on_malformed
            ):
                yield event

    async def pod_metrics(self) -> list[dict[str, Any]]:
        """Every PodMetrics of the Metrics API (what the HPA reads), all namespaces, in one answer:
        metrics-server serves them from memory and does not page. Errors as the API server answers
        (``NotFoundError`` when the API is not served, ``ApiUnavailableError`` while it is down)."""
        doc = await self._request(
            "GET", POD_METRICS_PATH, what="list PodMetrics (metrics.k8s.io)", timeout_s=LIST_TIMEOUT_S
        )
        items = doc.get("items")
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    # ---- transport ------------------------------------------------------------------------------
    async def _merge_patch(self, path: str, patch: dict[str, Any], what: str) -> dict[str, Any]:
        return await self._request(
            "PATCH",
            path,
            query=[("fieldManager", self.field_manager)],
            body=patch,
            content_type="application/merge-patch+json",
            what=what,
        )


@contextmanager
def _as_watch_errors(what: str) -> Iterator[None]:
    """What a refusal means to the watcher: credentials or RBAC to fix (``ConfigError``), a version to
    re-list from (``GoneError``, passed on), or a stream that cannot go on (``WatchBrokenError``)."""
    try:
        yield
    except (GoneError, WatchBrokenError, ConfigError):
        raise
    except AccessDeniedError as exc:
        raise ConfigError(
            f"the API server refused {exc}; check the kubeconfig credentials and that the "
            f"watcher's RBAC (k8s/prod/rbac.yaml) grants list/watch on this kind"
        ) from None
    except NotFoundError as exc:
        raise WatchBrokenError(f"{what}: no longer served by the API server ({exc})", status=404) from None
    except KubeApiError as exc:
        # 429, 5xx, an unreachable server, an unexpected refusal: the stream cannot go on; re-list later
        raise WatchBrokenError(str(exc), status=exc.status, reason=exc.reason) from None


def _event(
    involved: Mapping[str, Any], event_type: str, reason: str, message: str, component: str
) -> dict[str, Any]:
    """A core/v1 Event about ``involved`` (cluster-scoped objects' Events go to ``default``)."""
    meta = involved["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
            "namespace": meta.get("namespace") or EVENTS_NAMESPACE_FOR_CLUSTER_OBJECTS,
        },
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
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def controller_client(api: client.ApiClient) -> KubeClient:
    """The Simulation controller's client: its own field manager, and an unknown kind looked up again at
    once (it waits for CRDs to be installed)."""
    return KubeClient(api, field_manager=CONTROLLER_FIELD_MANAGER, rediscover_after_s=0.0)


_IMPLEMENTS_CLUSTER: type[Cluster] = KubeClient  # mypy checks here that KubeClient is a whole Cluster
