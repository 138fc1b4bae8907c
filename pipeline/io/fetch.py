"""Downloading a trace over HTTP(S) (``kubetape replay --trace https://…``, the Simulation's traceURL)."""

from __future__ import annotations

import aiohttp

from pipeline.model.errors import ConfigError, TransientError

MAX_TRACE_BYTES = 2 * 1024**3
"""A trace larger than this is refused: it would not fit a replayer's memory anyway."""


async def fetch_bytes(url: str, *, timeout_s: float = 300.0, token: str | None = None) -> bytes:
    """The body of ``url``; ConfigError for an answer that will not change (4xx, too large),
    TransientError for one that may (5xx, no connection, timeout)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(url, headers=headers) as response,
        ):
            if 400 <= response.status < 500:
                raise ConfigError(f"{url}: HTTP {response.status} {response.reason}; check the trace URL")
            if response.status >= 500:
                raise TransientError(f"{url}: HTTP {response.status} {response.reason}; try again later")
            if (response.content_length or 0) > MAX_TRACE_BYTES:
                raise ConfigError(f"{url}: {response.content_length} bytes is more than a trace may be")
            return await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TransientError(f"{url}: cannot download the trace ({type(exc).__name__}: {exc})") from None
