"""Where the sink keeps its segment files: a small store protocol, a local directory and an in-memory store.

Segment names are deterministic from partition and first offset (``p0003-000000000123456.kseg``), so a
segment rewritten after a crash lands on the same name. :meth:`LocalSegmentStore.put` is atomic and
durable: temp file in the same directory, fsync, rename, fsync of the directory. A reader therefore sees
either the old complete file or the new complete file.

**Fencing.** Kafka hands a partition to a new group member while an evicted one may still be running
(it missed its heartbeats, it is paused, its network is cut): both can write the same partition. The
store, the source of truth, fences writers itself, with two rules checked atomically with the rename:

1. *Epochs.* A sink takes a partition with :meth:`SegmentStore.acquire_epoch`, which raises the
   partition's epoch in the store and returns it; each segment it writes carries that epoch
   (:class:`WriteFence`, also recorded in the segment's header). A write under an older epoch than the
   partition's current one is refused with :class:`StaleWriterError` and a log line naming both epochs:
   the writer was fenced out by a newer owner. The epoch is the store's own counter rather than
   Kafka's group generation, because a generation restarts when the group is deleted or renamed and
   is not known to tools, while the store's counter only grows, whoever writes.
2. *Never less.* A write never replaces a segment with one covering fewer offsets (a stale writer's
   shorter segment under the same name as a newer, longer one); an unreadable file may be replaced.

What an older writer may still add (before the new owner took the epoch) covers offsets of the same
topic, so it overlaps what the new owner writes and readers take each offset once
(:mod:`pipeline.store.catalog`): overlaps cost space, never data. This needs the lock to be shared by
every writer: a local directory uses ``flock`` on ``.lock`` (one host, or one volume mounted by one
pod); an object store uses conditional writes (``If-Match`` on an epoch object, ``If-None-Match`` on
segments: :mod:`pipeline.store.s3_store`).

The store also records the identity of the topic it was filled from (:meth:`SegmentStore.claim_source`),
so a sink pointed at another or a recreated topic refuses to start instead of mixing histories.

An object store (S3, GCS) fits the same protocol: ``put`` is one PUT (atomic by nature), ``head`` a
ranged GET of the first bytes, ``stat`` the object's size and ETag/mtime.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NewType, Protocol

from pipeline.formats.segment.header import decode_segment_header
from pipeline.model.errors import ConfigError, FormatError, TransientError

log = logging.getLogger("kubetape.sink")

SegmentName = NewType("SegmentName", str)
"""A segment file name, ``p{partition:04d}-{first_offset:015d}.kseg``."""

SEGMENT_SUFFIX = ".kseg"
_NAME_RE = re.compile(r"^p(\d{4,})-(\d{15,})\.kseg$")


def segment_name(partition: int, first_offset: int) -> SegmentName:
    """The deterministic name of the segment of ``partition`` starting at ``first_offset``."""
    if partition < 0 or first_offset < 0:
        raise ValueError(f"partition and offset must be non-negative, got {partition}, {first_offset}")
    return SegmentName(f"p{partition:04d}-{first_offset:015d}{SEGMENT_SUFFIX}")


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(partition, first_offset)`` of a segment name, or None for any other file (temp files, notes)."""
    match = _NAME_RE.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True, slots=True)
class StoredSegment:
    """A segment as listed by the store; ``version`` changes whenever the bytes may have changed."""

    name: SegmentName
    size: int
    version: str


@dataclass(frozen=True, slots=True)
class WriteFence:
    """What a fenced write claims: ``partition`` offsets ``first_offset``..``last_offset`` (inclusive),
    written under the partition's fencing ``epoch`` (see the module docstring)."""

    partition: int
    first_offset: int
    last_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class IndexLayout:
    """How a store that keeps an index (:mod:`pipeline.store.segment_index`) buckets it: writers and
    readers of one store must agree, so it is fixed per store kind, not configured."""

    bucket_ms: int = 3_600_000
    """Width of a ``start/`` bucket: an hour, so a one-hour export lists a few of them."""
    late_slack_ms: int = 3_600_000
    """A segment starting more than this before its partition's high water is listed as late."""

    def bucket(self, ts_ms: int) -> int:
        return max(ts_ms, 0) // self.bucket_ms


class MissingSegmentError(FormatError):
    """The segment is not in the store (deleted by retention meanwhile, or an index marker without its
    segment): readers that found its name somewhere other than a listing skip it."""


class StaleWriterError(TransientError):
    """A fenced write was refused: a newer owner holds the partition, or the write would replace a
    segment with less. The writer must drop the partition (its new owner carries on)."""


STORE_META = "kubetape-store.json"
"""The store's own record: the topic identity it was filled from and each partition's fencing epoch."""
_LOCK = ".lock"


class SegmentStore(Protocol):
    """The seam between the sink/export logic and where segment bytes live."""

    def put(self, name: SegmentName, data: bytes, fence: WriteFence | None = None) -> None:
        """Store ``data`` under ``name`` atomically and durably (replacing any earlier copy). With a
        ``fence``, refuse (:class:`StaleWriterError`) a write under an epoch older than the partition's
        or one that would replace a segment covering more offsets."""

    def acquire_epoch(self, partition: int) -> int:
        """Raise ``partition``'s fencing epoch and return it: writes under older epochs are refused."""

    def claim_source(self, identity: str) -> str:
        """Record ``identity`` as the topic this store is filled from if none is recorded yet; return
        the recorded one (the caller refuses to go on when it differs)."""

    def get(self, name: SegmentName) -> bytes:
        """The bytes of ``name``; raises FormatError if it cannot be read."""

    def head(self, name: SegmentName, size: int) -> bytes:
        """Up to the first ``size`` bytes of ``name`` (enough to decode a segment header)."""

    def list(self) -> list[StoredSegment]:
        """Every segment in the store (other files are ignored), sorted by name."""

    def delete(self, name: SegmentName) -> None:
        """Remove ``name`` (no error if it is already gone)."""

    def describe(self, name: SegmentName) -> str:
        """Where ``name`` lives, for messages (a path or URL)."""

    def check(self) -> None:
        """Raise (TransientError, ConfigError) unless the store can be written now (readiness)."""


class LocalSegmentStore:
    """Segments as files in one local directory (created on first use)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # Group commit of directory fsyncs (see _sync_directory): renames done, renames known durable.
        self._renames = 0
        self._durable_renames = 0
        self._rename_lock = threading.Lock()
        self._dir_sync_lock = threading.Lock()
        self._meta_lock = threading.Lock()
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"segment store {root}: cannot create the directory ({exc.strerror or exc}); "
                "choose a writable --segment-dir"
            ) from None

    def put(self, name: SegmentName, data: bytes, fence: WriteFence | None = None) -> None:
        final = self.root / name
        fd, tmp_path = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.root)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            # the checks and the rename under one lock: no other writer acts in between
            with self._locked() if fence is not None else contextlib.nullcontext():
                if fence is not None:
                    check_fence(name, fence, self._meta(), self._existing_header(name), self.describe(name))
                with self._rename_lock:
                    os.replace(tmp_path, final)
                    self._renames += 1
                    mine = self._renames
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)
            raise
        self._sync_directory(mine)

    def _sync_directory(self, rename: int, *, force: bool = False) -> None:
        """Make the ``rename``-th rename durable: the entry is on disk only once the directory is.

        Puts run in several threads; one directory fsync covers every rename done before it started, so
        a put whose rename an fsync already covered returns at once (a group commit: with 4 writers this
        halves the fsyncs per segment, which bound the sink on small segments)."""
        with self._dir_sync_lock:
            if self._durable_renames >= rename and not force:
                return
            with self._rename_lock:
                covered = self._renames
            dir_fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._durable_renames = max(self._durable_renames, covered)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive across this process's threads and every process using the directory."""
        with self._meta_lock:
            fd = os.open(self.root / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def _meta(self) -> dict[str, object]:
        try:
            raw = json.loads((self.root / STORE_META).read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{self.root / STORE_META}: unreadable store record ({exc}); restore it or remove it "
                "(the sink then records the topic it reads and restarts the epochs)"
            ) from None
        return raw if isinstance(raw, dict) else {}

    def _write_meta(self, meta: dict[str, object]) -> None:
        path = self.root / STORE_META
        tmp = self.root / f".{STORE_META}.tmp"
        with tmp.open("w") as f:
            json.dump(meta, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._sync_directory(0, force=True)

    def _existing_header(self, name: SegmentName) -> bytes | None:
        try:
            return self.head(name, 1 << 16)
        except FormatError:
            return None

    def acquire_epoch(self, partition: int) -> int:
        with self._locked():
            meta = self._meta()
            epochs = meta.setdefault("epochs", {})
            assert isinstance(epochs, dict)
            epoch = int(epochs.get(str(partition), 0)) + 1
            epochs[str(partition)] = epoch
            self._write_meta(meta)
            return epoch

    def claim_source(self, identity: str) -> str:
        with self._locked():
            meta = self._meta()
            recorded = meta.get("source")
            if isinstance(recorded, str):
                return recorded
            meta["source"] = identity
            self._write_meta(meta)
            return identity

    def get(self, name: SegmentName) -> bytes:
        return self._read(name, -1)

    def head(self, name: SegmentName, size: int) -> bytes:
        return self._read(name, size)

    def _read(self, name: SegmentName, size: int) -> bytes:
        """The first ``size`` bytes of a segment (all of it for -1), with the store's errors."""
        path = self.root / name
        try:
            with path.open("rb") as f:
                return f.read(size)
        except FileNotFoundError:
            raise MissingSegmentError(f"{path}: no such segment") from None
        except OSError as exc:
            raise FormatError(f"{path}: cannot read the segment ({exc.strerror or exc})") from None

    def list(self) -> list[StoredSegment]:
        found = []
        with os.scandir(self.root) as entries:
            for entry in entries:
                if parse_segment_name(entry.name) is None or not entry.is_file():
                    continue
                st = entry.stat()
                found.append(
                    StoredSegment(SegmentName(entry.name), st.st_size, f"{st.st_mtime_ns}:{st.st_ino}")
                )
        return sorted(found, key=lambda s: s.name)

    def delete(self, name: SegmentName) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.root / name).unlink()

    def describe(self, name: SegmentName) -> str:
        return str(self.root / name)

    def check(self) -> None:
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise TransientError(
                f"segment store {self.root}: not writable; check the volume and its permissions"
            )

    def remove_stale_temp_files(self) -> int:
        """Delete temp files left by a writer killed mid-put; returns how many were removed."""
        removed = 0
        for path in self.root.glob(f".*{SEGMENT_SUFFIX}.*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
        return removed


def _unreadable(path: Path, exc: OSError) -> FormatError:
    return FormatError(
        f"{path}: cannot read the segment ({exc.strerror or exc}); check the store's permissions"
    )


class MemorySegmentStore:
    """An in-memory store for unit tests and benchmarks of the logic above the store."""

    def __init__(self, index_layout: IndexLayout | None = None) -> None:
        self.index_layout = index_layout
        """Keeps the index of :mod:`pipeline.store.segment_index` when set (an object store's behaviour)."""
        self.markers: set[str] = set()
        self.files: dict[SegmentName, bytes] = {}
        self._versions: dict[SegmentName, int] = {}
        self.puts = 0
        self.epochs: dict[int, int] = {}
        self.source: str | None = None
        self._lock = threading.Lock()

    def put(self, name: SegmentName, data: bytes, fence: WriteFence | None = None) -> None:
        with self._lock:
            if fence is not None:
                meta: dict[str, object] = {"epochs": {str(p): e for p, e in self.epochs.items()}}
                check_fence(name, fence, meta, self.files.get(name), self.describe(name))
            self.files[name] = bytes(data)
            self.puts += 1
            self._versions[name] = self.puts

    def acquire_epoch(self, partition: int) -> int:
        with self._lock:
            self.epochs[partition] = self.epochs.get(partition, 0) + 1
            return self.epochs[partition]

    def claim_source(self, identity: str) -> str:
        with self._lock:
            if self.source is None:
                self.source = identity
            return self.source

    def wipe(self) -> None:
        """Lose everything, as a new or wiped directory would (tests)."""
        with self._lock:
            self.files.clear()
            self._versions.clear()
            self.epochs.clear()
            self.source = None
            self.markers.clear()

    def get(self, name: SegmentName) -> bytes:
        try:
            return self.files[name]
        except KeyError:
            raise MissingSegmentError(f"memory://{name}: no such segment") from None

    def head(self, name: SegmentName, size: int) -> bytes:
        return self.get(name)[:size]

    def list(self) -> list[StoredSegment]:
        return [StoredSegment(n, len(d), str(self._versions[n])) for n, d in sorted(self.files.items())]

    def delete(self, name: SegmentName) -> None:
        self.files.pop(name, None)

    def describe(self, name: SegmentName) -> str:
        return f"memory://{name}"

    def put_marker(self, key: str) -> None:
        with self._lock:
            self.markers.add(key)

    def list_markers(
        self, prefix: str, *, after: str | None = None, through: str | None = None, limit: int | None = None
    ) -> builtins.list[str]:
        if not prefix.endswith("/"):
            raise ValueError(f"marker prefix {prefix!r} is not a directory (object stores list by path)")
        with self._lock:
            keys = sorted(k for k in self.markers if k.startswith(prefix))
        found = [k for k in keys if (after is None or k > after) and (through is None or k <= through)]
        return found if limit is None else found[:limit]

    def delete_marker(self, key: str) -> None:
        with self._lock:
            self.markers.discard(key)

    def check(self) -> None:
        """Always reachable."""


def check_fence(
    name: SegmentName, fence: WriteFence, meta: dict[str, object], existing: bytes | None, where: str
) -> None:
    """The two fencing rules of the module docstring; raises StaleWriterError (and logs why)."""
    epochs = meta.get("epochs")
    current = int(epochs.get(str(fence.partition), 0)) if isinstance(epochs, dict) else 0
    reason = None
    if fence.epoch < current:
        reason = (
            f"written under fencing epoch {fence.epoch}, but epoch {current} owns partition "
            f"{fence.partition} since: this sink lost the partition to a newer owner (rebalance)"
        )
    elif existing is not None:
        try:
            header = decode_segment_header(existing, where)
        except FormatError:
            header = None  # an unreadable file holds nothing to keep
        if header is not None and header.partitions:
            held = header.partitions[0]
            if held.last_offset > fence.last_offset:
                reason = (
                    f"would replace offsets {held.first_offset}..{held.last_offset} with "
                    f"{fence.first_offset}..{fence.last_offset}: a write never replaces a segment with less"
                )
    if reason is not None:
        log.warning(
            "stale segment write refused",
            extra={
                "ctx": {"segment": where, "epoch": fence.epoch, "partition_epoch": current, "why": reason}
            },
        )
        raise StaleWriterError(f"{where}: refused: {reason}")
