"""Reading a partition's history back from the store: restore a compactor, rebuild a window.

Both start at a keyframe and fold the later segments through :class:`ObjectState`, the same rules the
sink applied when it wrote them, so the rebuilt state equals the state the sink had.
"""

from __future__ import annotations

import bisect
import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipeline.formats.segment import EventWires, Segment, decode_segment
from pipeline.io.segment_store import SegmentStore
from pipeline.model.errors import FormatError
from pipeline.model.events import Event
from pipeline.sink.catalog import CatalogEntry, SegmentCatalog
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.state import ObjectState

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


def restore_partition(
    catalog: SegmentCatalog, partition: int, settings: CompactionSettings
) -> PartitionCompactor:
    """A compactor that continues ``partition`` where its stored segments end."""
    chain = catalog.of_partition(partition)
    begin = None
    for i, e in enumerate(chain):
        if e.header.keyframe_at_ms is not None:
            begin = i
    state = ObjectState()
    next_offset = 0
    for entry in chain[begin or 0 :]:
        try:
            segment = load_segment(catalog.store, entry)
        except FormatError as exc:
            log.warning("skipping corrupt segment while restoring partition %d: %s", partition, exc)
            continue
        if segment.keyframe is not None:
            state = ObjectState.from_keyframe(segment.keyframe)
        for event in segment.events:
            state.offer(event)
    if chain:
        next_offset = max(e.last_offset for e in chain) + 1
    since = None if begin is None else len(chain) - begin - 1
    return PartitionCompactor(
        partition, settings, state=state, next_offset=next_offset, segments_since_keyframe=since
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
    catalog.refresh()
    window = Window(start_ms, end_ms)
    for name, reason in sorted(catalog.corrupt.items()):
        _skip(window, warn, f"segment {catalog.store.describe(name)} is corrupt and was skipped: {reason}")
    for partition in catalog.partitions():  # ascending: the tie order of equal times (see below)
        fold = _PartitionFold(start_ms, end_ms)
        for index, entry in enumerate(catalog.plan(partition, start_ms, end_ms)):
            # plan() starts at the latest keyframe at or before start_ms; when retention removed older
            # history, the first remaining keyframe is the best known state. Later keyframes are not
            # needed (the fold already holds that state) and are most of a segment's decoding cost.
            kf_at = entry.header.keyframe_at_ms
            use_keyframe = kf_at is not None and (index == 0 or kf_at <= start_ms)
            try:
                segment = load_segment(catalog.store, entry, with_keyframe=use_keyframe, wires=wires)
            except FormatError as exc:
                _skip(window, warn, f"segment {entry.name} is corrupt and was skipped: {exc}")
                fold.hole()
                continue
            fold.add(entry, segment)
        window.state.objects.update(fold.at_start.objects)
        window.state.lifecycles.update(fold.at_start.lifecycles)
        window.events += fold.in_window
    # Partitions hold disjoint keys, so their states merge without conflict; events interleave by time,
    # ties broken by partition then offset order, which does not depend on where segments were cut.
    # The list is in (partition, offset) order already, so a stable sort by time alone gives that order
    # (and finds each partition's run already sorted).
    window.events.sort(key=_ts)
    return window


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
