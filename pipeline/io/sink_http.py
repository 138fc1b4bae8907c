"""The sink's ``POST /export`` route on aiohttp: JSON in, trace bytes out, errors mapped to statuses once.

The export itself is a plain callable (the sink layer owns it); this module only speaks HTTP:
:class:`~pipeline.model.errors.ConfigError` (bad request) → 400, any other kubetape error → 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from pipeline.io.http import add_data_route
from pipeline.model.errors import ConfigError, KubetapeError


@dataclass(frozen=True, slots=True)
class ExportReply:
    """The file bytes, the number of events and any warnings (e.g. corrupt segments skipped)."""

    data: bytes
    events: int
    warnings: tuple[str, ...] = ()


ExportFn = Callable[[Any], Awaitable[ExportReply]]


def add_export_route(
    app: web.Application, export: ExportFn, token: str | None, path: str = "/export"
) -> None:
    """``POST path`` with a JSON body, answered by ``export(body)``; bearer token required."""

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError as exc:
            raise web.HTTPBadRequest(text=f"export request: the body is not JSON ({exc})\n") from None
        try:
            reply = await export(body)
        except ConfigError as exc:
            raise web.HTTPBadRequest(text=f"{exc}\n") from None
        except KubetapeError as exc:
            raise web.HTTPInternalServerError(text=f"export failed: {exc}\n") from None
        headers = {"X-Kubetape-Events": str(reply.events)}
        if reply.warnings:
            headers["X-Kubetape-Skipped-Segments"] = str(len(reply.warnings))
            headers["X-Kubetape-Warning"] = reply.warnings[0][:500].replace("\n", " ")
        return web.Response(body=reply.data, content_type="application/octet-stream", headers=headers)

    add_data_route(app, "POST", path, handle, token)
