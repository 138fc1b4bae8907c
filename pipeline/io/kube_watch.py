"""Read-only Kubernetes access for the watcher: discovery, paged lists, streaming watches, owner gets.

Only GET requests are ever made. Responses are decoded with orjson into plain dicts (never generated
models). HTTP statuses become exceptions through :func:`pipeline.io.kube.error_for_status`; what they
mean to the watcher:

* 410 Gone (as a status or as an ``ERROR`` watch event) → :class:`~pipeline.model.errors.GoneError`
  (re-list needed);
* connection errors, timeouts, any other status → :class:`~pipeline.model.errors.WatchBrokenError`
  (retriable);
* 401/403 → :class:`~pipeline.model.errors.ConfigError` (credentials or RBAC must be fixed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client

from pipeline.io.kube import error_for_status, open_get, watch_lines
from pipeline.io.kube_types import ApiResource
from pipeline.io.watch_types import ListResult, ResourceVersion, WatchEvent
from pipeline.model.errors import (
    AccessDeniedError,
    ConfigError,
    FormatError,
    GoneError,
    NotFoundError,
    WatchBrokenError,
)
from pipeline.model.keys import GroupVersionKind

LIST_PAGE_SIZE = 500
"""Objects per list page: bounds one response's memory on large clusters."""

WATCH_TIMEOUT_S = 290
"""Server-side watch timeout; the watch then ends cleanly and is resumed from the last version."""

_READ_SLACK_S = 60
"""A watch that sends nothing (not even a bookmark) for timeout + slack is considered dropped."""

_WATCH_EVENT_TYPES = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"}


class KubeCluster:
    """The watcher's view of one cluster through an ``ApiClient`` from :func:`pipeline.io.kube.kube_api`."""

    def __init__(self, api: client.ApiClient, on_malformed: Callable[[str], None] | None = None) -> None:
        """``on_malformed`` is told (with a description) about each watch event of unknown shape, which
        is skipped: one odd event must never stop the watcher."""
        self._api = api
        self._on_malformed = on_malformed
        self._group_versions: dict[str, dict[str, ApiResource]] = {}

    # ---- discovery -------------------------------------------------------------------------------
    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        """The served resource of ``gvk`` (custom resources included), or None if it is not served."""
        api_version = gvk.api_version
        if api_version not in self._group_versions:
            path = f"/api/{gvk.version}" if not gvk.group else f"/apis/{api_version}"
            try:
                doc = await self._get_json(path)
            except NotFoundError:
                doc = {"resources": []}
            kinds: dict[str, ApiResource] = {}
            for res in doc.get("resources") or []:
                name = res.get("name", "")
                if "/" in name or "list" not in (res.get("verbs") or []):
                    continue  # subresources (pods/status) and unlistable kinds
                kinds[res["kind"]] = ApiResource(api_version, res["kind"], name, bool(res.get("namespaced")))
            self._group_versions[api_version] = kinds
        return self._group_versions[api_version].get(gvk.kind)

    def forget_discovery(self) -> None:
        """Drop cached discovery (after a CRD is installed, for example)."""
        self._group_versions.clear()

    # ---- reads -----------------------------------------------------------------------------------
    async def list_objects(self, res: ApiResource) -> ListResult:
        """Every object of ``res`` cluster-wide, all pages, with apiVersion/kind filled in."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            params = [("limit", str(LIST_PAGE_SIZE))] + ([("continue", cont)] if cont else [])
            try:
                doc = await self._get_json(res.path(), params)
            except GoneError as exc:
                # the continue token expired mid-list: start the list over from a fresh snapshot
                if not cont:
                    raise WatchBrokenError(f"listing {res.label} answered 410 Gone: {exc}") from None
                items, cont = [], ""
                continue
            except NotFoundError:
                raise WatchBrokenError(f"{res.label} is no longer served by the API server") from None
            for item in doc.get("items") or []:
                if isinstance(item, dict):
                    item["apiVersion"] = res.api_version
                    item["kind"] = res.kind
                    items.append(item)
            meta = doc.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                return ListResult(items, ResourceVersion(str(meta.get("resourceVersion", ""))))

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """One object, or None if it does not exist (used to follow owner chains)."""
        base = res.path(namespace)
        try:
            doc = await self._get_json(f"{base}/{name}")
        except NotFoundError:
            return None
        doc.setdefault("apiVersion", res.api_version)
        doc.setdefault("kind", res.kind)
        return doc

    async def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        """Watch events of ``res`` after ``since`` (bookmarks on), until the server ends the watch.

        Raises GoneError when ``since`` is too old and WatchBrokenError when the stream drops.
        """
        params = [
            ("watch", "1"),
            ("resourceVersion", since),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_TIMEOUT_S)),
        ]
        timeout = aiohttp.ClientTimeout(sock_connect=10, sock_read=WATCH_TIMEOUT_S + _READ_SLACK_S)
        try:
            resp = await self._request(res.path(), params, timeout)
        except GoneError as exc:
            raise GoneError(f"watch of {res.label} from resourceVersion {since}: {exc}", status=410) from None
        except NotFoundError:
            raise WatchBrokenError(f"{res.label} is no longer served by the API server") from None
        try:
            async for line in watch_lines(resp):
                try:
                    yield _decode_watch_line(line, res)
                except FormatError as exc:
                    if self._on_malformed is not None:
                        self._on_malformed(str(exc))
        except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as exc:
            raise WatchBrokenError(
                f"watch of {res.label} dropped ({type(exc).__name__}: {exc}); will re-list"
            ) from None
        finally:
            resp.release()

    # ---- plumbing --------------------------------------------------------------------------------
    async def _get_json(self, path: str, params: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=60)
        resp = await self._request(path, params or [], timeout)
        try:
            data = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise WatchBrokenError(f"GET {path}: {type(exc).__name__}: {exc}") from None
        finally:
            resp.release()
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise WatchBrokenError(f"GET {path}: the API server answered non-JSON") from None
        if not isinstance(doc, dict):
            raise WatchBrokenError(f"GET {path}: the API server answered {type(doc).__name__}, not an object")
        return doc

    async def _request(
        self, path: str, params: list[tuple[str, str]], client_timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        try:
            resp = await open_get(self._api, path, params, client_timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise WatchBrokenError(
                f"cannot reach the API server for GET {path} ({type(exc).__name__}: {exc})"
            ) from None
        if resp.status == 200:
            return resp
        data = await resp.read()
        resp.release()
        error = error_for_status(f"GET {path}", resp.status, data)
        if isinstance(error, AccessDeniedError):
            raise ConfigError(
                f"the API server refused {error}; check the kubeconfig credentials and that the "
                f"watcher's RBAC (k8s/prod/rbac.yaml) grants list/watch on this kind"
            )
        if isinstance(error, (GoneError, NotFoundError)):
            raise error  # the callers know what these mean for a list, a watch, a get
        # anything else (429, 5xx, an unexpected refusal): the stream cannot go on; re-list after a pause
        raise WatchBrokenError(str(error), status=error.status, reason=error.reason)


def _decode_watch_line(line: bytes, res: ApiResource) -> WatchEvent:
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise WatchBrokenError(f"watch of {res.label} sent a line that is not JSON: {line[:200]!r}") from None
    if not isinstance(doc, dict):
        raise WatchBrokenError(f"watch of {res.label} sent {type(doc).__name__}, not an event object")
    event_type, obj = doc.get("type"), doc.get("object")
    if event_type == "ERROR":
        status = obj if isinstance(obj, dict) else {}
        if status.get("code") == 410:
            raise GoneError(f"watch of {res.label}: {status.get('message', '410 Gone')}", status=410)
        raise WatchBrokenError(f"watch of {res.label} ended with an error: {status.get('message', status)}")
    if event_type not in _WATCH_EVENT_TYPES or not isinstance(obj, dict):
        raise FormatError(f"watch of {res.label} sent an event of unknown shape: type={event_type!r}")
    obj["apiVersion"] = res.api_version
    obj["kind"] = res.kind
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion", "") if isinstance(meta, dict) else ""
    return WatchEvent(event_type, obj, ResourceVersion(str(rv)))
