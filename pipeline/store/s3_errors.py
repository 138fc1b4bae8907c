"""What a failed request to the object store means to the user: a missing bucket or refused
credentials are a configuration error, any other failure an outage the sink waits out."""

from __future__ import annotations

import re

from obstore import exceptions as obs_errors

from pipeline.model.errors import ConfigError, KubetapeError, TransientError
from pipeline.store.s3_connection import credentials_hint, uses_web_identity

NOT_FOUND = (obs_errors.NotFoundError, FileNotFoundError)
"""obstore raises the builtin FileNotFoundError for a missing object (its NotFoundError class is kept
for the types); both mean "no such key", or a missing bucket (told apart by the message)."""

# A refusal is an HTTP status (401/403 with its reason phrase) or an S3 error code, never a bare
# "403" anywhere in the text: the endpoint's port (127.0.0.1:40321) or a duration carries digits
# too, and a connection refused there is an outage, not a credentials problem.
_REFUSED = re.compile(
    r"\b(?:401 Unauthorized|403 Forbidden)\b"
    r"|<Code>(?:AccessDenied|SignatureDoesNotMatch|InvalidAccessKeyId)</Code>"
)


def explain_s3_failure(url: str, bucket: str, endpoint: str, exc: Exception) -> KubetapeError | None:
    """What a failed request for ``url`` (in ``bucket`` at ``endpoint``) means to the user (what,
    where, what to do): a missing bucket or refused credentials are a ConfigError, any other failure of
    the object store an outage (TransientError: the sink waits and says "not ready"). None for the
    answers the store handles itself: not found, already exists, a condition that failed."""
    text = str(exc)
    if "NoSuchBucket" in text:
        return ConfigError(f"{url}: bucket {bucket!r} does not exist at {endpoint}; create it or fix the URL")
    if isinstance(exc, (*NOT_FOUND, obs_errors.AlreadyExistsError, obs_errors.PreconditionError)):
        return None
    if isinstance(exc, (obs_errors.PermissionDeniedError, obs_errors.UnauthenticatedError)) or (
        _refused_access(text)
    ):
        return ConfigError(
            f"{url}: access denied by {endpoint} ({_first_line(exc)}); check " + credentials_hint()
        )
    return TransientError(
        f"{url}: the object store at {endpoint} did not answer ({_first_line(exc)}); "
        "check that it is running and AWS_ENDPOINT_URL"
        + ("; the token exchange goes to STS first (AWS_STS_ENDPOINT)" if uses_web_identity() else "")
    )


def _refused_access(text: str) -> bool:
    """Whether an object-store error says the credentials were refused (not that nothing answered)."""
    return _REFUSED.search(text) is not None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
