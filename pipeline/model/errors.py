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
