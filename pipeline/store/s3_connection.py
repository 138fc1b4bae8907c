"""How the S3 store reaches its server: the client settings, credentials and retries.

**Credentials** come from the environment as the AWS tools read it: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` (a local or
non-AWS server; ``http://`` is allowed then), web identity and instance metadata; without keys in the
environment, the ``[AWS_PROFILE or default]`` section of ``~/.aws/credentials``
(``AWS_SHARED_CREDENTIALS_FILE``).
"""

from __future__ import annotations

import configparser
import os
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.model.errors import ConfigError
from pipeline.store.store_url import S3Location

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

# Requests are retried every few seconds for ``retry_s`` (the sink: long enough to ride out a restart
# of the server); obstore's default backoff spent its retries within 4 s of a refused connection. The
# health probe answers at once instead, so /readyz shows an outage while writes wait.
_BACKOFF = {"init_backoff": timedelta(milliseconds=200), "max_backoff": timedelta(seconds=3), "base": 2}
IMPATIENT: RetryConfig = {"max_retries": 0, "retry_timeout": timedelta(seconds=3)}
"""The health probe's retries: none, so an outage shows at once."""


def retries(within_s: float) -> RetryConfig:
    """Retry a request every few seconds for ``within_s``."""
    return {"max_retries": 10_000, "retry_timeout": timedelta(seconds=within_s), "backoff": _BACKOFF}  # type: ignore[typeddict-item]


def connection_config(location: S3Location) -> tuple[S3Config, ClientConfig]:
    """S3 settings from the environment (and the shared credentials file when it has no keys)."""
    env = os.environ
    config: S3Config = {
        "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
    }
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    client: ClientConfig = {"connect_timeout": timedelta(seconds=5)}
    if endpoint:
        config["endpoint"] = endpoint
        client["allow_http"] = endpoint.startswith("http://")
    if not env.get("AWS_ACCESS_KEY_ID") and not uses_web_identity():
        config.update(_shared_credentials())  # type: ignore[typeddict-item]  # keys of S3Config only
    return config, client


def uses_web_identity() -> bool:
    """Whether the store authenticates by a web-identity token (IRSA, GKE Workload Identity):
    ``AWS_WEB_IDENTITY_TOKEN_FILE`` and ``AWS_ROLE_ARN`` set and no static key. obstore then trades
    the token for short-lived keys with STS AssumeRoleWithWebIdentity (over HTTPS, at
    ``https://sts.{region}.amazonaws.com`` or ``AWS_STS_ENDPOINT``) and renews them before they
    expire; kubetape passes no keys of its own then, since keys in the config would take precedence
    over the token (a stray ``~/.aws/credentials`` in an image must not shadow the pod's role)."""
    env = os.environ
    return (
        not env.get("AWS_ACCESS_KEY_ID")
        and bool(env.get("AWS_WEB_IDENTITY_TOKEN_FILE"))
        and bool(env.get("AWS_ROLE_ARN"))
    )


def credentials_hint() -> str:
    """What to check when the server refuses the credentials, for the way the store authenticates."""
    if uses_web_identity():
        return (
            "AWS_ROLE_ARN, the token in AWS_WEB_IDENTITY_TOKEN_FILE and the role's trust policy "
            "(web identity)"
        )
    return "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or ~/.aws/credentials)"


def _shared_credentials() -> dict[str, str]:
    path = Path(env_file) if (env_file := os.environ.get("AWS_SHARED_CREDENTIALS_FILE")) else None
    path = path or Path.home() / ".aws" / "credentials"
    profile = os.environ.get("AWS_PROFILE", "default")
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
    except configparser.Error as exc:
        raise ConfigError(
            f"{path}: unreadable AWS credentials file ({exc}); fix it or set AWS_ACCESS_KEY_ID"
        ) from None
    if not parser.has_section(profile):
        return {}
    section = parser[profile]
    found = {
        "access_key_id": section.get("aws_access_key_id"),
        "secret_access_key": section.get("aws_secret_access_key"),
        "token": section.get("aws_session_token"),
    }
    return {k: v for k, v in found.items() if v}
