"""Segments in an S3-compatible object store, through ``obstore`` (the Rust ``object_store`` crate).

**Layout.** Under the store's prefix::

    segments/p0003/p0003-000000000123456.kseg   one object per segment, grouped by partition
    epochs/p0003/0000000007                     the partition's fencing epoch: the highest marker
    kubetape-store.json                         the topic identity the store was filled from
    index/...                                   the segment index (pipeline.store.segment_index)
    clusters/<cluster id>/...                   the same layout per fleet member (pipeline.store.store_url)

Grouping segment keys by partition keeps a listing proportional to what is asked for: a reader of one
partition lists one prefix. The store also keeps the segment index of :mod:`pipeline.store.segment_index`
(``index/``: marker objects written before each segment), so a window's export lists a few index
directories from a start-after key and reads the headers of its plan only, instead of listing every
segment key and reading every header it has not seen (a month of 6 partitions at 60 s windows is 260k
segments). Whole-store operations (the sink's restore, retention, ``inspect`` of a store) still list
``segments/`` at 1,000 keys per request and read only the headers they have not seen, 16 at a time.

**Atomicity.** A PUT is atomic by nature: a reader sees the old object or the new one, never a part.

**Fencing** (the rules of :mod:`pipeline.store.segment_store`) with conditional writes:

* an epoch is raised by creating the next epoch marker with ``If-None-Match: *`` (create only); of
  owners racing for one epoch exactly one creates it, the others go past it. Markers rather than one
  object updated with ``If-Match``, because creation is the condition S3 servers check atomically:
  s3proxy 4.1's filesystem backend let 2 of 8 concurrent ``If-Match`` PUTs of one ETag through, but
  exactly one of 8 concurrent creates in 25 of 25 trials (measured, see :mod:`pipeline.stack.s3`);
* a fenced segment write reads the partition's epoch and the segment already stored (its ETag and
  header), checks both rules, then PUTs conditional on that ETag (or on absence). The "never less" rule
  is therefore atomic with the write on servers whose ``If-Match`` is atomic (AWS S3, MinIO): a writer
  racing another on the same name re-checks against what the other wrote. Within one process the store
  serialises writes of one key itself. On a server whose ``If-Match`` is not atomic (s3proxy 4.1's
  filesystem backend) two processes *replacing* one existing segment at the same instant can both pass,
  and the shorter copy can win: the offsets only the longer one held are then missing from the store
  (the group has committed past them). Creation stays atomic there, and a sink resumes after the
  store's last offset, so a successor writes new names rather than replacing its predecessor's; the
  window is two writers replacing the same unreadable or shorter object at once. Use a server with
  atomic conditional writes in production.
* The epoch check is not atomic with the PUT (S3 has no transaction over two objects): a stale
  writer whose check passed an instant before the new owner raised the epoch can still land that one
  segment. That is the write the local store would have accepted just before the epoch moved; it
  covers offsets of the same topic, and readers take each offset once, so it costs space, not data.

**Without conditional writes** (some S3 implementations ignore the headers): the store probes the
server once per process (a create-only PUT twice on a probe key); if the second one is not refused, it
logs a warning and falls back to plain PUTs after the same checks. The races above then widen from one
request to a read-check-write window, which is safe while Kafka gives a partition to one sink at a
time; run one sink replica per store on such servers.

**Connection and credentials**: :mod:`pipeline.store.s3_connection`; what a failed request
means to the user: :mod:`pipeline.store.s3_errors`.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import obstore
from obstore import exceptions as obs_errors
from obstore.store import S3Store

from pipeline.model.errors import ConfigError, KubetapeError, TransientError
from pipeline.store.s3_connection import IMPATIENT, connection_config, retries
from pipeline.store.s3_errors import NOT_FOUND, explain_s3_failure
from pipeline.store.segment_store import (
    STORE_META,
    IndexLayout,
    MissingSegmentError,
    SegmentName,
    StaleWriterError,
    StoredSegment,
    WriteFence,
    check_fence,
    parse_segment_name,
)
from pipeline.store.store_url import S3Location

log = logging.getLogger("kubetape.sink")

T = TypeVar("T")
_HEADER_BYTES = 1 << 16
_RACE_ATTEMPTS = 20
_EPOCH_ATTEMPTS = 200
# Epoch markers kept below the current one. Pruning marker n lets a client whose listing is older
# than n create it again, but that client's epoch is then below the current one, so its writes are
# refused anyway: the margin only keeps such refused duplicates rare, never unsafe.
_EPOCHS_KEPT = 16


def segment_key(name: SegmentName) -> str:
    """The object key of segment ``name`` under the store's prefix."""
    parsed = parse_segment_name(name)
    if parsed is None:
        raise ValueError(f"{name!r} is not a segment name")
    return f"segments/p{parsed[0]:04d}/{name}"


def _epoch_prefix(partition: int) -> str:
    return f"epochs/p{partition:04d}/"


class S3SegmentStore:
    """The segment store on an S3-compatible object store (see the module docstring)."""

    read_concurrency = 16
    """Headers a catalog reads at once (:mod:`pipeline.store.catalog`): each is one request."""
    index_layout: IndexLayout | None = IndexLayout()
    """Listing is the expensive part of an object store: it keeps the index of
    :mod:`pipeline.store.segment_index`."""

    def __init__(
        self,
        location: S3Location,
        *,
        timeout_s: float = 30.0,
        retry_s: float = 15.0,
        conditional_writes: bool | None = None,
    ) -> None:
        """``conditional_writes``: None asks the server on first use whether it honours If-None-Match
        and If-Match (:meth:`supports_conditional_writes`); False takes the one-writer-at-a-time
        fallback without asking, as on a server known to ignore them."""
        self.location = location
        config, client = connection_config(location)
        self.endpoint = str(config.get("endpoint", "AWS S3"))
        client = {**client, "timeout": timedelta(seconds=timeout_s)}
        prefix = location.prefix or None
        self._store = S3Store(location.bucket, prefix=prefix, config=config, client_options=client,
                              retry_config=retries(retry_s))  # fmt: skip
        self._probe = S3Store(
            location.bucket,
            prefix=prefix,
            config=config,
            client_options={**client, "timeout": timedelta(seconds=3)},
            retry_config=IMPATIENT,
        )
        self._conditional = conditional_writes
        self._conditional_lock = threading.Lock()
        self._key_locks = [threading.Lock() for _ in range(32)]

    # ---- protocol ----------------------------------------------------------------------------
    def put(self, name: SegmentName, data: bytes, fence: WriteFence | None = None) -> None:
        key = segment_key(name)
        if fence is None:
            self._call(key, lambda: obstore.put(self._store, key, data))
            return
        where = self.describe(name)
        with self._key_lock(key):
            # Most segments are new: try to create it first and read what is there only when that fails
            # (one request less per segment than reading first; the rules are checked the same way).
            existing: tuple[str | None, bytes] | None = None
            if not self.supports_conditional_writes():
                existing = self._read_head(key)  # a plain PUT would replace whatever is there unchecked
            for _ in range(_RACE_ATTEMPTS):
                epoch = self._current_epoch(fence.partition)
                header = existing[1] if existing is not None else None
                check_fence(name, fence, {"epochs": {str(fence.partition): epoch}}, header, where)
                if self._put_if(key, data, existing[0] if existing is not None else None):
                    return
                # there is an object (or it changed since we read it): check against its bytes
                existing = self._read_head(key)
        raise StaleWriterError(f"{where}: refused: the segment kept changing under {_RACE_ATTEMPTS} attempts")

    def acquire_epoch(self, partition: int) -> int:
        prefix = _epoch_prefix(partition)
        epoch = self._current_epoch(partition)
        for _ in range(_EPOCH_ATTEMPTS):
            epoch += 1
            if self._put_if(f"{prefix}{epoch:010d}", b"", None):
                self._prune_epochs(partition, below=epoch - _EPOCHS_KEPT)
                return epoch
            epoch = max(epoch, self._current_epoch(partition))  # another owner took it: go past it
        raise TransientError(
            f"{self._url(prefix)}: {_EPOCH_ATTEMPTS} owners took the partition at once; the sink retries on "
            "its next rebalance"
        )

    def claim_source(self, identity: str) -> str:
        for _ in range(_RACE_ATTEMPTS):
            recorded = self._read_json(STORE_META)
            if recorded is not None and isinstance(recorded[0].get("source"), str):
                return str(recorded[0]["source"])
            meta = {**(recorded[0] if recorded else {}), "source": identity}
            if self._put_if(STORE_META, json.dumps(meta, sort_keys=True).encode(), recorded and recorded[1]):
                return identity
        raise TransientError(f"{self._url(STORE_META)}: the store record kept changing; retry")

    def get(self, name: SegmentName) -> bytes:
        key = segment_key(name)
        try:
            return bytes(self._call(key, lambda: obstore.get(self._store, key).bytes()))
        except NOT_FOUND:
            raise MissingSegmentError(f"{self._url(key)}: no such segment") from None

    def head(self, name: SegmentName, size: int) -> bytes:
        key = segment_key(name)
        try:
            return bytes(self._call(key, lambda: obstore.get_range(self._store, key, start=0, length=size)))
        except NOT_FOUND:
            raise MissingSegmentError(f"{self._url(key)}: no such segment") from None

    def list(self) -> list[StoredSegment]:
        found = []
        stream = self._call(
            "segments/", lambda: list(obstore.list(self._store, prefix="segments/").collect())
        )
        for meta in stream:
            name = meta["path"].rsplit("/", 1)[-1]
            if parse_segment_name(name) is None:
                continue
            version = f"{meta.get('e_tag')}:{meta['last_modified'].timestamp()}"
            found.append(StoredSegment(SegmentName(name), int(meta["size"]), version))
        return sorted(found, key=lambda s: s.name)

    def delete(self, name: SegmentName) -> None:
        self._delete(segment_key(name))

    def children(self, prefix: str) -> tuple[str, ...]:
        """The names directly under ``prefix`` (``clusters/``: the fleet's cluster ids), objects and
        "directories" alike, in one delimited listing: never the keys below them."""
        listed = self._call(prefix, lambda: obstore.list_with_delimiter(self._store, prefix=prefix))
        paths = [*listed["common_prefixes"], *(meta["path"] for meta in listed["objects"])]
        return tuple(sorted({path.rstrip("/").rsplit("/", 1)[-1] for path in paths}))

    # ---- index markers (pipeline.store.segment_index) -------------------------------------------
    def put_marker(self, key: str) -> None:
        self._call(key, lambda: obstore.put(self._store, key, b""))

    def list_markers(
        self, prefix: str, *, after: str | None = None, through: str | None = None, limit: int | None = None
    ) -> builtins.list[str]:
        def read() -> builtins.list[str]:
            # S3 lists in key order from a start-after key: stop reading pages once past ``through``
            keys: builtins.list[str] = []
            for chunk in obstore.list(
                self._store, prefix=prefix, offset=after, chunk_size=min(limit or 1000, 1000)
            ):
                for meta in chunk:
                    key = str(meta["path"])
                    if through is not None and key > through:
                        return keys
                    keys.append(key)
                    if limit is not None and len(keys) >= limit:
                        return keys
            return keys

        return self._call(prefix, read)

    def delete_marker(self, key: str) -> None:
        self._delete(key)

    def _delete(self, key: str) -> None:
        with contextlib.suppress(*NOT_FOUND):  # S3 deletes are idempotent; some servers 404 anyway
            self._call(key, lambda: obstore.delete(self._store, key))

    def describe(self, name: SegmentName) -> str:
        return self._url(segment_key(name))

    def check(self) -> None:
        """Raise (TransientError, ConfigError) unless the store answers now: one quick listing request."""
        self._call("", lambda: obstore.list(self._probe, prefix="epochs/", chunk_size=1).collect())

    # ---- conditional writes ------------------------------------------------------------------
    def _key_lock(self, key: str) -> threading.Lock:
        """One fenced write of ``key`` at a time in this process (see the module docstring); striped so
        the locks stay few however many segments a long-running sink writes."""
        return self._key_locks[hash(key) % len(self._key_locks)]

    def _put_if(self, key: str, data: bytes, etag: str | None) -> bool:
        """PUT ``data`` if the object still has ``etag`` (None: is still absent); False if it changed."""
        if not self.supports_conditional_writes():
            self._call(key, lambda: obstore.put(self._store, key, data))
            return True
        mode: Any = "create" if etag is None else {"e_tag": etag}
        try:
            self._call(key, lambda: obstore.put(self._store, key, data, mode=mode))
        except (obs_errors.AlreadyExistsError, obs_errors.PreconditionError):
            return False
        return True

    def supports_conditional_writes(self) -> bool:
        """Whether the server honours ``If-None-Match: *`` (probed once per process, see the module
        docstring)."""
        with self._conditional_lock:
            if self._conditional is None:
                self._conditional = self._probe_conditional()
            return self._conditional

    def _probe_conditional(self) -> bool:
        key = f"probes/{uuid.uuid4().hex}"
        self._call(key, lambda: obstore.put(self._store, key, b"1", mode="create"))
        try:
            self._call(key, lambda: obstore.put(self._store, key, b"2", mode="create"))
            honoured = False
        except (obs_errors.AlreadyExistsError, obs_errors.PreconditionError):
            honoured = True
        finally:
            self._call(key, lambda: obstore.delete(self._store, key))
        if not honoured:
            log.warning(
                "object store ignores conditional writes: fencing falls back to check-then-put",
                extra={"ctx": {"store": str(self.location), "endpoint": self.endpoint}},
            )
        return honoured

    def _epochs(self, partition: int) -> tuple[int, ...]:
        prefix = _epoch_prefix(partition)
        listed = self._call(prefix, lambda: obstore.list(self._store, prefix=prefix).collect())
        return tuple(int(name) for m in listed if (name := m["path"].rsplit("/", 1)[-1]).isdigit())

    def _current_epoch(self, partition: int) -> int:
        return max(self._epochs(partition), default=0)

    def _prune_epochs(self, partition: int, *, below: int) -> None:
        """Delete epoch markers older than ``below``: the current epoch is the highest one left."""
        for old in self._epochs(partition):
            if old < below:
                self._delete(f"{_epoch_prefix(partition)}{old:010d}")

    def _read_json(self, key: str) -> tuple[dict[str, Any], str | None] | None:
        try:
            result = self._call(key, lambda: obstore.get(self._store, key))
            data = bytes(result.bytes())
        except NOT_FOUND:
            return None
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise ConfigError(
                f"{self._url(key)}: unreadable store record ({exc}); restore it or delete it (the sink "
                "then restarts the epochs)"
            ) from None
        return (value if isinstance(value, dict) else {}), result.meta.get("e_tag")

    def _read_head(self, key: str) -> tuple[str | None, bytes] | None:
        """The ETag and first bytes of ``key``, or None if there is no such object."""
        try:
            result = self._call(
                key, lambda: obstore.get(self._store, key, options={"range": (0, _HEADER_BYTES)})
            )
            return result.meta.get("e_tag"), bytes(result.bytes())
        except NOT_FOUND:
            return None

    # ---- errors ------------------------------------------------------------------------------
    def _url(self, key: str) -> str:
        return f"{self.location}/{key}" if key else str(self.location)

    def _call(self, key: str, action: Callable[[], T]) -> T:
        """Run one request; map the client's errors to kubetape's (see :meth:`explain_failure`)."""
        try:
            return action()
        except (*NOT_FOUND, obs_errors.BaseError) as exc:
            explained = self.explain_failure(key, exc)
            if explained is None:
                raise
            raise explained from None

    def explain_failure(self, key: str, exc: Exception) -> KubetapeError | None:
        """What a failed request for ``key`` means to the user (:func:`explain_s3_failure`)."""
        return explain_s3_failure(self._url(key), self.location.bucket, self.endpoint, exc)
