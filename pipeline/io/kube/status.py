"""The one mapping of apiserver answers to :mod:`pipeline.model.errors`: an HTTP error status, or no
answer at all. A new status the apiserver may send is a change in this module only."""

from __future__ import annotations

import orjson

from pipeline.model.errors import (
    AccessDeniedError,
    ApiUnavailableError,
    ConflictError,
    GoneError,
    KubeApiError,
    NotFoundError,
    ObjectRejectedError,
)

_ERROR_FOR_STATUS: dict[int, type[KubeApiError]] = {
    401: AccessDeniedError,
    403: AccessDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    429: ApiUnavailableError,
}


def error_for_status(what: str, status: int, data: bytes) -> KubeApiError:
    """The exception for an HTTP error response (usually a ``Status`` object) to ``what`` was asked.

    429 and 5xx are retriable (:class:`ApiUnavailableError`), 410 means re-list (:class:`GoneError`),
    404/409/401/403 have their own classes, and any other status rejects the request
    (:class:`ObjectRejectedError`)."""
    reason, message = "", data[:500].decode("utf-8", "replace")
    try:
        decoded = orjson.loads(data)
        if isinstance(decoded, dict):
            reason = str(decoded.get("reason") or "")
            message = str(decoded.get("message") or message)
    except orjson.JSONDecodeError:
        pass
    text = f"{what}: HTTP {status}{' ' + reason if reason else ''}: {message}"
    error_class = _ERROR_FOR_STATUS.get(status)
    if error_class is None:
        error_class = ApiUnavailableError if status >= 500 else ObjectRejectedError
    return error_class(text, status=status, reason=reason)


def unreachable(what: str, exc: BaseException) -> ApiUnavailableError:
    """The exception for a request the apiserver did not answer (refused, reset, timed out)."""
    return ApiUnavailableError(
        f"{what}: apiserver unreachable ({type(exc).__name__}: {exc}); check that the cluster "
        f"is up and the kubeconfig points at it",
        reason=type(exc).__name__,
    )
