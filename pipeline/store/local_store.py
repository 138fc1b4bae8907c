"""A segment store in one local directory: atomic, durable puts (temp file, fsync, rename, fsync of the
directory) and fencing under ``flock`` on ``.lock`` (the rules: :mod:`pipeline.store.segment_store`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from pipeline.model.errors import ConfigError, FormatError, TransientError
from pipeline.store.segment_store import (
    SEGMENT_SUFFIX,
    STORE_META,
    MissingSegmentError,
    SegmentName,
    StoredSegment,
    WriteFence,
    check_fence,
    parse_segment_name,
)

log = logging.getLogger("kubetape.sink")
_LOCK = ".lock"


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
