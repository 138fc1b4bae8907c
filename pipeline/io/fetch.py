"""Downloading a trace over HTTP(S) (``kubetape replay --trace https://…``, the Simulation's traceURL).

The size limit holds for the bytes actually received and decoded, whatever the server announces: a
chunked response has no ``Content-Length``, and a gzip body's ``Content-Length`` is its compressed size
(a few kilobytes can inflate to gigabytes). So the body is read in pieces and decompressed here, never
more than :data:`_PIECE` bytes at a time, and the download stops as soon as the decoded size passes
the limit. aiohttp's own decompression is off for that reason: it inflates each network chunk whole.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import aiohttp

from pipeline.model.errors import ConfigError, TransientError

MAX_TRACE_BYTES = 2 * 1024**3
"""A trace larger than this (decoded) is refused: it would not fit a replayer's memory anyway."""

_PIECE = 1 << 20
"""Bytes read from the network, and decompressed, per step."""

_ENCODINGS = ("gzip", "x-gzip", "deflate")


async def fetch_bytes(
    url: str, *, timeout_s: float = 300.0, token: str | None = None, max_bytes: int = MAX_TRACE_BYTES
) -> bytes:
    """The body of ``url``, decoded; ConfigError for an answer that will not change (4xx, larger than
    ``max_bytes`` once decoded, an unknown Content-Encoding), TransientError for one that may (5xx, no
    connection, timeout, a body cut short or corrupt)."""
    headers = {"Accept-Encoding": "gzip, deflate"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=timeout_s), auto_decompress=False
            ) as session,
            session.get(url, headers=headers) as response,
        ):
            if 400 <= response.status < 500:
                raise ConfigError(f"{url}: HTTP {response.status} {response.reason}; check the trace URL")
            if response.status >= 500:
                raise TransientError(f"{url}: HTTP {response.status} {response.reason}; try again later")
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity", *_ENCODINGS):
                raise ConfigError(
                    f"{url}: the server sent Content-Encoding {encoding!r}, which kubetape cannot decode"
                )
            compressed = encoding in _ENCODINGS
            if not compressed and (response.content_length or 0) > max_bytes:
                raise ConfigError(
                    f"{url}: {response.content_length} bytes is more than a trace may be ({max_bytes})"
                )
            inflater = _Inflater(deflate=encoding == "deflate") if compressed else None
            body = bytearray()
            async for chunk in response.content.iter_chunked(_PIECE):
                for piece in inflater.feed(chunk) if inflater is not None else (chunk,):
                    body += piece
                    if len(body) > max_bytes:
                        raise ConfigError(
                            f"{url}: the trace is more than {max_bytes} bytes"
                            f"{' once decompressed' if compressed else ''}; refusing it"
                        )
            if inflater is not None and not inflater.complete:
                raise TransientError(f"{url}: the {encoding} body ended before its end; try again later")
            return bytes(body)
    except zlib.error as exc:
        raise TransientError(f"{url}: corrupt compressed body ({exc}); try again later") from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TransientError(f"{url}: cannot download the trace ({type(exc).__name__}: {exc})") from None


class _Inflater:
    """Incremental gzip / zlib / raw-deflate decoding, at most :data:`_PIECE` bytes out per step.

    gzip bodies may hold several members (concatenated files), each decoded in turn. ``deflate`` is
    zlib-wrapped per HTTP, but some servers send raw deflate: the first two bytes tell which."""

    def __init__(self, *, deflate: bool) -> None:
        self._deflate = deflate
        self._z: zlib._Decompress | None = None if deflate else zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._head = b""  # deflate only: bytes kept until the wrapping is known

    @property
    def complete(self) -> bool:
        """Whether the stream ended where a compressed stream may end (not cut short)."""
        return self._z is not None and self._z.eof

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._z is None:
            self._head += data
            if len(self._head) < 2:
                return
            data, self._head = self._head, b""
            zlib_wrapped = data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            self._z = zlib.decompressobj(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
        while True:
            z = self._z
            out = z.decompress(data, _PIECE)
            if out:
                yield out
            data = z.unconsumed_tail
            if z.eof:
                rest = z.unused_data + data
                if self._deflate or not rest:
                    return  # a deflate stream is one stream; bytes after it are ignored, as browsers do
                self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next gzip member
                data = rest
                continue
            if not data and len(out) < _PIECE:
                return  # everything fed is decoded (a full piece may leave output pending: go on)
