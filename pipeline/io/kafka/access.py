"""Whether the brokers accept a running component, in one place: who is denied what, said once.

At start, a denial is a ConfigError (:func:`denied`): the component stops and says which grant is
missing. After start the same denial is an outage: an operator removed an ACL or rotated a credential
while the component ran, and will put it back. So the component must neither crash nor spin: it logs
one clear error (a :class:`~pipeline.model.errors.BrokerRefusedError`), turns ``/readyz`` false, retries
with a growing delay, keeps what it has not delivered, and says when the brokers accept it again
(:class:`BrokerAccess`).

Credentials are checked when a connection opens: a password changed (or a user removed) on the brokers
shows when a client opens its next connection (a broker restart, a leader moved, an idle connection
dropped, or the broker ending the session at ``connections.max.reauth.ms``). aiokafka neither
re-authenticates nor raises then: it logs the refusal and retries with the password it was built with,
for ever. :func:`on_login_refused` tells the component instead. It then tries the credentials as they
are now on one connection (``sasl.password.file`` or the OAUTHBEARER token file read anew), with a growing
delay, and once the brokers take them the watcher's producer gets them (:func:`use_password`: its batches
stay in it) and the sink joins its group again with clients built with them. Writing the current
password into the file (a Secret mounted as a file is updated in place) is what ends the outage.

Mutual TLS is the same outage by other means: a client certificate that expired, was revoked or was
renewed by a CA the brokers do not trust is refused at the TLS handshake of the next connection, which
aiokafka also only logs. The client's TLS context tells the component (:func:`on_tls_refused`, with what
TLS said: :mod:`pipeline.io.kafka.tls`), which turns not ready with :func:`tls_message` and retries as
above; the context reads a renewed certificate and key again for its next connections by itself.

aiokafka reports the denials as exceptions of the request that met them: a producer's send as
``TopicAuthorizationFailedError(topic)``, a consumer's fetch the same, the group's join, heartbeat and
commits as ``GroupAuthorizationFailedError(group)`` (raised by every later ``getmany``: its consumer
does not recover, see :mod:`pipeline.io.kafka.sink_member`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.conn import CloseReason

from pipeline.io.kafka.oauth import token_expiry
from pipeline.io.kafka.security import KafkaSecurity
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.tls import ClientTLS, certificate_validity
from pipeline.model.errors import BrokerRefusedError, ConfigError

RETRY_MIN_S = 0.5
RETRY_MAX_S = 10.0
_LOGIN = "\0login"  # the refused "resource" of a login: never a topic's or a group's name


def principal_of(settings: KafkaSettings) -> str:
    """The principal the brokers know this client as, as ACLs name it (``User:sink``)."""
    security = settings.security
    if security.mechanism == "OAUTHBEARER" and security.oauth_token_file is not None:
        return f"the principal of the token in {security.oauth_token_file}"  # sasl.username is unused
    if security.username:
        return f"User:{security.username}"
    if security.certificate_location:
        return f"the principal of the certificate {security.certificate_location}"
    return "the principal of this client"


def denial_message(settings: KafkaSettings, operation: str, resource: str, name: str) -> str:
    """Who is denied what on which topic or group, and what to do about it."""
    return (
        f"Kafka at {settings.describe()} denies {principal_of(settings)} the operation {operation} on "
        f"{resource} {name!r}; grant it (an ACL, or a KafkaUser's acls) or run this component as a "
        "principal that has it (docs/production-kafka.md lists what each needs)"
    )


def denied(settings: KafkaSettings, operation: str, name: str, resource: str = "topic") -> ConfigError:
    """The error of an ACL denial at start."""
    return ConfigError(denial_message(settings, operation, resource, name))


def login_message(settings: KafkaSettings) -> str:
    """The brokers no longer accepting this client's credentials, and what to do about it."""
    security = settings.security
    if security.password_file is not None:
        fix = (
            f"write the current password into sasl.password.file {security.password_file} (read again "
            "at every retry: a Secret mounted as a file is picked up without a restart)"
        )
    elif security.oauth_token_file is not None:
        fix = token_fix(security)
    else:
        fix = (
            "set the current password and restart this component (sasl.password is read once; name a "
            "file with sasl.password.file to rotate without a restart)"
        )
    return (
        f"Kafka at {settings.describe()} no longer accepts the credentials of {principal_of(settings)} "
        f"(its password was changed or the user removed on the brokers, or its token expired); {fix}"
    )


def tls_message(settings: KafkaSettings, problem: str) -> str:
    """The brokers refusing this client's TLS connection (``problem``: :func:`~.tls.refusal_words`) after
    start, the file concerned and what to do about it."""
    return (
        f"Kafka at {settings.describe()} refuses the TLS connection of {principal_of(settings)}: "
        f"{problem}; {tls_fix(settings, problem)}"
    )


def tls_fix(settings: KafkaSettings, problem: str) -> str:
    """What to do about a refused TLS connection, naming the file concerned."""
    security = settings.security
    certificate = security.certificate_location
    if problem.startswith("this client does not trust"):
        fix = (
            "set ssl.ca.location to the CA that signed the brokers' certificate (now "
            f"{security.ca_location or 'the system CAs'}; read at start, so restart after changing it), or "
            "have the brokers' certificate renewed"
        )
    elif certificate is not None:
        validity = certificate_validity(certificate)
        fix = (
            f"write a renewed certificate, signed by a CA the brokers trust, into ssl.certificate.location "
            f"{certificate} and its key into ssl.key.location {security.key_location} (read again when "
            "they change and at every retry: a Secret renewed by cert-manager is picked up without a "
            "restart)"
        ) + (f"; that file now holds a certificate {validity}" if validity else "")
    else:
        fix = (
            "set ssl.certificate.location and ssl.key.location to a client certificate the brokers trust "
            "and restart"
        )
    return fix


def token_fix(security: KafkaSecurity) -> str:
    """What to do about a refused OAUTHBEARER token, with its expiry when the file holds a JWT."""
    path = security.oauth_token_file
    expiry = token_expiry(path) if path is not None else ""
    return (
        f"write a current token into sasl.oauthbearer.token.file {path} (read again at every login and "
        "retry: a token refreshed on disk is picked up without a restart)"
    ) + (f"; the token that file now holds {expiry}" if expiry else "")


def on_tls_refused(client: Any, callback: Callable[[str], None]) -> None:
    """Call ``callback`` with what TLS said whenever a handshake of a connection ``client`` (an aiokafka
    producer, consumer or admin client) opens is refused: an expired or revoked client certificate, one
    the brokers' CA did not sign, a broker's certificate this client does not trust. aiokafka only logs
    that and retries; the client's :class:`~.tls.ClientTLS` context sees each connection's handshake and
    first reads, which is what is hooked here (it also reads a renewed certificate again by itself)."""
    inner: Any = getattr(client, "_client", None) or getattr(client, "client", None)
    context = getattr(inner, "_ssl_context", None)
    if isinstance(context, ClientTLS):
        context.on_refused(callback)


def on_login_refused(client: Any, callback: Callable[[], None]) -> None:
    """Call ``callback`` whenever the brokers refuse to authenticate a connection ``client`` (an aiokafka
    producer, consumer or admin client) opens. aiokafka only logs that and retries with the credentials
    it was built with; it does tell the connection's owner why the connection closed (its close
    callback, ``CloseReason.AUTH_FAILURE``), which is what is hooked here."""
    inner: Any = getattr(client, "_client", None) or getattr(client, "client", None)  # producer: .client
    closed = getattr(inner, "_on_connection_closed", None)
    if closed is None:  # not an aiokafka client (a test's stand-in): nothing to hook
        return

    def on_closed(conn: Any, reason: Any) -> None:
        closed(conn, reason)
        if reason == CloseReason.AUTH_FAILURE:
            callback()

    inner._on_connection_closed = on_closed


def use_password(client: Any, security: KafkaSecurity) -> None:
    """Give a running aiokafka client the password as it is now (``sasl.password.file`` read again) for
    the connections it opens from here on; what it holds (a producer's batches, a consumer's
    membership) stays. aiokafka has no call for it: its client keeps the password it opens connections
    with in one attribute. (An OAUTHBEARER token file is read at every login already.)"""
    inner: Any = getattr(client, "_client", None) or getattr(client, "client", None)
    password = security.current_password()
    if inner is not None and password is not None and hasattr(inner, "_sasl_plain_password"):
        inner._sasl_plain_password = password.reveal()


def authorization_error(exc: BaseException) -> tuple[str, str] | None:
    """``(resource kind, name)`` when ``exc`` is the brokers denying this principal something."""
    name = str(exc.args[0]) if exc.args else "?"
    if isinstance(exc, kafka_errors.TopicAuthorizationFailedError):
        return "topic", name.strip("{}'\"")
    if isinstance(exc, kafka_errors.GroupAuthorizationFailedError):
        return "consumer group", name
    if isinstance(exc, kafka_errors.ClusterAuthorizationFailedError):
        return "cluster", "kafka-cluster"
    return None


class BrokerAccess:
    """Whether the brokers accepted this component at its last try (:attr:`ok`, for ``/readyz``),
    logged on each change only, and how long to wait before trying again (doubling up to
    ``RETRY_MAX_S``)."""

    def __init__(
        self,
        settings: KafkaSettings,
        log: logging.Logger,
        what: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``what``: the component's use of Kafka in messages (``the sink's consumer``)."""
        self._settings = settings
        self._log = log
        self._what = what
        self._clock = clock
        self.error: BrokerRefusedError | None = None
        """The outage going on (None while the brokers accept this component)."""
        self.denials = 0
        self._denied_at = 0.0
        self._delay = RETRY_MIN_S
        self._denied_name = ""
        self._cause = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def login_refused(self) -> bool:
        """Whether the outage going on is the brokers refusing this component's credentials."""
        return self.error is not None and self._denied_name == _LOGIN

    def refused(self, operation: str, resource: str, name: str, consequence: str) -> float:
        """Record a denial; the first of an outage is logged as one error. Returns the delay to wait."""
        return self._refuse(name, denial_message(self._settings, operation, resource, name), consequence)

    def refused_login(self, consequence: str, tls: str | None = None) -> float:
        """Record the brokers refusing this component's credentials, as :meth:`refused`: its password or
        token, or with ``tls`` (what TLS said, :func:`~.tls.refusal_words`) its TLS connection."""
        message = login_message(self._settings) if tls is None else tls_message(self._settings, tls)
        return self._refuse(_LOGIN, message, consequence, cause=tls or "credentials")

    def _refuse(self, name: str, message: str, consequence: str, cause: str = "") -> float:
        """``cause``: what a login refusal is about (the credentials, or what TLS said); the message may
        say more that changes between retries (the certificate file's dates), which is no new outage."""
        self.denials += 1
        self._denied_at = self._clock()
        # one error per outage; a login refused during a denial (or the reverse), or refused for another
        # reason (a renewed certificate the brokers refuse too, but otherwise), is a new one to tell
        login_changed = name == _LOGIN and self._denied_name == _LOGIN and cause != self._cause
        if self.error is None or (name == _LOGIN) != (self._denied_name == _LOGIN) or login_changed:
            if self.error is None:
                self._delay = RETRY_MIN_S
            self.error = BrokerRefusedError(
                f"{self._what}: {message}. Not ready; {consequence}, retrying with backoff until the "
                "brokers accept it again"
            )
            self._log.error("%s", self.error)
        self._denied_name = name
        self._cause = cause
        delay = self._delay
        self._delay = min(self._delay * 2, RETRY_MAX_S)
        return delay

    def quiet_for(self) -> float:
        """Seconds since the last denial (0 while never denied)."""
        return 0.0 if self.denials == 0 else self._clock() - self._denied_at

    def accepted(self, names: Iterable[str] | None = None) -> None:
        """The brokers took a request that needs what was denied: ready again. ``names``: the topics or
        groups the request used; one that did not use the denied one proves nothing."""
        if names is not None and self._denied_name not in names and self._denied_name != _LOGIN:
            return
        if self.error is not None:
            self.error = None
            self._log.info(
                "%s: Kafka at %s accepts %s again; ready",
                self._what,
                self._settings.bootstrap,
                principal_of(self._settings),
            )
