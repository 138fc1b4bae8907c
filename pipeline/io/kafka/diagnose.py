"""Why the brokers refuse a client, in words: aiokafka reports a refused TLS handshake or SASL
authentication only as "unable to bootstrap" and logs the cause. When a client cannot start, one direct
connection to the first bootstrap server finds the cause, so the component stops with one clear error
(what, and what to change) instead of retrying a password that will never work.

A client certificate is judged by its own connection first (:func:`certificate_refusal`), one that
sends nothing: with TLS 1.3 the broker judges the client's certificate after the client's handshake has
ended, and a client that sends a request at once (aiokafka sends ApiVersions) races the broker's refusal.
The broker sends its alert and closes; with bytes of the client still unread (the rest of the client's
handshake, or that request) its close is a reset. If the client's request is written after the reset
arrived, the write fails and asyncio drops the connection without reading the alert already received:
the refusal looks like a broken connection (in a reproduction with a server that closes so, 135 of 200
connections). A connection that writes nothing only reads, and reads the alert before the reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from aiokafka import errors
from aiokafka.conn import create_conn

from pipeline.io.kafka.access import tls_fix, token_fix
from pipeline.io.kafka.clients import connection
from pipeline.io.kafka.security import KafkaSecurity
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.tls import refusal_words


async def refusal(settings: KafkaSettings, timeout_s: float = 15.0) -> str | None:
    """What the first bootstrap server objects to in this client's TLS or SASL settings; None when it
    accepts the client or cannot be reached at all (then retrying may help)."""
    kwargs = connection(settings)
    first = str(kwargs.pop("bootstrap_servers")).split(",")[0].strip()
    host, _, port = first.rpartition(":")
    security = settings.security
    if judges_certificate(security):
        words = await certificate_refusal(host, int(port), kwargs["ssl_context"], timeout_s)
        if words is not None:
            return f"the TLS handshake failed: {words}; {tls_fix(settings, words)}"
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
            if security.oauth_token_file is not None:
                return (
                    f"the brokers refuse the OAUTHBEARER token ({type(exc).__name__}); {token_fix(security)}"
                )
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


# How long a connection that sends nothing waits for the broker's verdict on its client certificate:
# a broker judges it as soon as the handshake's last flight arrives, in milliseconds; a verdict later
# than this is missed here and left to the request's connection (which may or may not see it).
CERTIFICATE_VERDICT_S = 5.0
_TICKET_LOOK_S = 0.05


def judges_certificate(security: KafkaSecurity) -> bool:
    """Whether the brokers judge this client by a certificate after the TLS handshake (TLS 1.3): it
    presents one, or it uses TLS without SASL (a listener that requires one says so by an alert)."""
    return security.uses_tls and (security.certificate_location is not None or not security.uses_sasl)


async def certificate_refusal(
    host: str, port: int, context: ssl.SSLContext, timeout_s: float, verdict_s: float | None = None
) -> str | None:
    """What the broker at ``host:port`` says of this client's certificate (:func:`~.tls.refusal_words`
    of its alert), on a connection that sends nothing (see the module docstring); None when it accepts
    the certificate or says nothing about it. A Kafka broker never speaks first, so what arrives is an
    alert, a TLS 1.3 session ticket (sent once the broker has accepted the client's handshake: no need
    to wait on) or nothing until ``verdict_s`` (default :data:`CERTIFICATE_VERDICT_S`). Anything else
    (unreachable, a broker this client does not trust) is left to the request's connection, which says
    it better."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), timeout_s)
    except ssl.SSLCertVerificationError:
        return None
    except ssl.SSLError as exc:  # TLS 1.2: the broker judges the certificate within the handshake
        return refusal_words(exc)
    except (OSError, TimeoutError):
        return None
    try:
        tls = writer.get_extra_info("ssl_object")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (CERTIFICATE_VERDICT_S if verdict_s is None else verdict_s)
        while loop.time() < deadline:
            try:  # an alert that came with the handshake's end is raised by the first read
                await asyncio.wait_for(reader.read(1), _TICKET_LOOK_S)
                return None  # closed without a word (or spoke, which no Kafka broker does first)
            except TimeoutError:  # a ticket is consumed by the TLS layer, not returned: looked for here
                failed = reader.exception()  # the alert arrived as the wait ended
                if failed is not None:
                    return refusal_words(failed)
                version = tls.version() if isinstance(tls, ssl.SSLObject) else None
                if version is not None and version != "TLSv1.3":
                    return None  # TLS 1.2: the verdict was part of the handshake, which passed
                if tls.session is not None and tls.session.has_ticket:
                    return None
            except ssl.SSLError as exc:
                return refusal_words(exc)
            except OSError:
                return None
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
