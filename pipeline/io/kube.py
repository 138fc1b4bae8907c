"""Kubernetes API access with kubernetes-asyncio: one client per kubeconfig, closed with ``async with``;
and the one mapping of the apiserver's HTTP error statuses to kubetape's exception tree."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client, config

from pipeline.model.errors import (
    AccessDeniedError,
    ApiUnavailableError,
    ConfigError,
    ConflictError,
    GoneError,
    KubeApiError,
    NotFoundError,
    ObjectRejectedError,
)

_ERROR_FOR_STATUS: dict[int, type[KubeApiError]] = {
    401: AccessDeniedError,
    403: AccessDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    429: ApiUnavailableError,
}


@asynccontextmanager
async def kube_api(kubeconfig: Path | None, context: str | None = None) -> AsyncIterator[client.ApiClient]:
    """An ``ApiClient`` for ``kubeconfig`` (None: the pod's service account, inside a cluster); the
    connection pool is closed on exit."""
    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # untyped in kubernetes-asyncio
        except config.ConfigException as exc:
            raise ConfigError(
                f"no --kubeconfig given and not running inside a cluster ({exc}); pass --kubeconfig"
            ) from None
    elif not kubeconfig.exists():  # noqa: ASYNC240 - one stat before connecting, not a hot path
        raise ConfigError(
            f"kubeconfig {kubeconfig} does not exist; pass --kubeconfig or run "
            f"`kubetape stack up` for a local cluster"
        )
    else:
        await config.load_kube_config(
            config_file=str(kubeconfig), context=context, client_configuration=configuration
        )
    api = client.ApiClient(configuration)
    try:
        yield api
    finally:
        await api.close()


def body(manifest: Mapping[str, Any]) -> Any:
    """Pass a plain-dict manifest where kubernetes-asyncio's signatures name a generated model.

    The client serialises dicts as they are; kubetape keeps Kubernetes objects as plain dicts
    end to end and never builds the generated model classes.
    """
    return manifest


def error_for_status(what: str, status: int, data: bytes) -> KubeApiError:
    """The exception for an HTTP error response (usually a ``Status`` object) to ``what`` was asked.

    The one place statuses are interpreted: 429 and 5xx are retriable (:class:`ApiUnavailableError`),
    410 means re-list (:class:`GoneError`), 404/409/401/403 have their own classes, and any other
    status rejects the request (:class:`ObjectRejectedError`)."""
    reason, message = "", data[:500].decode("utf-8", "replace")
    try:
        decoded = orjson.loads(data)
        if isinstance(decoded, dict):
            reason = str(decoded.get("reason") or "")
            message = str(decoded.get("message") or message)
    except orjson.JSONDecodeError:
        pass
    text = f"{what}: HTTP {status}{' ' + reason if reason else ''}: {message}"
    error_class = _ERROR_FOR_STATUS.get(status)
    if error_class is None:
        error_class = ApiUnavailableError if status >= 500 else ObjectRejectedError
    return error_class(text, status=status, reason=reason)


async def watch_lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The lines of a watch response (one JSON event each), as they arrive; blank lines skipped.

    A chunk may end inside a line: the rest waits for the next chunk."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line


async def open_get(
    api: client.ApiClient, path: str, query: list[tuple[str, str]], limits: aiohttp.ClientTimeout
) -> aiohttp.ClientResponse:
    """GET ``path`` as JSON with the client's credentials, the body left unread (a list to read whole,
    a watch to stream), within ``limits`` (connect and read timeouts); the caller releases the response.
    Any status comes back as it is."""
    response: aiohttp.ClientResponse = await api.call_api(
        path,
        "GET",
        query_params=query,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=limits,
    )
    return response
