"""Reading a partition's history back from the store: rebuild a window of every partition.

A window starts at a keyframe and folds the later segments through :class:`ObjectState`, the same rules
the sink applied when it wrote them, so the rebuilt state equals the state the sink had (the sink's own
restart folds the same way: :mod:`pipeline.sink.restore`).
"""

from __future__ import annotations

import bisect
import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipeline.formats.segment.content import Segment
from pipeline.formats.segment.decode import EventWires, decode_segment
from pipeline.model.errors import FormatError
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey
from pipeline.store.catalog import CatalogEntry, SegmentCatalog
from pipeline.store.segment_store import SegmentStore
from pipeline.store.state import ObjectState

log = logging.getLogger("kubetape.sink")

WarnFn = Callable[[str], None]


def load_segment(
    store: SegmentStore, entry: CatalogEntry, *, with_keyframe: bool = True, wires: EventWires | None = None
) -> Segment:
    """Decode one segment (raises FormatError naming the file); see :func:`decode_segment` for
    ``with_keyframe`` and ``wires``."""
    return decode_segment(
        store.get(entry.name), store.describe(entry.name), with_keyframe=with_keyframe, wires=wires
    )


@dataclass(slots=True)
class Window:
    """The state at ``start_ms`` and the (deduplicated, time-ordered) events of ``[start_ms, end_ms)``."""

    start_ms: int
    end_ms: int
    state: ObjectState = field(default_factory=ObjectState)
    events: list[Event] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def rebuild_window(
    catalog: SegmentCatalog,
    start_ms: int,
    end_ms: int,
    warn: WarnFn | None = None,
    *,
    wires: EventWires | None = None,
) -> Window:
    """Rebuild ``[start_ms, end_ms)`` across every partition of the store.

    Corrupt segments are reported through ``warn`` (and listed in ``Window.skipped``) and skipped; the
    rest of the window is still rebuilt. ``wires`` collects the stored bytes of the events read, so
    that writing them again (export) needs no re-encoding."""
    catalog.refresh_window(start_ms, end_ms)
    window = Window(start_ms, end_ms)
    for name, reason in sorted(catalog.corrupt.items()):
        _skip(window, warn, f"segment {catalog.store.describe(name)} is corrupt and was skipped: {reason}")
    for partition in catalog.partitions():  # ascending: the tie order of equal times (see below)
        fold = _fold_partition(catalog, window, partition, warn, wires)
        window.state.objects.update(fold.at_start.objects)
        window.state.lifecycles.update(fold.at_start.lifecycles)
        window.events += fold.in_window
        window.events += _gap_events(catalog, window, partition, warn)
    # Partitions hold disjoint keys, so their states merge without conflict; events interleave by time,
    # ties broken by partition then offset order, which does not depend on where segments were cut.
    # The list is in (partition, offset) order already, so a stable sort by time alone gives that order
    # (and finds each partition's run already sorted).
    window.events.sort(key=_ts)
    return window


def _fold_partition(
    catalog: SegmentCatalog, window: Window, partition: int, warn: WarnFn | None, wires: EventWires | None
) -> _PartitionFold:
    """One partition's part of the window, from the plan's keyframe. plan() starts at the latest
    keyframe whose time is at or before the start (when retention removed older history, the first
    remaining keyframe is the best known state); later keyframes are not needed (the fold already
    holds that state) and are most of a segment's decoding cost. An unreadable keyframe segment makes
    the plan start again from an earlier keyframe, never from an empty state."""
    unusable: set[str] = set()
    while True:
        fold = _PartitionFold(window.start_ms, window.end_ms)
        replan = False
        for index, entry in enumerate(
            catalog.plan(partition, window.start_ms, window.end_ms, unusable=frozenset(unusable))
        ):
            use_keyframe = index == 0 and entry.header.keyframe_at_ms is not None
            try:
                segment = load_segment(catalog.store, entry, with_keyframe=use_keyframe, wires=wires)
            except FormatError as exc:
                if use_keyframe:
                    unusable.add(entry.name)
                    replan = True
                    _skip(
                        window,
                        warn,
                        f"segment {entry.name} is corrupt and was skipped (its keyframe too: the window "
                        f"is rebuilt from an earlier keyframe): {exc}",
                    )
                    break
                _skip(window, warn, f"segment {entry.name} is corrupt and was skipped: {exc}")
                fold.hole()
                continue
            fold.add(entry, segment)
        if not replan:
            return fold


def gap_key(topic: str, partition: int) -> str:
    """The key of the GAP events that stand for a store gap marker of ``topic``/``partition``."""
    return f"kubetape.dev/TopicPartition/{topic.replace('/', '_') or '_'}/{partition}"


def _gap_events(catalog: SegmentCatalog, window: Window, partition: int, warn: WarnFn | None) -> list[Event]:
    """Each gap marker of ``partition`` that can matter to the window (it starts before the window's
    end: what it lost may be missing from the state at the start or from the window) as a warning and
    as a GAP event inside the window, so the exported trace itself says so (inspect and replay report
    it)."""
    out = []
    for gap in catalog.gaps(partition):
        h = gap.header
        if h.start_ms >= window.end_ms:
            continue
        lost = h.partitions[0]
        message = (
            f"partition {partition}: offsets {lost.first_offset}..{lost.last_offset} of {lost.topic} were "
            f"lost ({h.gap_reason}); changes between {h.start_ms} and {h.end_ms} ms may be missing from "
            "this export"
        )
        _skip(window, warn, message)
        ts = min(max(h.start_ms, window.start_ms), window.end_ms - 1)
        out.append(
            Event.gap(
                ts,
                ObjectKey(gap_key(lost.topic, partition)),
                reason=(
                    f"kubetape store gap: offsets {lost.first_offset}..{lost.last_offset} of {lost.topic} "
                    f"partition {partition} were lost ({h.gap_reason})"
                ),
                from_rv=str(lost.first_offset),
                to_rv=str(lost.last_offset),
            )
        )
    return out


_ts = operator.attrgetter("ts_ms")


class _PartitionFold:
    """One partition's segments, in offset order, folded into the state at ``start_ms`` and the events
    of ``[start_ms, end_ms)``, duplicates dropped as the sink drops them."""

    def __init__(self, start_ms: int, end_ms: int) -> None:
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.at_start = ObjectState()  # only events before start_ms: the state the window starts from
        self.in_window: list[Event] = []
        # Everything folded so far decides duplicates. It is only consulted for a segment that does not
        # continue the previous one (rare), so trusted events wait in `_unfolded` until then: folding
        # every event up front, one call per event, cost about a tenth of a rebuild.
        self._seen = ObjectState()
        self._unfolded: list[Sequence[Event]] = []
        self._next_offset: int | None = None  # the offset after the last segment folded; -1: a hole

    def hole(self) -> None:
        """A segment could not be read: what follows is checked event by event again."""
        self._next_offset = -1

    def add(self, entry: CatalogEntry, segment: Segment) -> None:
        if segment.keyframe is not None:
            self._seen = ObjectState.from_keyframe(segment.keyframe)
            self._unfolded = []
            self.at_start = ObjectState.from_keyframe(segment.keyframe)
        # A segment that continues the previous one offset for offset was deduplicated by the sink
        # against this very state (the same fold): its events are taken as they are, which halves
        # the cost of a rebuild. Overlaps (two sinks raced through a rebalance) and holes are
        # checked event by event.
        trusted = segment.keyframe is not None or self._next_offset in (None, entry.first_offset)
        self._next_offset = entry.last_offset + 1
        if trusted:
            self._take_trusted(segment.events)
        else:
            self._take_checked(segment.events)

    def _take_trusted(self, events: Sequence[Event]) -> None:
        # A segment's events are sorted by time (checked on decoding): the window cuts it in three runs.
        start = bisect.bisect_left(events, self.start_ms, key=_ts)
        end = bisect.bisect_left(events, self.end_ms, lo=start, key=_ts)
        self._unfolded.append(events[:end])
        apply = self.at_start.apply
        for e in events[:start]:
            apply(e)
        self.in_window += events[start:end]

    def _take_checked(self, events: Sequence[Event]) -> None:
        seen = self._seen
        for run in self._unfolded:
            for e in run:
                seen.apply(e)
        self._unfolded = []
        for e in events:
            if e.ts_ms >= self.end_ms or not seen.offer(e):
                continue
            if e.ts_ms < self.start_ms:
                self.at_start.apply(e)
            else:
                self.in_window.append(e)


def _skip(window: Window, warn: WarnFn | None, message: str) -> None:
    window.skipped.append(message)
    log.warning("%s", message)
    if warn is not None:
        warn(message)
