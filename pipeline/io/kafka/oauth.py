"""OAUTHBEARER: the token read from its file at every login, and a refused token told as a refused login.

**The token file.** aiokafka asks its token provider for a token at every authentication, that is for
each connection it opens; :class:`TokenFile` reads the file each time, so a token renewed on disk (a
projected service-account token, a sidecar that refreshes it) is used from the next connection on,
without a restart. A broker that bounds its sessions (``connections.max.reauth.ms``) closes a connection
when its token expires (aiokafka cannot re-authenticate), and the connection that replaces it logs in
with the file as it is then.

**A refused token.** A Kafka broker answers a token it does not accept (expired, badly signed, the
wrong audience) not with an error code but with an error *challenge* (RFC 7628 §3.2.2: a JSON
``{"status":"invalid_token"}``), and fails the authentication only once the client has answered it with
a single ``0x01`` byte (KIP-255). aiokafka 0.14's ``OAuthAuthenticator`` ignores the challenge and takes
the login as done, so the broker closes the connection at its next request, a broken connection like
any other: the refusal was never seen, and the component stayed ready while nothing got through.
:class:`_AnsweringAuthenticator` answers the challenge, so aiokafka gets the broker's
``SaslAuthenticationFailedError``, closes with ``CloseReason.AUTH_FAILURE`` and the component turns not
ready saying why (:func:`pipeline.io.kafka.access.on_login_refused`). :func:`install` puts it in place
of aiokafka's, once, when this package is imported.
"""

from __future__ import annotations

import base64
import binascii
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import conn as aiokafka_conn
from aiokafka.abc import AbstractTokenProvider

from pipeline.model.errors import ConfigError

MAX_TOKEN_BYTES = 64 * 1024  # a JWT is a few KiB; a larger file is not a token
_CONTROL_A = b"\x01"


class TokenFile(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka is untyped
    """The token of ``sasl.oauthbearer.token.file``, read at every authentication."""

    def __init__(self, path: Path) -> None:
        self._path = path

    async def token(self) -> str:
        return read_token(self._path)


def read_token(path: Path) -> str:
    """The token the file holds now (surrounding whitespace removed); a ConfigError naming the file
    when it cannot be read or is larger than any token."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"sasl.oauthbearer.token.file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_TOKEN_BYTES:
        raise ConfigError(
            f"sasl.oauthbearer.token.file {path}: larger than {MAX_TOKEN_BYTES} bytes, which no token is; "
            "point it at the file that holds only the token"
        )
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ConfigError(
            f"sasl.oauthbearer.token.file {path}: not text (a token is ASCII); point it at the token"
        ) from None


def token_expiry(path: Path, now: float | None = None) -> str:
    """``expires …: expired`` (or ``valid now``) from the ``exp`` claim of the JWT the file holds now,
    for messages; empty when the file holds no readable JWT or no ``exp``. The token is only decoded,
    not checked: checking it is the brokers' part."""
    try:
        token = read_token(path)
        payload = token.split(".")[1]
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        expires = float(claims["exp"])
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
    except (ConfigError, IndexError, binascii.Error, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return ""
    except (OverflowError, OSError):  # an exp no calendar date has
        return ""
    now = time.time() if now is None else now
    return f"expires {when}: {'expired' if now >= expires else 'valid now'}"


class _AnsweringAuthenticator(aiokafka_conn.OAuthAuthenticator):  # type: ignore[misc]
    """aiokafka's OAUTHBEARER exchange, plus the answer to a broker's error challenge (module docstring):
    after the token, a non-empty reply is the broker refusing it, answered with ``0x01`` so the broker
    fails the authentication with an error code aiokafka reports."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._answered = False

    async def step(self, payload: bytes | None) -> tuple[bytes, bool] | None:
        if self._token_sent and payload and not self._answered:
            self._answered = True
            return _CONTROL_A, True
        result: tuple[bytes, bool] | None = await super().step(payload)
        return result


def install() -> None:
    """Use :class:`_AnsweringAuthenticator` for every OAUTHBEARER login aiokafka makes from here on
    (aiokafka builds it by this module-level name at each login)."""
    aiokafka_conn.OAuthAuthenticator = _AnsweringAuthenticator


install()
