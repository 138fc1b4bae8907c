"""Reading a partition's history back from the store: restore a compactor, rebuild a window.

Both start at a keyframe and fold the later segments through :class:`ObjectState`, the same rules the
sink applied when it wrote them, so the rebuilt state equals the state the sink had.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
    ordered: list[tuple[int, int, int, Event]] = []
    for partition in catalog.partitions():
        seen = ObjectState()  # everything folded so far: decides duplicates
        at_start = ObjectState()  # only events before start_ms: the state the window starts from
        seq = 0
        next_offset = None  # the offset after the last segment folded
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
                next_offset = -1  # a hole: what follows is checked event by event again
                continue
            if segment.keyframe is not None:
                seen = ObjectState.from_keyframe(segment.keyframe)
                at_start = ObjectState.from_keyframe(segment.keyframe)
            # A segment that continues the previous one offset for offset was deduplicated by the sink
            # against this very state (the same fold): its events are taken as they are, which halves
            # the cost of a rebuild. Overlaps (two sinks raced through a rebalance) and holes are
            # checked event by event.
            trusted = segment.keyframe is not None or next_offset in (None, entry.first_offset)
            next_offset = entry.last_offset + 1
            for e in segment.events:
                if e.ts_ms >= end_ms:
                    continue
                if trusted:
                    seen.apply(e)
                elif not seen.offer(e):
                    continue
                if e.ts_ms < start_ms:
                    at_start.apply(e)
                    continue
                ordered.append((e.ts_ms, partition, seq, e))
                seq += 1
        window.state.objects.update(at_start.objects)
        window.state.lifecycles.update(at_start.lifecycles)
    # Partitions hold disjoint keys, so their states merge without conflict; events interleave by time,
    # ties broken by partition then offset order, which does not depend on where segments were cut.
    ordered.sort(key=lambda t: (t[0], t[1], t[2]))
    window.events = [t[3] for t in ordered]
    return window


def _skip(window: Window, warn: WarnFn | None, message: str) -> None:
    window.skipped.append(message)
    log.warning("%s", message)
    if warn is not None:
        warn(message)
