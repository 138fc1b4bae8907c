"""An in-memory segment store for unit tests and benchmarks of the logic above the store."""

from __future__ import annotations

import builtins
import threading

from pipeline.store.segment_store import (
    IndexLayout,
    MissingSegmentError,
    SegmentName,
    StoredSegment,
    WriteFence,
    check_fence,
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
