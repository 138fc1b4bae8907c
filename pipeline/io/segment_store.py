"""Where the sink keeps its segment files: a small store protocol, a local directory and an in-memory store.

Segment names are deterministic from partition and first offset (``p0003-000000000123456.kseg``), so a
segment rewritten after a crash lands on the same name and replaces, never duplicates, the earlier copy.
:meth:`LocalSegmentStore.put` is atomic and durable: temp file in the same directory, fsync, rename,
fsync of the directory. A reader therefore sees either the old complete file or the new complete file.

An object store (S3, GCS) fits the same protocol: ``put`` is one PUT (atomic by nature), ``head`` a
ranged GET of the first bytes, ``stat`` the object's size and ETag/mtime.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NewType, Protocol

from pipeline.model.errors import ConfigError, FormatError

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


class SegmentStore(Protocol):
    """The seam between the sink/export logic and where segment bytes live."""

    def put(self, name: SegmentName, data: bytes) -> None:
        """Store ``data`` under ``name`` atomically and durably (replacing any earlier copy)."""

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


class LocalSegmentStore:
    """Segments as files in one local directory (created on first use)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # Group commit of directory fsyncs (see _sync_directory): renames done, renames known durable.
        self._renames = 0
        self._durable_renames = 0
        self._rename_lock = threading.Lock()
        self._dir_sync_lock = threading.Lock()
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"segment store {root}: cannot create the directory ({exc.strerror or exc}); "
                "choose a writable --segment-dir"
            ) from None

    def put(self, name: SegmentName, data: bytes) -> None:
        final = self.root / name
        fd, tmp_path = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.root)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            with self._rename_lock:
                os.replace(tmp_path, final)
                self._renames += 1
                mine = self._renames
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)
            raise
        self._sync_directory(mine)

    def _sync_directory(self, rename: int) -> None:
        """Make the ``rename``-th rename durable: the entry is on disk only once the directory is.

        Puts run in several threads; one directory fsync covers every rename done before it started, so
        a put whose rename an fsync already covered returns at once (a group commit: with 4 writers this
        halves the fsyncs per segment, which bound the sink on small segments)."""
        with self._dir_sync_lock:
            if self._durable_renames >= rename:
                return
            with self._rename_lock:
                covered = self._renames
            dir_fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._durable_renames = covered

    def get(self, name: SegmentName) -> bytes:
        try:
            return (self.root / name).read_bytes()
        except OSError as exc:
            raise FormatError(
                f"{self.root / name}: cannot read the segment ({exc.strerror or exc})"
            ) from None

    def head(self, name: SegmentName, size: int) -> bytes:
        try:
            with (self.root / name).open("rb") as f:
                return f.read(size)
        except OSError as exc:
            raise FormatError(
                f"{self.root / name}: cannot read the segment ({exc.strerror or exc})"
            ) from None

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

    def __init__(self) -> None:
        self.files: dict[SegmentName, bytes] = {}
        self._versions: dict[SegmentName, int] = {}
        self.puts = 0

    def put(self, name: SegmentName, data: bytes) -> None:
        self.files[name] = bytes(data)
        self.puts += 1
        self._versions[name] = self.puts

    def get(self, name: SegmentName) -> bytes:
        try:
            return self.files[name]
        except KeyError:
            raise FormatError(f"memory://{name}: no such segment") from None

    def head(self, name: SegmentName, size: int) -> bytes:
        return self.get(name)[:size]

    def list(self) -> list[StoredSegment]:
        return [StoredSegment(n, len(d), str(self._versions[n])) for n, d in sorted(self.files.items())]

    def delete(self, name: SegmentName) -> None:
        self.files.pop(name, None)

    def describe(self, name: SegmentName) -> str:
        return f"memory://{name}"
