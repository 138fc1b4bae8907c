"""The services' HTTP surface (aiohttp): health, readiness, metrics, and token-guarded data routes.

Binds to 127.0.0.1 by default. ``/healthz``, ``/readyz`` and ``/metrics`` are open (they reveal no
cluster data); every route registered with :func:`add_data_route` requires ``Authorization: Bearer``.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from pipeline.io.metrics import Metrics

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ReadinessCheck = Callable[[], bool]

METRICS_KEY = web.AppKey("metrics", Metrics)
READY_KEY = web.AppKey("ready", list)  # one-element holder so the check can be swapped after start


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Where the service listens and the bearer token its data routes require (None: data routes off)."""

    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None


def create_app(metrics: Metrics, ready: ReadinessCheck) -> web.Application:
    app = web.Application()
    app[METRICS_KEY] = metrics
    app[READY_KEY] = [ready]
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


def add_data_route(app: web.Application, method: str, path: str, handler: Handler, token: str | None) -> None:
    """Register a route that returns cluster data; it answers 401 without the right bearer token and
    404 when the service was started without a token (data routes are off by default)."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        if token is None:
            raise web.HTTPNotFound(text="data endpoints are disabled: start the service with a token\n")
        supplied = request.headers.get("Authorization", "")
        expected = f"Bearer {token}"
        if not hmac.compare_digest(supplied.encode(), expected.encode()):
            raise web.HTTPUnauthorized(
                text="missing or wrong bearer token\n", headers={"WWW-Authenticate": "Bearer"}
            )
        return await handler(request)

    app.router.add_route(method, path, guarded)


async def _healthz(request: web.Request) -> web.Response:
    del request
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    ready: ReadinessCheck = request.app[READY_KEY][0]
    if ready():
        return web.Response(text="ready\n")
    return web.Response(status=503, text="not ready\n")


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(
        text=request.app[METRICS_KEY].render(),
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


async def start_http(app: web.Application, settings: HttpSettings) -> web.AppRunner:
    """Start serving; returns the runner (``await runner.cleanup()`` stops it). Port 0 picks a free port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple):
            port: int = address[1]
            return port
    raise RuntimeError("the HTTP server is not listening")
