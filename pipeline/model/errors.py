"""The one exception tree of kubetape.

Every error a user can hit derives from :class:`KubetapeError`. Whether retrying can help is a property
of the class (``retriable``), so callers never parse messages to decide. Messages say what was wrong,
where (file, offset, object key, config path) and what to do.
"""

from __future__ import annotations


class KubetapeError(Exception):
    """Base of every kubetape error."""

    retriable: bool = False


class ConfigError(KubetapeError):
    """A settings file, tracer config or command-line value is invalid. Fix the input and rerun."""


class FormatError(KubetapeError):
    """Bytes (a message, a trace, a segment) do not decode: malformed, truncated or of an unknown version."""


class UnknownVersionError(FormatError):
    """The input carries a format version this build does not know."""


class StackError(KubetapeError):
    """The local stack (Kafka broker, KWOK cluster) could not be built, started or reached."""


class MissingToolError(StackError):
    """A tool needed to build the local stack (java, mvn, go) is not installed."""


class TransientError(KubetapeError):
    """A dependency (broker, apiserver) is temporarily unavailable; retrying later can succeed."""

    retriable = True


class BrokerRefusedError(TransientError):
    """The Kafka brokers refused a component that was running: its credentials (a password changed or a
    user removed: authentication) or its ACLs (a grant removed: authorization). It is not ready, keeps
    what it has not delivered and retries with backoff until the brokers accept it again."""

    retriable = True


# ---- the Kubernetes API ------------------------------------------------------------------------------
# HTTP statuses are mapped to these once, in pipeline.io.kube.status; callers catch classes,
# never compare status numbers.
class KubeApiError(KubetapeError):
    """The apiserver refused a request; ``status`` is the HTTP status (0 when none was received)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class ObjectRejectedError(KubeApiError):
    """The apiserver rejected this request (invalid, forbidden, conflicting); retrying will not help."""


class NotFoundError(ObjectRejectedError):
    """The object (or the resource) does not exist (404)."""


class ConflictError(ObjectRejectedError):
    """The object exists already, or changed since it was read (409)."""


class AccessDeniedError(ObjectRejectedError):
    """The credentials were refused or RBAC does not allow the request (401, 403)."""


class UnknownKindError(KubeApiError):
    """The apiserver serves no resource for this apiVersion/kind (a missing CRD or API group)."""


class ApiUnavailableError(KubeApiError, TransientError):
    """The apiserver is overloaded or unreachable (429, 5xx, timeout, connection error); retry later."""

    retriable = True


class GoneError(KubeApiError, TransientError):
    """The resourceVersion a list or watch resumed from is too old (410 Gone): only a re-list can go on."""

    retriable = True


class WatchBrokenError(ApiUnavailableError):
    """A watch or list could not go on (the connection dropped, the apiserver answered something other
    than the objects); changes may have been missed, so the watcher re-lists."""


# ---- replay ------------------------------------------------------------------------------------------
class RewriteError(KubetapeError):
    """A recorded object cannot be turned into a simulated one (reported per object; the replay goes on)."""
