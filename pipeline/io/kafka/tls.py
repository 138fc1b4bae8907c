"""The TLS side of every Kafka client: one :class:`ClientTLS` context per client, which picks up a renewed
client certificate and tells its owner when a handshake is refused.

A client certificate expires (or is revoked) while the component runs; the brokers then refuse it at
the TLS handshake of the next connection the client opens. aiokafka only logs that and retries, for
ever, with the context it was given. Two things are needed instead, and both live in the context,
because it sees every connection the client opens (asyncio wraps each in ``wrap_bio``):

- **Renewal without a restart.** The certificate and key files are read again (``load_cert_chain``
  into the same context: connections already open keep theirs, new ones get the new pair) when their
  modification time, size or inode changes (cert-manager renewing a Secret mounted as files), and at the
  next connection after any refusal. A pair that does not load (the files caught half-written) is not
  used: the context keeps the pair it has and tries again at the next connection.
- **A refusal told, in words.** Each connection's :class:`ssl.SSLObject` is ours; an error it meets in
  the handshake or in a read is a refusal when the brokers sent a certificate alert (with TLS 1.3 the
  client's handshake is done before the broker checks the client's certificate, so the broker's alert
  arrives at the first read) or when this client did not trust the broker's certificate. The context
  calls its listeners with what was refused and why (:func:`refusal_words`), see
  :func:`pipeline.io.kafka.access.on_tls_refused`.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.io.kafka.certificate_dates import CertificateDatesError, read_validity

log = logging.getLogger("kubetape.kafka")

_ALERT = re.compile(r"ALERT_([A-Z_]+)")
_ALERT_WORDS = {
    "CERTIFICATE_EXPIRED": "the brokers refuse this client's certificate: expired (or not yet valid)",
    "CERTIFICATE_REVOKED": "the brokers refuse this client's certificate: revoked",
    "UNKNOWN_CA": "the brokers do not trust the CA that signed this client's certificate (unknown CA)",
    "CERTIFICATE_REQUIRED": "the brokers require a client certificate and this client sent none",
    "BAD_CERTIFICATE": (
        "the brokers refuse this client's certificate (bad certificate: expired, not yet valid, or not "
        "signed by a CA they trust)"
    ),
    "CERTIFICATE_UNKNOWN": (
        "the brokers refuse this client's certificate (certificate unknown: expired, not yet valid, or "
        "not signed by a CA they trust)"
    ),
    "UNSUPPORTED_CERTIFICATE": "the brokers refuse this client's certificate (unsupported certificate)",
    "ACCESS_DENIED": "the brokers refuse this client's certificate (access denied)",
    "HANDSHAKE_FAILURE": (
        "the brokers ended the TLS handshake (handshake failure: no common protocol or cipher, or a "
        "client certificate they refuse)"
    ),
}


def refusal_words(exc: BaseException) -> str | None:
    """What a TLS error says was refused, in words with TLS's own name for it in parentheses; None when
    it is not a refusal (a connection merely broken, or asyncio's want-more-data signals)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or str(exc)
        return f"this client does not trust the brokers' certificate ({reason})"
    if not isinstance(exc, ssl.SSLError) or isinstance(
        exc, ssl.SSLWantReadError | ssl.SSLWantWriteError | ssl.SSLZeroReturnError | ssl.SSLEOFError
    ):
        return None
    alert = _ALERT.search(str(getattr(exc, "reason", None) or exc))  # made by hand, it has none
    if alert is None or alert.group(1) not in _ALERT_WORDS:
        return None
    return f"{_ALERT_WORDS[alert.group(1)]} (TLS alert {alert.group(1).lower().replace('_', ' ')})"


def certificate_validity(path: Path, now: datetime | None = None) -> str:
    """``valid from … until …`` of the certificate the file holds now, and whether it is expired or not
    yet valid at ``now``; empty when the file cannot be read as one (the message then goes without)."""
    try:
        validity = read_validity(path)
    except (OSError, CertificateDatesError) as exc:
        log.debug("the dates of the Kafka client certificate %s are left out: %s", path, exc)
        return ""
    state = validity.state(datetime.now(UTC) if now is None else now)
    return f"valid from {_utc(validity.not_before)} until {_utc(validity.not_after)}: {state}"


def _utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


class _WatchedTLS(ssl.SSLObject):
    """One connection's TLS: an error in the handshake or a read is shown to the context first."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except ssl.SSLError as exc:
            _tell(self, exc)
            raise

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # ssl.SSLObject's names
        try:
            return super().read(len, buffer)
        except ssl.SSLError as exc:
            _tell(self, exc)
            raise


def _tell(sslobj: ssl.SSLObject, exc: ssl.SSLError) -> None:
    context = sslobj.context
    if isinstance(context, ClientTLS):
        context.met(exc)


_Stamp = tuple[tuple[int, int, int], ...]
RefusalListener = Callable[[str], None]


class ClientTLS(ssl.SSLContext):
    """A client's TLS context (see the module docstring); built by :meth:`create`."""

    sslobject_class = _WatchedTLS
    _pair: tuple[Path, Path | None, str | None] | None
    _stamp: _Stamp | None
    _reload_due: bool
    _warned: object
    _listeners: list[RefusalListener]
    last_refusal: str | None

    @classmethod
    def create(
        cls,
        *,
        ca: Path | None,
        certificate: Path | None,
        key: Path | None,
        key_password: str | None,
        check_hostname: bool,
    ) -> ClientTLS:
        """What :func:`ssl.create_default_context` makes for a client, plus the client certificate;
        a file that does not load raises (``ssl.SSLError`` or ``OSError``) here, at start."""
        context = cls(ssl.PROTOCOL_TLS_CLIENT)  # verify_mode CERT_REQUIRED, check_hostname on
        if ca is not None:
            context.load_verify_locations(str(ca))
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        context.check_hostname = check_hostname
        context._pair = (certificate, key, key_password) if certificate is not None else None
        context._stamp = context._warned = None
        context._reload_due = False
        context._listeners = []
        context.last_refusal = None
        if context._pair is not None:
            stamp = context._stamp_now()
            context._load()
            context._stamp = stamp
        return context

    @property
    def certificate(self) -> Path | None:
        return self._pair[0] if self._pair is not None else None

    def on_refused(self, listener: RefusalListener) -> None:
        """Call ``listener`` with :func:`refusal_words` at each refused handshake of a connection."""
        self._listeners.append(listener)

    def met(self, exc: BaseException) -> None:
        """A connection of this context met ``exc``: if it is a refusal, the pair is read again at the
        next connection and the listeners are told. Runs inside asyncio's TLS protocol: never raises."""
        words = refusal_words(exc)
        if words is None:
            return
        self._reload_due = True
        self.last_refusal = words
        for listener in list(self._listeners):
            try:
                listener(words)
            except Exception:
                log.exception("a TLS refusal listener failed")

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        self.refresh()  # each new connection: asyncio wraps every one here
        return super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)

    def refresh(self) -> bool:
        """Load the certificate and key again if their files changed or a refusal was met since the
        last load; True when a new pair is in use from here on."""
        if self._pair is None:
            return False
        try:
            stamp = self._stamp_now()
        except OSError as exc:
            self._warn_once(f"unreadable: {exc}", f"cannot read them ({exc.strerror or exc})")
            return False
        if stamp == self._stamp and not self._reload_due:
            return False
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(*self._pair)  # the pair must load whole
            self._load()
        except (ssl.SSLError, OSError) as exc:
            self._warn_once(stamp, str(exc))
            return False
        changed = stamp != self._stamp
        self._stamp, self._reload_due = stamp, False
        if changed:
            certificate = self._pair[0]
            validity = certificate_validity(certificate)
            log.info(
                "Kafka client certificate %s read again for new connections%s",
                certificate,
                f" ({validity})" if validity else "",
            )
        return changed

    def _load(self) -> None:
        assert self._pair is not None
        certificate, key, password = self._pair
        self.load_cert_chain(str(certificate), str(key) if key else None, password=password)

    def _stamp_now(self) -> _Stamp:
        assert self._pair is not None
        stamps = []
        for path in self._pair[:2]:
            if isinstance(path, Path):
                found = os.stat(path)  # follows symlinks: a mounted Secret swaps its ..data link
                stamps.append((found.st_mtime_ns, found.st_size, found.st_ino))
        return tuple(stamps)

    def _warn_once(self, state: object, problem: str) -> None:
        """Warn once per state of the files, not at every connection."""
        if self._warned == state:
            return
        self._warned = state
        assert self._pair is not None
        log.warning(
            "cannot load the Kafka client certificate %s with its key %s (%s); new connections keep "
            "the certificate loaded before, and the files are tried again at the next one",
            self._pair[0],
            self._pair[1],
            problem,
        )
