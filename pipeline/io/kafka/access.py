"""Whether the brokers accept a running component, in one place: who is denied what, said once.

At start, a denial is a ConfigError (:func:`denied`): the component stops and says which grant is
missing. After start the same denial is an outage: an operator removed an ACL or rotated a credential
while the component ran, and will put it back. So the component must neither crash nor spin: it logs
one clear error, turns ``/readyz`` false, retries with a growing delay, keeps what it has not delivered,
and says when the brokers accept it again (:class:`BrokerAccess`).

aiokafka reports the denials as exceptions of the request that met them: a producer's send as
``TopicAuthorizationFailedError(topic)``, a consumer's fetch the same, the group's join, heartbeat and
commits as ``GroupAuthorizationFailedError(group)`` (raised by every later ``getmany``: its consumer
does not recover, see :mod:`pipeline.io.kafka.sink_member`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from aiokafka import errors as kafka_errors

from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import ConfigError

RETRY_MIN_S = 0.5
RETRY_MAX_S = 10.0


def principal_of(settings: KafkaSettings) -> str:
    """The principal the brokers know this client as, as ACLs name it (``User:sink``)."""
    security = settings.security
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
        self.ok = True
        self.denials = 0
        self._denied_at = 0.0
        self._delay = RETRY_MIN_S
        self._denied_name = ""

    def refused(self, operation: str, resource: str, name: str, consequence: str) -> float:
        """Record a denial; the first of an outage is logged as one error. Returns the delay to wait."""
        self.denials += 1
        self._denied_at = self._clock()
        self._denied_name = name
        if self.ok:
            self.ok = False
            self._delay = RETRY_MIN_S
            self._log.error(
                "%s: %s. Not ready; %s, retrying with backoff until access is granted again",
                self._what,
                denial_message(self._settings, operation, resource, name),
                consequence,
            )
        delay = self._delay
        self._delay = min(self._delay * 2, RETRY_MAX_S)
        return delay

    def quiet_for(self) -> float:
        """Seconds since the last denial (0 while never denied)."""
        return 0.0 if self.denials == 0 else self._clock() - self._denied_at

    def accepted(self, names: Iterable[str] | None = None) -> None:
        """The brokers took a request that needs what was denied: ready again. ``names``: the topics or
        groups the request used; one that did not use the denied one proves nothing."""
        if names is not None and self._denied_name not in names:
            return
        if not self.ok:
            self.ok = True
            self._log.info(
                "%s: Kafka at %s accepts %s again; ready",
                self._what,
                self._settings.bootstrap,
                principal_of(self._settings),
            )
