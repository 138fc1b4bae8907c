"""Settling a partition's state at each closed segment without walking the whole state.

:meth:`ObjectState.settle <pipeline.store.state.ObjectState.settle>` is the definition: it visits every
tombstone, gap and lifecycle to find the few past the horizon. The sink settles at every segment it
closes, so with 60 s windows that walk cost as much as folding the segment's events (a state of 4,000
objects and 1,500 lifecycles per partition in ``bench/bench_sink.py``; memory-bound: the same walk in C
saved a third). :class:`SettleIndex` forgets exactly the same entries, visiting only those that came
due: each remembered entry is queued by its event time when the segment that applied it closes.

Why it forgets the same entries: an entry can be forgotten only once its event time is before the
horizon. Every tombstone, gap and ended lifecycle in the state was either in it when the index was
built or applied by a segment since, so it is queued under its own time; once that time is past the
horizon it is popped and decided by the definition's rules. An ended lifecycle past the horizon that
must stay (its pod is still live, or it ended after the settle time) is kept aside and decided again at
every settle, as the definition would. A queued entry no longer in the state (replaced or removed
since) is passed over: its replacement was queued itself. tests/unit/test_settle_index.py compares both
over random histories.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Sequence
from itertools import compress, repeat
from operator import is_not

from pipeline.formats.wire.probe import EventHead
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey
from pipeline.store.state import ObjectState

AnyEvent = Event | EventHead

_TOMBSTONES, _GAPS, _LIFECYCLES = 0, 1, 2
_type = operator.attrgetter("type")


class SettleIndex:
    """The entries of one :class:`ObjectState` that a settle may forget, by event time.

    Built from the state as it is (one walk); then :meth:`settle` is given the events each closed
    segment applied, and nothing else may change the state in between."""

    def __init__(self, state: ObjectState) -> None:
        self.state = state
        self._due: list[tuple[int, int, int, ObjectKey, AnyEvent]] = []  # (ts, seq, kind, key, entry)
        self._seq = itertools.count()
        self._kept: dict[ObjectKey, AnyEvent] = {}
        """Ended lifecycles past the horizon still in the state (live pod, or ended after the settle
        time): decided again at each settle."""
        for kind, entries in (
            (_TOMBSTONES, state.tombstones),
            (_GAPS, state.gaps),
            (_LIFECYCLES, state.lifecycles),
        ):
            for key, e in entries.items():
                self._queue(kind, key, e)

    def _queue(self, kind: int, key: ObjectKey, e: AnyEvent) -> None:
        if kind != _LIFECYCLES or e.pod_end_ms is not None:  # a running pod's lifecycle never leaves
            heapq.heappush(self._due, (e.ts_ms, next(self._seq), kind, key, e))

    def settle(self, applied: Sequence[AnyEvent], before_ms: int, horizon_ms: int) -> None:
        """``state.settle(before_ms, horizon_ms)``, once the events ``applied`` since the last call
        (in order) are in the state."""
        deleted, lifecycle = EventType.DELETED, EventType.POD_LIFECYCLE
        # most events apply objects, which only ever remove entries: pass over them in C
        for e in compress(applied, map(is_not, map(_type, applied), repeat(EventType.APPLIED))):
            if e.type is deleted:
                self._queue(_TOMBSTONES, e.key, e)
            elif e.type is lifecycle:
                self._queue(_LIFECYCLES, e.key, e)
            else:
                self._queue(_GAPS, e.key, e)
        state = self.state
        forget_before = before_ms - horizon_ms
        due = self._due
        while due and due[0][0] < forget_before:
            _, _, kind, key, e = heapq.heappop(due)
            if kind == _LIFECYCLES:
                if state.lifecycles.get(key) is e:
                    self._kept[key] = e  # decided below, with those kept before
            else:
                entries = state.tombstones if kind == _TOMBSTONES else state.gaps
                if entries.get(key) is e:
                    del entries[key]
        if self._kept:
            self._settle_lifecycles(before_ms, forget_before)

    def _settle_lifecycles(self, before_ms: int, forget_before: int) -> None:
        lifecycles, objects = self.state.lifecycles, self.state.objects
        for key, e in list(self._kept.items()):
            if lifecycles.get(key) is not e:
                del self._kept[key]  # replaced (queued again) or gone
            elif (
                e.pod_end_ms is not None
                and e.pod_end_ms < before_ms
                and e.ts_ms < forget_before
                and key not in objects
            ):
                del lifecycles[key]
                del self._kept[key]
