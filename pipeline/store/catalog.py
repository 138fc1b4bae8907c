"""The segment catalog: which segments cover [A, B), answered from headers only.

:meth:`SegmentCatalog.refresh` lists the whole store. :meth:`SegmentCatalog.refresh_window` answers for
one window: on a store that keeps an index (an object store, :mod:`pipeline.store.segment_index`) it reads
only the index prefixes and headers the window's plan needs, and falls back to the whole listing where
the index cannot answer (not built yet, no keyframe before the window, an unreadable keyframe).

Each segment's header (time range, partition offsets, keyframe time) is read once from the first bytes
of the file and cached by the store's version token, so a query never decompresses a body and a
refresh only reads files that are new or rewritten. A file whose header does not decode is listed in
:attr:`SegmentCatalog.corrupt` with the reason instead of failing the query.

A store with a ``read_concurrency`` above 1 (an object store, where each header is a request) has its
new headers read that many at a time: latency, not bandwidth, bounds a cold catalog there.
"""

from __future__ import annotations

import concurrent.futures
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.formats.segment.header import SegmentHeader, decode_segment_header
from pipeline.model.errors import FormatError
from pipeline.store.catalog_window import WindowView, window_from_index
from pipeline.store.segment_index import MarkerStore, layout_of
from pipeline.store.segment_store import SegmentName, SegmentStore, parse_segment_name

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

    @property
    def is_gap(self) -> bool:
        """A gap marker: offsets the sink found lost (no events)."""
        return self.header.is_gap

    def overlaps(self, start_ms: int, end_ms: int) -> bool:
        return self.header.start_ms < end_ms and start_ms < self.header.end_ms


def keyframe_times(chain: list[CatalogEntry]) -> list[int | None]:
    """For each segment of one partition's chain (offset order), the time T of its keyframe (None
    without one): every event inside the keyframe's state is before T, so the keyframe can start a
    window ``[A, B)`` with T <= A (see :mod:`pipeline.sink.compactor`).

    Segments of older releases stamped their keyframe with its window's start although the state held
    the earlier parts of that window; for them T is bounded from the headers alone: every event in the
    state came from an earlier segment, so it is before the latest end of those."""
    times: list[int | None] = []
    ends_before = -1
    for e in chain:
        h = e.header
        if h.keyframe_at_ms is None:
            times.append(None)
        elif h.keyframe_time is not None:
            times.append(h.keyframe_time)
        else:
            times.append(max(h.keyframe_at_ms, ends_before))
        ends_before = max(ends_before, h.end_ms)
    return times


class SegmentCatalog:
    """An index of the store's segments, refreshed incrementally."""

    def __init__(self, store: SegmentStore) -> None:
        self.store = store
        self._entries: dict[SegmentName, tuple[str, CatalogEntry]] = {}
        self._corrupt: dict[SegmentName, str] = {}
        self._window: WindowView | None = None
        self._corrupt_versions: dict[SegmentName, str] = {}
        self.verified: dict[SegmentName, str] = {}
        """Segments read back whole, by version (retention checks its anchors once)."""

    def version(self, name: SegmentName) -> str | None:
        """The store's version token of a readable segment as last refreshed."""
        cached = self._entries.get(name)
        return cached[0] if cached is not None else None

    @property
    def corrupt(self) -> dict[SegmentName, str]:
        """Segments whose header does not decode, with the reason (of the window's candidates only
        after :meth:`refresh_window` used the index)."""
        return self._window.corrupt if self._window is not None else self._corrupt

    def refresh(self) -> None:
        """Re-list the store; read headers of new or changed files only."""
        self._window = None
        listed = self.store.list()
        present = {s.name for s in listed}
        for gone in set(self._entries) - present:
            del self._entries[gone]
        for gone in set(self._corrupt) - present:
            del self._corrupt[gone]
            self._corrupt_versions.pop(gone, None)
        todo = [
            stored
            for stored in listed
            if (cached := self._entries.get(stored.name)) is None or cached[0] != stored.version
            if self._corrupt_versions.get(stored.name) != stored.version
        ]
        for stored, header in zip(todo, self._read_headers([s.name for s in todo]), strict=True):
            parsed = parse_segment_name(stored.name)
            assert parsed is not None  # the store lists segment names only
            if isinstance(header, FormatError):
                self._entries.pop(stored.name, None)
                self._corrupt[stored.name] = str(header)
                self._corrupt_versions[stored.name] = stored.version
                continue
            self._corrupt.pop(stored.name, None)
            self._corrupt_versions.pop(stored.name, None)
            entry = CatalogEntry(stored.name, parsed[0], parsed[1], header)
            self._entries[stored.name] = (stored.version, entry)

    def _read_headers(self, names: list[SegmentName]) -> list[SegmentHeader | FormatError]:
        def read(name: SegmentName) -> SegmentHeader | FormatError:
            try:
                return self._read_header(name)
            except FormatError as exc:
                return exc

        concurrency = int(getattr(self.store, "read_concurrency", 1))
        if concurrency <= 1 or len(names) <= 1:
            return [read(n) for n in names]
        with concurrent.futures.ThreadPoolExecutor(min(concurrency, len(names))) as pool:
            return list(pool.map(read, names))

    def _read_header(self, name: SegmentName) -> SegmentHeader:
        where = self.store.describe(name)
        head = self.store.head(name, _HEAD_BYTES)
        if len(head) >= _PREAMBLE.size:
            needed = _PREAMBLE.size + _PREAMBLE.unpack_from(head)[2]
            if needed > len(head) and needed < 1 << 24:
                head = self.store.head(name, needed)
        return decode_segment_header(head, where)

    @property
    def answered_from_index(self) -> bool:
        """Whether the last refresh read the store's index (:meth:`refresh_window`) or listed it all."""
        return self._window is not None

    def refresh_window(self, start_ms: int, end_ms: int) -> None:
        """Make the catalog answer for ``[start_ms, end_ms)``: from the store's index where it has one
        (then :meth:`entries` holds only what the window's plans need), else by :meth:`refresh`."""
        view = self._window_from_index(start_ms, end_ms)
        if view is None:
            self.refresh()
        else:
            self._window = view

    def _window_from_index(self, start_ms: int, end_ms: int) -> WindowView | None:
        layout = layout_of(self.store)
        if layout is None or not isinstance(self.store, MarkerStore):
            return None
        return window_from_index(self.store, layout, start_ms, end_ms, self._read_entries)

    def _read_entries(self, names: list[SegmentName]) -> list[CatalogEntry | FormatError | None]:
        headers = self._read_headers(names)
        return [
            h if isinstance(h, FormatError) else _entry(name, h)
            for name, h in zip(names, headers, strict=True)
        ]

    def entries(self) -> list[CatalogEntry]:
        """Every readable segment, by partition then first offset."""
        if self._window is not None:
            return list(self._window.entries)
        return sorted((e for _, e in self._entries.values()), key=lambda e: (e.partition, e.first_offset))

    def partitions(self) -> list[int]:
        return sorted({e.partition for e in self.entries()})

    def of_partition(self, partition: int) -> list[CatalogEntry]:
        """The readable segments of ``partition`` holding events (not gap markers), by first offset."""
        return [e for e in self.entries() if e.partition == partition and not e.is_gap]

    def gaps(self, partition: int | None = None) -> list[CatalogEntry]:
        """The gap markers (of ``partition``, or of every partition)."""
        return [e for e in self.entries() if e.is_gap and partition in (None, e.partition)]

    def next_offset(self, partition: int) -> int:
        """The first offset of ``partition`` the store does not hold (segments and gap markers alike,
        readable or not: a file's name gives its first offset)."""
        ends = [e.last_offset + 1 for e in self.entries() if e.partition == partition]
        for name in self.corrupt:
            parsed = parse_segment_name(name)
            if parsed is not None and parsed[0] == partition:
                ends.append(parsed[1] + 1)
        return max(ends, default=0)

    def covering(self, start_ms: int, end_ms: int) -> list[CatalogEntry]:
        """Segments holding any event in ``[start_ms, end_ms)``."""
        return [e for e in self.entries() if not e.is_gap and e.overlaps(start_ms, end_ms)]

    def plan(
        self, partition: int, start_ms: int, end_ms: int, *, unusable: frozenset[str] = frozenset()
    ) -> list[CatalogEntry]:
        """The segments of ``partition`` to read to rebuild ``[start_ms, end_ms)`` on their own, in
        offset order: from the latest keyframe whose time T is at or before ``start_ms`` (or the first
        segment), then every later segment starting before ``end_ms`` (a later segment can hold late
        events before ``start_ms``: they belong to the state at the start).

        ``unusable``: names of keyframe segments found unreadable, so the plan starts from an earlier
        keyframe instead of continuing from an empty state."""
        if self._window is not None:
            if partition in self._window.keyframes and self._window.keyframes[partition] is None:
                return []  # gap markers only
            keyframe = self._window.keyframes.get(partition)
            if keyframe is None or keyframe in unusable:
                self.refresh()  # the index's keyframe does not read: plan over the whole listing
                return self.plan(partition, start_ms, end_ms, unusable=unusable)
            chain = self.of_partition(partition)  # the keyframe, then what the index found after it
            return _without_covered([chain[0], *(e for e in chain[1:] if e.header.start_ms < end_ms)])
        full = self.of_partition(partition)
        times = keyframe_times(full)
        chain = [e for e in full if e.name not in unusable]
        times = [t for e, t in zip(full, times, strict=True) if e.name not in unusable]
        if not chain:
            return []
        begin = 0
        for i, kf_time in enumerate(times):
            if kf_time is not None and kf_time <= start_ms:
                begin = i
        return _without_covered(
            [chain[begin], *(e for e in chain[begin + 1 :] if e.header.start_ms < end_ms)]
        )


def _entry(name: SegmentName, header: SegmentHeader) -> CatalogEntry | None:
    parsed = parse_segment_name(name)
    return None if parsed is None else CatalogEntry(name, parsed[0], parsed[1], header)


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
