"""The one watch stream: a GET with ``watch=1`` from a resourceVersion, decoded line by line into
:class:`~pipeline.io.kube.types.WatchEvent` s, used by the watcher (every event) and the controller (as a
wake-up signal).

What ends a stream: the server's timeout (the iterator ends: resume from the last version seen);
410 Gone, as a status or an ``ERROR`` event (``GoneError``: re-list); a dropped connection, a line that
is not JSON or another ``ERROR`` event (``WatchBrokenError``: re-list after a pause). Other statuses
raise what :mod:`pipeline.io.kube.status` maps them to. An event of unknown shape is skipped and
reported, never fatal.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import aiohttp
import orjson
from kubernetes_asyncio import client

from pipeline.io.kube.status import error_for_status, unreachable
from pipeline.io.kube.transport import CONNECTION_FAILURES, open_get, watch_lines
from pipeline.io.kube.types import ApiResource, ResourceVersion, WatchEvent
from pipeline.model.errors import FormatError, GoneError, WatchBrokenError

WATCH_TIMEOUT_S = 290
"""Server-side watch timeout; the watch then ends cleanly and is resumed from the last version."""

_READ_SLACK_S = 60
"""A watch that sends nothing (not even a bookmark) for timeout + slack is considered dropped."""

_WATCH_EVENT_TYPES = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"}


async def watch_events(
    api: client.ApiClient,
    res: ApiResource,
    since: ResourceVersion,
    *,
    namespace: str | None = None,
    label_selector: str = "",
    on_malformed: Callable[[str], None] | None = None,
) -> AsyncIterator[WatchEvent]:
    """Watch events of ``res`` after ``since`` (bookmarks on), until the server ends the watch."""
    query = [
        *([("labelSelector", label_selector)] if label_selector else []),
        ("watch", "1"),
        ("resourceVersion", since),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", str(WATCH_TIMEOUT_S)),
    ]
    limits = aiohttp.ClientTimeout(sock_connect=10, sock_read=WATCH_TIMEOUT_S + _READ_SLACK_S)
    what = f"watch of {res.label} from resourceVersion {since}"
    try:
        response = await open_get(api, res.path(namespace), query, limits)
    except CONNECTION_FAILURES as exc:
        raise unreachable(what, exc) from exc
    try:
        if response.status != 200:
            raise error_for_status(what, response.status, await response.read())
        async for line in watch_lines(response):
            try:
                yield decode_watch_line(line, res)
            except FormatError as exc:
                if on_malformed is not None:
                    on_malformed(str(exc))
    except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as exc:
        raise WatchBrokenError(
            f"watch of {res.label} dropped ({type(exc).__name__}: {exc}); will re-list"
        ) from None
    finally:
        response.release()


def decode_watch_line(line: bytes, res: ApiResource) -> WatchEvent:
    """One line of a watch of ``res``; raises GoneError (410 ``ERROR`` event), WatchBrokenError (another
    ``ERROR``, not JSON) or FormatError (a shape this code does not know: skip it)."""
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
