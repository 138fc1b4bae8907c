"""The segment catalog: which segments cover [A, B), answered from headers only.

Each segment's header (time range, partition offsets, keyframe time) is read once from the first bytes
of the file and cached by the store's version token, so a query never decompresses a body and a
refresh only reads files that are new or rewritten. A file whose header does not decode is listed in
:attr:`SegmentCatalog.corrupt` with the reason instead of failing the query.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.formats.segment import SegmentHeader, decode_segment_header
from pipeline.io.segment_store import SegmentName, SegmentStore, parse_segment_name
from pipeline.model.errors import FormatError

_HEAD_BYTES = 4096
_PREAMBLE = struct.Struct(">4sHII")


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One readable segment: its name, partition, first offset and header."""

    name: SegmentName
    partition: int
    first_offset: int
    header: SegmentHeader

    @property
    def last_offset(self) -> int:
        return max((p.last_offset for p in self.header.partitions), default=self.first_offset)

    def overlaps(self, start_ms: int, end_ms: int) -> bool:
        return self.header.start_ms < end_ms and start_ms < self.header.end_ms


class SegmentCatalog:
    """An index of the store's segments, refreshed incrementally."""

    def __init__(self, store: SegmentStore) -> None:
        self.store = store
        self._entries: dict[SegmentName, tuple[str, CatalogEntry]] = {}
        self.corrupt: dict[SegmentName, str] = {}
        self._corrupt_versions: dict[SegmentName, str] = {}

    def refresh(self) -> None:
        """Re-list the store; read headers of new or changed files only."""
        listed = self.store.list()
        present = {s.name for s in listed}
        for gone in set(self._entries) - present:
            del self._entries[gone]
        for gone in set(self.corrupt) - present:
            del self.corrupt[gone]
            self._corrupt_versions.pop(gone, None)
        for stored in listed:
            cached = self._entries.get(stored.name)
            if cached is not None and cached[0] == stored.version:
                continue
            if self._corrupt_versions.get(stored.name) == stored.version:
                continue
            parsed = parse_segment_name(stored.name)
            assert parsed is not None  # the store lists segment names only
            try:
                header = self._read_header(stored.name)
            except FormatError as exc:
                self._entries.pop(stored.name, None)
                self.corrupt[stored.name] = str(exc)
                self._corrupt_versions[stored.name] = stored.version
                continue
            self.corrupt.pop(stored.name, None)
            self._corrupt_versions.pop(stored.name, None)
            entry = CatalogEntry(stored.name, parsed[0], parsed[1], header)
            self._entries[stored.name] = (stored.version, entry)

    def _read_header(self, name: SegmentName) -> SegmentHeader:
        where = self.store.describe(name)
        head = self.store.head(name, _HEAD_BYTES)
        if len(head) >= _PREAMBLE.size:
            needed = _PREAMBLE.size + _PREAMBLE.unpack_from(head)[2]
            if needed > len(head) and needed < 1 << 24:
                head = self.store.head(name, needed)
        return decode_segment_header(head, where)

    def entries(self) -> list[CatalogEntry]:
        """Every readable segment, by partition then first offset."""
        return sorted((e for _, e in self._entries.values()), key=lambda e: (e.partition, e.first_offset))

    def partitions(self) -> list[int]:
        return sorted({e.partition for e in self.entries()})

    def of_partition(self, partition: int) -> list[CatalogEntry]:
        return [e for e in self.entries() if e.partition == partition]

    def covering(self, start_ms: int, end_ms: int) -> list[CatalogEntry]:
        """Segments holding any event in ``[start_ms, end_ms)``."""
        return [e for e in self.entries() if e.overlaps(start_ms, end_ms)]

    def plan(self, partition: int, start_ms: int, end_ms: int) -> list[CatalogEntry]:
        """The segments of ``partition`` to read to rebuild ``[start_ms, end_ms)`` on their own: from
        the latest keyframe at or before ``start_ms`` (or the first segment) to the last one starting
        before ``end_ms``, in offset order."""
        chain = [e for e in self.of_partition(partition) if e.header.start_ms < end_ms]
        begin = 0
        for i, e in enumerate(chain):
            kf = e.header.keyframe_at_ms
            if kf is not None and kf <= start_ms:
                begin = i
        return _without_covered(chain[begin:])


def _without_covered(entries: Iterable[CatalogEntry]) -> list[CatalogEntry]:
    # Two sink instances racing through a rebalance can both write a segment for the same offsets;
    # a segment wholly inside one already taken adds nothing (export also dedupes event by event).
    kept: list[CatalogEntry] = []
    covered_to = -1
    for e in entries:
        if e.last_offset <= covered_to:
            continue
        kept.append(e)
        covered_to = max(covered_to, e.last_offset)
    return kept
