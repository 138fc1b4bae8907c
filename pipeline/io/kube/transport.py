"""Requests to the apiserver with the ``ApiClient``'s credentials: a JSON request read whole, or a GET left
open to stream (lists read page by page, watches line by line). Bodies stay plain dicts (orjson), never
kubernetes-asyncio's generated models."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client

from pipeline.io.kube.status import error_for_status, unreachable
from pipeline.model.errors import ApiUnavailableError

CONNECTION_FAILURES = (aiohttp.ClientError, TimeoutError, OSError)
"""What the client raises when the apiserver did not answer (refused, reset, timed out)."""


class JsonTransport:
    """JSON requests on one ``ApiClient`` within a default timeout."""

    def __init__(self, api: client.ApiClient, timeout_s: float) -> None:
        self.api = api
        self.timeout_s = timeout_s

    async def request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """``method`` on ``path``; the decoded JSON object of a 2xx answer, else the exception
        :mod:`pipeline.io.kube.status` maps the answer (or its absence) to."""
        try:
            response = await self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.timeout_s if timeout_s is None else timeout_s,
            )
            try:
                status: int = response.status
                data: bytes = await response.read()
            finally:
                response.release()
        except CONNECTION_FAILURES as exc:
            raise unreachable(what, exc) from exc
        if not 200 <= status < 300:
            raise error_for_status(what, status, data)
        try:
            decoded = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            # a proxy's error page, a truncated body: nothing to act on, but the next try may be fine
            raise ApiUnavailableError(
                f"{what}: the apiserver answered HTTP {status} with a body that is not JSON: {data[:200]!r}",
                status=status,
            ) from None
        return decoded if isinstance(decoded, dict) else {}

    async def get(self, path: str, what: str) -> dict[str, Any]:
        return await self.request("GET", path, what=what)


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
