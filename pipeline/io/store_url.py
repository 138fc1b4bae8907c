"""Where a segment store lives, from one string: a plain path, ``file:///path`` or ``s3://bucket/prefix``.

Every command that takes a segment store (``sink``, ``export``, ``replay --segments``, ``inspect``, the
Simulation's segment source) parses it here, so they accept the same forms and fail with the same
messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from pipeline.io.segment_store import LocalSegmentStore, SegmentStore
from pipeline.model.errors import ConfigError

_EXAMPLES = "e.g. /var/lib/kubetape/segments, file:///data/segments or s3://my-bucket/kubetape/prod"


@dataclass(frozen=True, slots=True)
class LocalLocation:
    """A directory on this machine."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True, slots=True)
class S3Location:
    """A prefix (no leading or trailing ``/``, maybe empty) in an S3 bucket."""

    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


StoreLocation = LocalLocation | S3Location


def parse_store_url(text: str | Path, *, what: str = "--segment-store") -> StoreLocation:
    """The location ``text`` names; raises ConfigError (naming ``what``) for anything else."""
    if isinstance(text, Path):
        return LocalLocation(text.expanduser())
    raw = text.strip()
    if not raw:
        raise ConfigError(f"{what}: empty; give a directory or an s3:// URL ({_EXAMPLES})")
    if "://" not in raw:
        return LocalLocation(Path(raw).expanduser())
    parts = urlsplit(raw)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise ConfigError(
                f"{what}: {raw!r} is not a local file URL; use file:///absolute/path ({_EXAMPLES})"
            )
        return LocalLocation(Path(unquote(parts.path)))
    if scheme == "s3":
        bucket = parts.netloc
        if not _valid_bucket(bucket):
            raise ConfigError(
                f"{what}: {raw!r} has no valid bucket name (3-63 lowercase letters, digits, '.' or '-'); "
                f"use s3://bucket/prefix ({_EXAMPLES})"
            )
        if parts.query or parts.fragment:
            raise ConfigError(
                f"{what}: {raw!r}: s3:// URLs take no query or fragment; the endpoint and credentials "
                "come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (or ~/.aws/credentials)"
            )
        return S3Location(bucket, unquote(parts.path).strip("/"))
    raise ConfigError(
        f"{what}: unsupported scheme {scheme!r} in {raw!r}; use a path, file:// or s3:// ({_EXAMPLES})"
    )


def _valid_bucket(name: str) -> bool:
    return (
        3 <= len(name) <= 63
        and all(c.islower() or c.isdigit() or c in ".-" for c in name)
        and (name[0].isalnum() and name[-1].isalnum())
    )


def open_segment_store(
    location: StoreLocation | str | Path, *, must_exist: bool = False, retry_s: float = 15.0
) -> SegmentStore:
    """The store at ``location``. ``must_exist``: a reader (export, replay) refuses a local directory
    that is not there instead of creating an empty one (an object store prefix needs no creating).
    ``retry_s``: how long an object store request is retried while its server does not answer."""
    if not isinstance(location, LocalLocation | S3Location):
        location = parse_store_url(location)
    if isinstance(location, LocalLocation):
        if must_exist and not location.path.is_dir():
            raise ConfigError(
                f"segment store {location.path} does not exist; check --segment-store (a directory or "
                "an s3:// URL)"
            )
        return LocalSegmentStore(location.path)
    from pipeline.io.s3_store import S3SegmentStore  # obstore loads only for an object store

    return S3SegmentStore(location, retry_s=retry_s)
