"""Trace downloads against a real HTTP server on 127.0.0.1: the size limit holds for the bytes actually
received and decoded (chunked bodies, gzip and deflate bodies, gzip bombs), not for what the server
announces."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from pipeline.io.fetch import fetch_bytes
from pipeline.model.errors import ConfigError, TransientError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LIMIT = 64 * 1024
TRACE = bytes(range(256)) * 200  # 51,200 bytes: under LIMIT


def _gzip_bomb(decoded: int) -> bytes:
    """A gzip body of ``decoded`` zero bytes (about a thousandth of that on the wire)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    parts = [z.compress(zeros) for _ in range(decoded >> 20)]
    return b"".join([*parts, z.flush()])


BOMB = _gzip_bomb(256 << 20)  # 256 MiB once inflated, ~250 KiB on the wire


def _body(data: bytes, encoding: str | None = None) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        del request
        headers = {"Content-Encoding": encoding} if encoding else {}
        return web.Response(body=data, headers=headers)

    return handler


def _chunked(pieces: int, piece: bytes, encoding: str | None = None) -> Handler:
    """A chunked response (no Content-Length), written piece by piece."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        if encoding:
            response.headers["Content-Encoding"] = encoding
        await response.prepare(request)
        try:
            for _ in range(pieces):
                await response.write(piece)
        except (ConnectionResetError, RuntimeError):  # the client stopped reading: what we want
            return response
        await response.write_eof()
        return response

    return handler


def _lying_length(data: bytes, claimed: int) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": str(claimed)})
        response.force_close()  # the connection ends after the short body
        await response.prepare(request)
        await response.write(data)
        return response

    return handler


def _status(status: int) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        del request
        return web.Response(status=status)

    return handler


def _raw_deflate(data: bytes) -> bytes:
    z = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return z.compress(data) + z.flush()


ROUTES: dict[str, Handler] = {
    "/plain": _body(TRACE),
    "/exactly-the-limit": _body(bytes(LIMIT)),
    "/one-byte-over": _body(bytes(LIMIT + 1)),
    "/announced-too-large": _body(bytes(LIMIT + 1)),
    "/chunked-small": _chunked(10, TRACE[:1000]),
    "/chunked-endless": _chunked(100_000, bytes(16 * 1024)),  # 1.6 GB if the client read it all
    "/gzip": _body(gzip.compress(TRACE), "gzip"),
    "/gzip-two-members": _body(gzip.compress(TRACE[:100]) + gzip.compress(TRACE[100:]), "gzip"),
    "/gzip-chunked": _chunked(1, gzip.compress(TRACE), "gzip"),
    "/gzip-bomb": _body(BOMB, "gzip"),
    "/gzip-bomb-chunked": _chunked(1, BOMB, "gzip"),
    "/gzip-just-over": _body(gzip.compress(bytes(LIMIT + 1)), "gzip"),
    "/gzip-truncated": _body(gzip.compress(TRACE)[:-10], "gzip"),
    "/gzip-corrupt": _body(b"\x1f\x8b\x08\x00" + bytes(40), "gzip"),
    "/deflate-zlib": _body(zlib.compress(TRACE), "deflate"),
    "/deflate-raw": _body(_raw_deflate(TRACE), "deflate"),
    "/brotli": _body(b"\x0b\x02\x80hello\x03", "br"),
    "/short-body": _lying_length(TRACE[:100], 1000),
    "/not-found": _status(404),
    "/unavailable": _status(503),
}


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in ROUTES.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def fetch(url: str) -> bytes:
    return await fetch_bytes(url, timeout_s=30, max_bytes=LIMIT)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/plain", TRACE),
        ("/exactly-the-limit", bytes(LIMIT)),
        ("/chunked-small", TRACE[:1000] * 10),
        ("/gzip", TRACE),
        ("/gzip-two-members", TRACE),
        ("/gzip-chunked", TRACE),
        ("/deflate-zlib", TRACE),
        ("/deflate-raw", TRACE),
    ],
)
async def test_bodies_within_the_limit_arrive_decoded(server: str, path: str, expected: bytes) -> None:
    assert await fetch(server + path) == expected


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/one-byte-over", "more than a trace may be"),  # refused on its Content-Length
        ("/chunked-endless", f"more than {LIMIT} bytes; refusing"),  # no Content-Length at all
        ("/gzip-bomb", f"more than {LIMIT} bytes once decompressed"),  # a small Content-Length
        ("/gzip-bomb-chunked", f"more than {LIMIT} bytes once decompressed"),
        ("/gzip-just-over", f"more than {LIMIT} bytes once decompressed"),
        ("/brotli", "Content-Encoding 'br'"),
        ("/not-found", "HTTP 404"),
    ],
)
async def test_what_will_not_change_is_a_config_error(server: str, path: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        await fetch(server + path)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/gzip-truncated", "ended before its end"),
        ("/gzip-corrupt", "corrupt compressed body"),
        ("/short-body", "cannot download the trace"),
        ("/unavailable", "HTTP 503"),
    ],
)
async def test_what_may_change_is_a_transient_error(server: str, path: str, message: str) -> None:
    with pytest.raises(TransientError, match=message):
        await fetch(server + path)


async def test_a_gzip_bomb_is_refused_without_inflating_it(server: str) -> None:
    """256 MiB of zeros in a quarter megabyte: refused after about the limit, in bounded memory."""
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match="once decompressed"):
            await fetch_bytes(server + "/gzip-bomb", timeout_s=30, max_bytes=4 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"peak {peak} bytes while refusing a gzip bomb"


async def test_a_refused_download_leaves_no_connection_behind(server: str) -> None:
    """Refusing mid-body closes the response (the session's connection pool goes with it)."""
    for _ in range(3):
        with pytest.raises(ConfigError):
            await fetch(server + "/chunked-endless")
    assert await fetch(server + "/plain") == TRACE
