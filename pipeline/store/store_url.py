"""Where a segment store lives, from one string: a plain path, ``file:///path`` or ``s3://bucket/prefix``.

Every command that takes a segment store (``sink``, ``export``, ``replay --segments``, ``inspect``, the
Simulation's segment source) parses it here, so they accept the same forms and fail with the same
messages.

**Fleets.** A store holds each recorded cluster apart, as a store of its own under
``clusters/<cluster id>/`` (a directory, or an object-store prefix), so a reader of cluster A never
lists or reads cluster B's segments. The default cluster (recordings made before fleets) is the store's
root, so old stores read as they did. :func:`stored_clusters` lists the clusters a store holds (one
delimited listing, not the segments), and :func:`cluster_location` picks one: a store holding several
clusters without ``--cluster`` is an error naming them, never a merge of their histories.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId, cluster_id_problem, parse_cluster_id
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.segment_store import SegmentStore, parse_segment_name

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

CLUSTERS_DIR = "clusters"
"""Under a store's root, one sub-store per recorded cluster other than the default one."""


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
    from pipeline.store.s3_store import S3SegmentStore  # obstore loads only for an object store

    return S3SegmentStore(location, retry_s=retry_s)


def cluster_store_location(location: StoreLocation, cluster: ClusterId) -> StoreLocation:
    """Where ``cluster``'s segments live inside the store at ``location`` (the root for the default one)."""
    if cluster == DEFAULT_CLUSTER:
        return location
    if isinstance(location, LocalLocation):
        return LocalLocation(location.path / CLUSTERS_DIR / cluster)
    return S3Location(location.bucket, "/".join(p for p in (location.prefix, CLUSTERS_DIR, cluster) if p))


def stored_clusters(location: StoreLocation | str | Path) -> list[ClusterId]:
    """The clusters whose segments the store at ``location`` holds, sorted: the default cluster if its
    root holds any segment, then every ``clusters/<id>/``. Two delimited listings on an object store."""
    if not isinstance(location, LocalLocation | S3Location):
        location = parse_store_url(location)
    if isinstance(location, LocalLocation):
        root = location.path
        if not root.is_dir():
            raise ConfigError(
                f"segment store {root} does not exist; check --segment-store (a directory or s3:// URL)"
            )
        named = (
            sorted(p.name for p in (root / CLUSTERS_DIR).iterdir()) if (root / CLUSTERS_DIR).is_dir() else []
        )
        held_at_root = root.is_dir() and any(parse_segment_name(p.name) is not None for p in root.iterdir())
    else:
        from pipeline.store.s3_store import S3SegmentStore  # obstore loads only for an object store

        store = S3SegmentStore(location)
        named = list(store.children(f"{CLUSTERS_DIR}/"))
        held_at_root = bool(store.children("segments/"))
    found = [ClusterId(n) for n in named if cluster_id_problem(n) is None and n != DEFAULT_CLUSTER]
    return [DEFAULT_CLUSTER, *found] if held_at_root else found


def cluster_location(location: StoreLocation | str | Path, cluster: str | None) -> StoreLocation:
    """The sub-store a reader (export, replay, validate, inspect) opens: ``cluster``'s if given, else
    the one cluster the store holds (or its root while it holds none). Raises ConfigError for a bad
    cluster id, and naming the clusters when the store holds several and ``cluster`` is None."""
    if not isinstance(location, LocalLocation | S3Location):
        location = parse_store_url(location)
    if cluster is not None:
        try:
            return cluster_store_location(location, parse_cluster_id(cluster, "--cluster"))
        except FormatError as exc:
            raise ConfigError(str(exc)) from None
    held = stored_clusters(location)
    if len(held) > 1:
        raise ConfigError(
            f"segment store {location} holds {len(held)} clusters ({', '.join(held)}); choose one with "
            f"--cluster (`kubetape inspect --clusters {location}` lists them)"
        )
    return cluster_store_location(location, held[0]) if held else location
