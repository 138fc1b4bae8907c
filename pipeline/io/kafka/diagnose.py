"""Why the brokers refuse a client, in words: aiokafka reports a refused TLS handshake or SASL
authentication only as "unable to bootstrap" and logs the cause. When a client cannot start, one direct
connection to the first bootstrap server finds the cause, so the component stops with one clear error
(what, and what to change) instead of retrying a password that will never work."""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from aiokafka import errors
from aiokafka.conn import create_conn

from pipeline.io.kafka.access import tls_fix
from pipeline.io.kafka.clients import connection
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.tls import refusal_words


async def refusal(settings: KafkaSettings, timeout_s: float = 15.0) -> str | None:
    """What the first bootstrap server objects to in this client's TLS or SASL settings; None when it
    accepts the client or cannot be reached at all (then retrying may help)."""
    kwargs = connection(settings)
    first = str(kwargs.pop("bootstrap_servers")).split(",")[0].strip()
    host, _, port = first.rpartition(":")
    security = settings.security
    try:
        conn = await asyncio.wait_for(
            create_conn(host, int(port), client_id=settings.client_id, **kwargs), timeout_s
        )
    except ssl.SSLCertVerificationError as exc:
        reason = exc.verify_message or str(exc)
        if "mismatch" in reason or "not valid for" in reason:
            return (
                f"the broker's certificate is not valid for the name {host!r} ({reason}); connect by a name "
                "the certificate holds (bootstrap.servers), or have the certificate reissued"
            )
        return (
            f"the broker's certificate is not trusted ({reason}); set ssl.ca.location to the CA that "
            f"signed it (now {security.ca_location or 'the system CAs'}), or renew an expired certificate"
        )
    except ssl.SSLError as exc:
        words = refusal_words(exc)
        if words is not None:  # a certificate alert from the broker
            return f"the TLS handshake failed: {words}; {tls_fix(settings, words)}"
        return (
            f"the TLS handshake failed ({exc.reason or exc}); check security.protocol ({security.protocol}) "
            "against the listener, and whether it requires a client certificate (ssl.certificate.location)"
        )
    except errors.UnsupportedSaslMechanismError as exc:
        return f"the broker does not accept sasl.mechanism {security.mechanism} ({exc}); set one it enables"
    except errors.KafkaConnectionError as exc:
        cause = exc.__cause__ or exc.__context__
        words = refusal_words(cause) if cause is not None else None
        if words is not None:  # TLS 1.3: the broker's alert arrives after the client's handshake
            return f"the TLS handshake failed: {words}; {tls_fix(settings, words)}"
        if isinstance(cause, ssl.SSLError):
            return f"the TLS handshake failed ({cause}); check security.protocol and the TLS files"
        return None
    except errors.KafkaError as exc:
        if "Authentication" in type(exc).__name__ or "uthentication" in str(exc):
            return (
                f"authentication as {security.username!r} with {security.mechanism} failed "
                f"({type(exc).__name__}); check sasl.username and sasl.password"
            )
        return f"{type(exc).__name__}: {exc}"
    except (OSError, TimeoutError):
        return None
    with contextlib.suppress(Exception):
        conn.close()
    return None
