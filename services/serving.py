"""What every long-running ``kubetape`` service does the same way: stop on SIGTERM/SIGINT, and serve its
health and metrics over HTTP for as long as it runs."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported lazily at run time: the CLI starts faster without aiohttp
    from aiohttp import web

    from pipeline.io.http import HttpSettings

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def on_stop_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGTERM/SIGINT while inside; the handlers go on leaving, so a second signal after
    the service's orderly end takes the default (immediate) way out."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


@contextlib.asynccontextmanager
async def serving_http(app: web.Application, http: HttpSettings) -> AsyncIterator[int]:
    """Serve ``app`` while inside; yields the bound port (``http.port`` 0 picks a free one)."""
    from pipeline.io.http import bound_port, start_http

    runner = await start_http(app, http)
    try:
        yield bound_port(runner)
    finally:
        await runner.cleanup()
