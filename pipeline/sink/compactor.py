"""Compaction of one partition's events into segments: dedupe, event-time windows, idleness, keyframes.

One :class:`PartitionCompactor` per assigned partition. It is pure logic (no I/O, the clock is passed
in), so every rule is unit-testable:

* Offsets below ``next_offset`` are already inside a durable segment (a redelivery after a crash
  between write and commit) and are dropped.
* A duplicate change (see :mod:`pipeline.store.state`) is absorbed: its offset is covered, nothing stored.
* Windows are aligned to multiples of ``window_ms`` of event time, so the same events give the same
  segments. An event at or after the open segment's window end closes it. A late event (before the
  window start) stays in the open segment, whose start is lowered to cover it.
* :meth:`PartitionCompactor.close_if_idle` closes a segment that received nothing for ``idle_close_s``
  of wall-clock time: an idle topic still makes its data durable and its offsets committed.
* Every ``keyframe_every``-th segment of a partition (and the first one) carries a keyframe, and with
  ``keyframe_cost`` also the first segment once the events written since the last keyframe weigh
  that many times it (see :class:`CompactionSettings`). A keyframe
  means exactly one thing: **the state after offset N** (``keyframe_offset``: every offset of the
  partition up to N folded in offset order, nothing after it), **at event time T** (``keyframe_time``:
  every event folded into it is before T). It is *not* the state at the window start: a window is split
  routinely (idle close, rebalance flush, size cap), and the earlier parts of the window are inside the
  state. A reader rebuilding ``[A, B)`` may start from a keyframe only if T <= A, and then folds every
  later segment (late events before A included); see :meth:`pipeline.store.catalog.SegmentCatalog.plan`.
  The header's ``keyframe_at_ms`` (what a reader of one file sees) is ``min(T, start_ms)``.
* Once a segment is closed the state forgets what only it needed (tombstones; ended lifecycles of pods
  that are gone, see :meth:`ObjectState.settle`): the state and keyframes follow live objects.
* Each segment names the topic it came from (``source``, the topic's identity) and the fencing epoch
  of its writer (``writer_epoch``, see :mod:`pipeline.store.segment_store`).

Events arrive as :class:`~pipeline.formats.wire.probe.EventHead` values (checked, body not decoded) and leave
as their wire bytes in a :class:`~pipeline.formats.segment.content.WireSegment`: no object body is decoded or
re-encoded on the way from Kafka to disk.
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.formats.segment.content import Segment, WireSegment, build_wire_segment
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import ZSTD_LEVEL, encode_wire_segment
from pipeline.formats.segment.header import PartitionRange
from pipeline.formats.wire import native
from pipeline.formats.wire.probe import EventHead
from pipeline.io.kafka.settings import EVENTS_TOPIC
from pipeline.model.events import Event
from pipeline.sink import native_fold
from pipeline.sink.settling import SettleIndex
from pipeline.store.segment_index import SegmentFacts
from pipeline.store.segment_store import SegmentName, WriteFence, segment_name
from pipeline.store.state import ObjectState


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """How events are grouped into segments.

    ``window_ms``: event-time width of a segment window (default 60 s).
    ``idle_close_s``: wall-clock seconds without events after which an open segment is closed (10 s).
    ``keyframe_every``: a keyframe in every N-th segment of a partition (60: at least hourly at the
    default windows, so a restore or a reader GETs at most that many segments after one); 1 = in
    every segment.
    ``keyframe_cost``: also a keyframe once the wire bytes of the events stored since the last one
    reach this many times that keyframe's (or :data:`KEYFRAME_COST_FLOOR`, whichever is larger; 4);
    None: by count alone. Keyframes are then a share of at most about ``1 / (1 + keyframe_cost)`` of
    a busy cluster's store, and a reader reads at most about ``1 + keyframe_cost`` keyframes' worth of
    segments from a keyframe to any time. Keyframes were 75 % of the store at the previous default (a
    keyframe every 10 segments); see ``docs/storage-cost.md`` (``bench/bench_storage.py``). After a
    restore, the events before it are not counted (the next keyframe may come up to once more late).
    ``max_events``: an open segment is closed once it holds this many events (bounds memory; 200 000).
    ``tombstone_horizon_ms``: event time for which a deleted object (and an ended pod's lifecycle) is
    still remembered after its segment closed, to refuse stale re-publishes of it (10 min; see
    :meth:`~pipeline.store.state.ObjectState.settle`): the state holds live objects plus this much churn.
    """

    topic: str = EVENTS_TOPIC
    window_ms: int = 60_000
    idle_close_s: float = 10.0
    keyframe_every: int = 60
    keyframe_cost: float | None = 4.0
    max_events: int = 200_000
    tombstone_horizon_ms: int = 600_000


KEYFRAME_COST_FLOOR = 1 << 20
"""The least wire bytes of events between keyframes written by cost (1 MiB): a small cluster's keyframe
is a few KB, and one per segment would make readers fold nothing yet cost a header and a list a time."""


@dataclass(frozen=True, slots=True)
class ClosedSegment:
    """A segment ready to be written; once durable, offsets up to ``next_offset`` may be committed."""

    name: SegmentName
    partition: int
    wire: WireSegment
    high_water_ms: int
    """The partition's latest event time once this segment's events were folded in (its index marks
    the segment late when it starts well before this, see :mod:`pipeline.store.segment_index`)."""

    @property
    def first_offset(self) -> int:
        return self.wire.header.partitions[0].first_offset

    @property
    def next_offset(self) -> int:
        return self.wire.header.partitions[0].last_offset + 1

    @property
    def fence(self) -> WriteFence | None:
        """What writing it claims (None for a compactor without a fencing epoch: tools, tests)."""
        epoch = self.wire.header.writer_epoch
        if epoch is None:
            return None
        return WriteFence(self.partition, self.first_offset, self.next_offset - 1, epoch)

    def facts(self) -> SegmentFacts:
        header = self.wire.header
        return SegmentFacts(
            self.name, self.partition, self.first_offset, header, self.high_water_ms, header.keyframe_time
        )

    def encode(self, level: int = ZSTD_LEVEL, format_version: int | None = None) -> bytes:
        """The file bytes (CPU-bound: delta coding and zstd; run it in a thread from async code), in
        ``format_version`` (default: the current one)."""
        if format_version is None:
            return encode_wire_segment(self.wire, level)
        return encode_wire_segment(self.wire, level, format_version=format_version)

    @property
    def segment(self) -> Segment:
        """The segment decoded (for tools and tests; the sink itself never decodes what it writes)."""
        return decode_segment(self.encode(), self.name)


@dataclass(slots=True)
class _OpenSegment:
    first_offset: int
    last_offset: int
    window_start: int
    window_end: int
    min_ts: int
    last_ts: int
    keyframe: tuple[int, list[EventHead], list[EventHead], list[EventHead]] | None  # T, state
    last_add: float
    events: list[EventHead] = field(default_factory=list)
    ordered: bool = True  # events arrived in time order: the segment needs no sort


class PartitionCompactor:
    """Turns one partition's messages (in offset order) into closed segments."""

    def __init__(
        self,
        partition: int,
        settings: CompactionSettings,
        *,
        state: ObjectState | None = None,
        next_offset: int = 0,
        segments_since_keyframe: int | None = None,
        max_ts: int = -1,
        source: str | None = None,
        epoch: int | None = None,
    ) -> None:
        """``state``, ``next_offset``, ``segments_since_keyframe`` and ``max_ts`` (the latest event time
        folded into ``state``, -1 for none) restore a partition from its stored segments (see
        :func:`pipeline.sink.restore.restore_partition`); None means no keyframe yet. ``source`` and
        ``epoch`` are written into every segment's header (topic identity, writer fencing epoch)."""
        self.partition = partition
        self.settings = settings
        self.state = state if state is not None else ObjectState()
        self._settling = SettleIndex(self.state)
        self.next_offset = next_offset
        self.max_ts = max_ts
        self.source = source
        self.epoch = epoch
        self._since_keyframe = segments_since_keyframe
        self._bytes_since_keyframe = 0
        self._keyframe_bytes = 0
        self._open: _OpenSegment | None = None
        self.duplicates = 0
        self.redelivered = 0

    @property
    def committable_offset(self) -> int:
        """The offset to commit: everything before it is durable (or deliberately dropped)."""
        return self._open.first_offset if self._open is not None else self.next_offset

    @property
    def consumed_offset(self) -> int:
        """The next offset this compactor expects (everything before it was taken, durable or not)."""
        return self._open.last_offset + 1 if self._open is not None else self.next_offset

    @property
    def has_open_segment(self) -> bool:
        return self._open is not None

    def add(self, offset: int, event: EventHead | Event | None, now: float) -> list[ClosedSegment]:
        """Take the message at ``offset`` (``event`` None: undecodable, already dead-lettered).

        Returns the segments this closes (at most one)."""
        if isinstance(event, Event):  # tools and tests hand in decoded events
            event = EventHead.of(event)
        return self.add_many([(offset, event)], now)

    def add_many(self, messages: Iterable[tuple[int, EventHead | None]], now: float) -> list[ClosedSegment]:
        """:meth:`add` for a run of messages in offset order (the sink's path: one call per partition
        and batch, with the per-message work kept in one loop). Returns the segments this closes."""
        closed: list[ClosedSegment] = []
        is_duplicate, apply = self.state.is_duplicate, self.state.apply
        max_events = self.settings.max_events
        current = self._open
        for offset, event in messages:
            if offset < self.next_offset or (current is not None and offset <= current.last_offset):
                self.redelivered += 1
                continue
            if event is None or is_duplicate(event):
                if event is not None:
                    self.duplicates += 1
                self._cover(offset)
                continue
            ts_ms = event.ts_ms
            if current is not None and (ts_ms >= current.window_end or len(current.events) >= max_events):
                closed.append(self._close())
                current = None
            if current is None:
                current = self._start(offset, ts_ms, now)  # its keyframe: the state before this event
            apply(event)
            current.events.append(event)
            current.last_offset = offset
            current.min_ts = min(current.min_ts, ts_ms)
            current.ordered = current.ordered and ts_ms >= current.last_ts
            current.last_ts = ts_ms
            current.last_add = now
        return closed

    def add_batch(self, offsets: list[int], heads: list[EventHead | None], now: float) -> list[ClosedSegment]:
        """:meth:`add_many` for one partition's batch as parallel lists (the sink's path).

        The bulk of the events is folded by :func:`pipeline.sink.native_fold.fold` in C; every event it
        leaves (the first of a segment, one outside the open window, one needing the content rules)
        goes through :meth:`add_many`, so both paths apply exactly the same rules."""
        if not native.NATIVE:
            return self.add_many(zip(offsets, heads, strict=True), now)
        closed: list[ClosedSegment] = []
        state = self.state
        dicts = (state.objects, state.tombstones, state.lifecycles, state.gaps)
        # Offsets increase within a batch, so redeliveries (below what was taken) are a prefix.
        i = bisect_left(offsets, self.consumed_offset)
        self.redelivered += i
        n = len(offsets)
        max_events = self.settings.max_events
        while i < n:
            current = self._open
            if current is not None:
                kept = current.events
                before = len(kept)
                folded = native_fold.fold(
                    heads, i, dicts, current.window_end, max_events - before, kept, current.last_ts
                )
                if folded.stop > i:
                    current.last_offset = offsets[folded.stop - 1]
                    self.duplicates += folded.duplicates
                    if len(kept) > before:
                        current.min_ts = min(current.min_ts, folded.min_ts)
                        current.last_ts = folded.last_ts
                        current.ordered = current.ordered and folded.ordered
                        current.last_add = now
                i = folded.stop
                if folded.why == native_fold.FOLD_END:
                    break
            closed += self.add_many([(offsets[i], heads[i])], now)
            i += 1
        return closed

    def close_if_idle(self, now: float) -> ClosedSegment | None:
        """Close the open segment if nothing arrived for ``idle_close_s`` seconds."""
        if self._open is not None and now - self._open.last_add >= self.settings.idle_close_s:
            return self._close()
        return None

    def flush(self) -> ClosedSegment | None:
        """Close the open segment now (shutdown, partition revoked)."""
        return self._close() if self._open is not None else None

    def _cover(self, offset: int) -> None:
        if self._open is not None:
            self._open.last_offset = offset
        else:
            self.next_offset = offset + 1

    def _start(self, offset: int, ts_ms: int, now: float) -> _OpenSegment:
        window = self.settings.window_ms
        window_start = ts_ms - ts_ms % window
        keyframe = None
        if (
            self._since_keyframe is None
            or self._since_keyframe + 1 >= self.settings.keyframe_every
            or self._keyframe_is_due_by_cost()
        ):
            # the state after offset next_offset - 1 (this segment's first offset is next_offset or
            # later: only covered offsets lie between), at event time T = one past the latest event in it
            keyframe = (self.max_ts + 1, *self.state.keyframe_heads())
        self._open = _OpenSegment(
            first_offset=self.next_offset if self.next_offset <= offset else offset,
            last_offset=offset,
            window_start=window_start,
            window_end=window_start + window,
            min_ts=ts_ms,
            last_ts=ts_ms,
            keyframe=keyframe,
            last_add=now,
        )
        return self._open

    def _keyframe_is_due_by_cost(self) -> bool:
        cost = self.settings.keyframe_cost
        return cost is not None and self._bytes_since_keyframe >= cost * max(
            self._keyframe_bytes, KEYFRAME_COST_FLOOR
        )

    def _close(self) -> ClosedSegment:
        current = self._open
        assert current is not None  # callers check
        self._open = None
        start = min(current.window_start, current.min_ts)
        keyframe = current.keyframe
        keyframe_time = None
        tombstones: list[EventHead] = []
        wire_keyframe = None
        if keyframe is not None:
            keyframe_time, objects, lifecycles, tombstones = keyframe
            wire_keyframe = (min(keyframe_time, start), objects, lifecycles)
            self._since_keyframe = 0
            self._bytes_since_keyframe = 0
        else:
            self._since_keyframe = (self._since_keyframe or 0) + 1
        wire = build_wire_segment(
            current.events,
            start_ms=start,
            end_ms=current.window_end,
            partitions=[
                PartitionRange(self.settings.topic, self.partition, current.first_offset, current.last_offset)
            ],
            keyframe=wire_keyframe,
            in_time_order=current.ordered,
            keyframe_offset=current.first_offset - 1,
            keyframe_time=keyframe_time,
            keyframe_tombstones=tombstones,
            source=self.source,
            writer_epoch=self.epoch,
        )
        if keyframe is not None:
            self._keyframe_bytes = (
                len(wire.keyframe_objects) + len(wire.keyframe_lifecycles) + len(wire.keyframe_tombstones)
            )
        self._bytes_since_keyframe += len(wire.events)
        events = current.events
        if events:
            self.max_ts = max(self.max_ts, events[-1].ts_ms if current.ordered else max(map(_ts, events)))
        # state.settle's rules, visiting only the entries that came due (one walk of the state per
        # segment cost as much as folding its events)
        self._settling.settle(events, self.max_ts + 1, self.settings.tombstone_horizon_ms)
        self.next_offset = current.last_offset + 1
        return ClosedSegment(
            segment_name(self.partition, current.first_offset), self.partition, wire, self.max_ts
        )


_ts = operator.attrgetter("ts_ms")
