"""One window's part of the catalog, read from the store's index (:mod:`pipeline.store.segment_index`)
instead of the store's whole listing; see :meth:`pipeline.store.catalog.SegmentCatalog.refresh_window`.

Per partition, the window starts from the latest readable keyframe whose time is at or before its
start, as :meth:`SegmentCatalog.plan` would choose over the whole listing, and takes what the index
names after it. Where the index cannot say what the whole listing would (a keyframe that does not
read, a window before a partition's first remaining keyframe, too many markers without segments), it
answers None and the catalog lists the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.model.errors import FormatError
from pipeline.store import segment_index
from pipeline.store.segment_index import MarkerStore
from pipeline.store.segment_store import IndexLayout, MissingSegmentError, SegmentName

if TYPE_CHECKING:
    from pipeline.store.catalog import CatalogEntry

ReadEntries = Callable[[list[SegmentName]], "list[CatalogEntry | FormatError | None]"]
"""Reads segment headers (None: not a segment name; a FormatError: unreadable or missing)."""

KEYFRAME_LOOKBACK_MS = 6 * 3_600_000
"""How far before a window the index first looks for its keyframe (widened until found)."""
ORPHANS_CHECKED = 16
"""Keyframe markers after a window's start checked for a segment before giving up on the index."""


@dataclass(slots=True)
class WindowView:
    """What the index gave for one window: its candidates, and where each partition starts."""

    entries: list[CatalogEntry]
    corrupt: dict[SegmentName, str]
    keyframes: dict[int, SegmentName | None]
    """Per partition, the keyframe segment the window starts from (None: it has gap markers only)."""


class _IndexCannotAnswerError(Exception):
    """The index cannot answer as the whole listing would."""


_NO_EVENTS = None


def window_from_index(
    store: MarkerStore, layout: IndexLayout, start_ms: int, end_ms: int, read: ReadEntries
) -> WindowView | None:
    if not segment_index.is_ready(store):
        return None
    try:
        starts = {p: _starting_keyframe(store, p, start_ms, read) for p in segment_index.partitions(store)}
    except _IndexCannotAnswerError:
        return None
    keyframes = {p: k for p, k in starts.items() if k is not None}
    # A segment after keyframe K that is not late starts at or after its writer's high water minus the
    # slack, and that high water is at least K's keyframe time - 1 and K's first event time.
    lowest = min((max(e.header.start_ms, t - 1) for e, t in keyframes.values()), default=start_ms)
    first_bucket = layout.bucket(lowest - layout.late_slack_ms)
    names = set(segment_index.started_in(store, first_bucket, layout.bucket(end_ms - 1)))
    for entry, _ in keyframes.values():
        names.update(segment_index.late_after(store, entry.name))
    names.update(segment_index.gaps(store))
    names.difference_update(entry.name for entry, _ in keyframes.values())
    ordered = sorted(names)
    entries = [entry for entry, _ in keyframes.values()]
    corrupt: dict[SegmentName, str] = {}
    for name, got in zip(ordered, read(ordered), strict=True):
        if got is None or isinstance(got, MissingSegmentError):
            continue  # a marker whose segment was never written, or is deleted
        if isinstance(got, FormatError):
            corrupt[name] = str(got)
        elif got.is_gap or (
            got.partition in keyframes and got.first_offset > keyframes[got.partition][0].first_offset
        ):
            entries.append(got)
    entries.sort(key=lambda e: (e.partition, e.first_offset))
    return WindowView(entries, corrupt, {p: None if k is None else k[0].name for p, k in starts.items()})


def _starting_keyframe(
    store: MarkerStore, partition: int, start_ms: int, read: ReadEntries
) -> tuple[CatalogEntry, int] | None:
    """The latest readable keyframe segment of ``partition`` with a time at or before ``start_ms``,
    with that time; None if the partition has no segment with events. Looks back 6 hours first, then
    4 times further each round (a keyframe is written every few segments). Markers without their
    segment (a write refused after its markers, a deletion racing this read) are passed over."""
    lookback = KEYFRAME_LOOKBACK_MS
    while True:
        since = max(start_ms - lookback, 0)
        for marker in reversed(segment_index.keyframes_through(store, partition, start_ms, since_ms=since)):
            got = read([marker.name])[0]
            if got is None or isinstance(got, MissingSegmentError):
                continue
            if isinstance(got, FormatError) or got.header.keyframe_at_ms is None:
                raise _IndexCannotAnswerError  # unreadable: the whole listing plans from an earlier keyframe
            return got, marker.keyframe_time
        if since == 0:
            break
        lookback *= 4
    # No keyframe at or before the start. A partition's first segment with events has one (and
    # retention keeps one), so if a later keyframe exists the window starts before the partition's
    # first remaining keyframe: the whole listing plans that (from its first segment).
    later = segment_index.keyframes_after(store, partition, start_ms, limit=ORPHANS_CHECKED)
    got_any = read([m.name for m in later])
    if len(later) == ORPHANS_CHECKED or any(not isinstance(g, MissingSegmentError) for g in got_any):
        raise _IndexCannotAnswerError
    return _NO_EVENTS
