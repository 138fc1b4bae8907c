"""Folding events into a per-second cluster timeline: pods by phase per owner, nodes, requested resources.

The same fold serves a recording (``kubetape.events`` or a trace file) and a replay (snapshots of the
simulated cluster's pods and nodes turned into events), so the two timelines are comparable row by row.
What each event contributes (the transitions it queues, dated when they take effect) is
:mod:`pipeline.analytics.timeline_events`'s.

Recorded load (:class:`~pipeline.model.usage.UsageSample`, from ``kubetape.usage`` or a trace's usage) is
folded by :meth:`TimelineFolder.add_usage`: from a sample's time on, its owner's row carries the CPU and
memory its pods used and how many pods the Metrics API reported (``cpu_used_m``, ``memory_used_bytes``,
``usage_pods``: the sum over the owner's template hashes); a gap sample makes them unknown (None) until
the next sample, and a sample of zero pods ends them. The cluster row sums the owners, unknown while any
owner's load is.

Rows are emitted once a second is complete: every transition before its end has been applied. The
fold is pure and deterministic; the ``timeline`` consumer writes its rows to Parquet. This module turns
events into dated transitions (through :mod:`pipeline.analytics.timeline_events`) and seconds; what
the transitions do to the cluster's pods, nodes and desired pods is
:mod:`pipeline.analytics.timeline_tally`'s, the rows are :mod:`pipeline.analytics.timeline_rows`'s and
what a pod requests :mod:`pipeline.analytics.pod_requests`'s.

The work of :meth:`TimelineFolder.advance` is bounded by the changes, not by the seconds it spans, so
one event dated far ahead (a skewed clock, a bogus lifecycle end in an imported trace) cannot make it
walk, and emit a row for, every second up to that date:

* **Quiet stretches are cut short.** After ``max_idle_s`` seconds in a row without any change (default
  :data:`MAX_IDLE_S`, a day), the identical rows stop and the timeline resumes at the second of the next
  change. A second without a row after a row therefore has the state of that row. Folding a year of
  nothing costs a day of rows, not 31 million seconds.
* **Live folds refuse the future.** Given a clock (``clock_ms``, as the live ``metrics`` and
  ``timeline`` consumers do), an event dated more than ``horizon_ms`` (default
  :data:`FUTURE_HORIZON_MS`, an hour) after the clock's now — its time, or its lifecycle's start or
  end — is set aside: counted in :attr:`TimelineFolder.future_dated`, logged with its key and time, and
  not folded, so it neither moves the watermark nor freezes the rows at its date. Offline folds of a
  trace (no clock) take every event: their times are trace times, not wall times.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.analytics.pod_requests import Requests
from pipeline.analytics.timeline_events import EventTransitions
from pipeline.analytics.timeline_rows import PodTimes, TimelineRow
from pipeline.analytics.timeline_tally import (
    USAGE,
    USAGE_GAP,
    ClusterTally,
    Transition,
)
from pipeline.model.errors import FormatError
from pipeline.model.events import Event
from pipeline.model.usage import UsageSample

log = logging.getLogger("kubetape.analytics")


STATE_VERSION = 1
"""Version of :meth:`TimelineFolder.to_state`'s document."""
FUTURE_HORIZON_MS = 3_600_000
"""How far past a live fold's clock an event may be dated before it is set aside (see the module doc)."""
MAX_IDLE_S = 86_400
"""Seconds without any change after which identical rows stop until the next change (module doc)."""


class TimelineFolder(EventTransitions):
    """Feed events in (roughly) time order with :meth:`add`; :meth:`advance`/:meth:`finish` emit rows.

    ``origin_ms`` is second 0 (default: the earliest time seen before the first rows are emitted,
    floored to a second; events of several partitions arrive in no particular time order).
    ``clock_ms`` (wall milliseconds), ``horizon_ms`` and ``max_idle_s`` bound the work against events
    dated far ahead, as the module docstring describes.
    """

    def __init__(
        self,
        origin_ms: int | None = None,
        *,
        clock_ms: Callable[[], int] | None = None,
        horizon_ms: int = FUTURE_HORIZON_MS,
        max_idle_s: int = MAX_IDLE_S,
    ) -> None:
        if max_idle_s < 1 or horizon_ms < 0:
            raise ValueError("max_idle_s must be at least 1 and horizon_ms not negative")
        self.origin_ms = origin_ms
        self.clock_ms = clock_ms
        self.horizon_ms = horizon_ms
        self.max_idle_s = max_idle_s
        self._tally = ClusterTally()
        self._parents: dict[str, str] = {}
        self._templates: dict[str, Requests] = {}
        # transitions are tuples that start with the unique (time, seq): the heap orders them in C
        self._queue: list[Transition] = []
        # (namespace, apiVersion, kind, name) of a controller reference → its owner's key: few owners
        # have many pods, and building a key (checked part by part) each time was a tenth of the fold
        self._parent_keys: dict[tuple[str, str, str, str], str] = {}
        self._seq = 0
        self._next_second = 0
        self._watermark_ms: int | None = None
        self._quiet = 0  # seconds emitted in a row without a change
        self.skipped = 0
        """Events left out because their object had an unexpected shape."""
        self.future_dated = 0
        """Events set aside because they are dated beyond the horizon of the clock (live folds)."""

    # ---- input ------------------------------------------------------------------------------------
    def add(self, event: Event) -> None:
        """Fold one event; an object of unexpected shape is counted in :attr:`skipped` and left out,
        one dated beyond the clock's horizon in :attr:`future_dated` (see the module docstring)."""
        if self.clock_ms is not None and self._beyond_horizon(  # an offline fold has no horizon
            event.key,
            event.type.value,
            event.ts_ms,
            max(event.ts_ms, event.pod_start_ms or 0, event.pod_end_ms or 0),
        ):
            return
        try:
            self._add(event)
        except (AttributeError, TypeError, ValueError, FormatError) as exc:
            self._skip(event, exc)

    def _skip(self, event: Event, exc: Exception) -> None:
        self.skipped += 1
        log.warning(
            "timeline skipped an event of unexpected shape",
            extra={"ctx": {"key": event.key, "error": f"{type(exc).__name__}: {exc}"}},
        )

    def _beyond_horizon(self, key: str, what: str, ts_ms: int, latest_ms: int) -> bool:
        """Whether a live fold sets this input aside as dated beyond its clock's horizon (logged)."""
        if self.clock_ms is None:
            return False
        limit = self.clock_ms() + self.horizon_ms
        if latest_ms <= limit:
            return False
        self.future_dated += 1
        log.warning(
            "timeline set aside an event dated beyond the horizon (a skewed clock?)",
            extra={
                "ctx": {
                    "key": key,
                    "type": what,
                    "ts_ms": ts_ms,
                    "latest_ms": latest_ms,
                    "horizon_end_ms": limit,
                }
            },
        )
        return True

    def add_usage(self, sample: UsageSample) -> None:
        """Fold one usage sample (see the module docstring); a sample dated beyond a live fold's horizon
        is set aside as an event would be. A sample seen twice changes nothing (its load is set, not
        added). Samples do not move the watermark: the events decide which seconds are complete."""
        if self._beyond_horizon(sample.owner_key, "usage", sample.ts_ms, sample.ts_ms):
            return
        self._seq += 1
        cpu, memory = float(sample.cpu_millicores), float(sample.memory_bytes)
        phase = USAGE_GAP if sample.gap else USAGE
        owner = self.owner_of(sample.owner_key)
        transition = Transition(
            sample.ts_ms,
            self._seq,
            sample.template_hash,
            phase,
            owner,
            None,
            Requests(cpu, memory),
            pods=sample.pods,
        )
        heapq.heappush(self._queue, transition)

    def add_all_usage(self, samples: Iterable[UsageSample]) -> None:
        for sample in samples:
            self.add_usage(sample)

    def add_all(self, events: Iterable[Event]) -> None:
        if self.clock_ms is not None:  # a live fold: each event meets the horizon first
            for event in events:
                self.add(event)
            return
        add = self._add
        for event in events:  # what add does without a clock, without a call per event
            try:
                add(event)
            except (AttributeError, TypeError, ValueError, FormatError) as exc:
                self._skip(event, exc)

    @property
    def watermark_ms(self) -> int | None:
        """The newest event time seen."""
        return self._watermark_ms

    # ---- output -----------------------------------------------------------------------------------
    def advance(self, until_ms: int | None = None) -> list[TimelineRow]:
        """Rows of every complete second before ``until_ms`` (default: the latest event time seen),
        but none past ``max_idle_s`` quiet seconds in a row (see the module docstring)."""
        until = self._watermark_ms if until_ms is None else until_ms
        if until is None:
            return []
        if self.origin_ms is None:
            earliest = min([self._watermark_ms or until, *(t.at_ms for t in self._queue)])
            self.origin_ms = earliest - earliest % 1000
        origin = self.origin_ms
        complete = (until - origin) // 1000  # seconds 0 .. complete-1 end at or before ``until``
        rows: list[TimelineRow] = []
        queue, apply, templates, pop = self._queue, self._tally.apply, self._templates, heapq.heappop
        while self._next_second < complete:
            end_ms = origin + (self._next_second + 1) * 1000
            changed = False
            while queue and queue[0][0] < end_ms:
                apply(pop(queue), templates)
                changed = True
            if changed:
                self._quiet = 0
            elif self._quiet >= self.max_idle_s:
                # quiet for long enough: skip to the second of the next change (or past ``until``)
                next_change = (queue[0][0] - origin) // 1000 if queue else complete
                self._next_second = min(max(next_change, self._next_second + 1), complete)
                continue
            else:
                self._quiet += 1
            rows.extend(self._tally.rows(self._next_second))
            self._next_second += 1
        return rows

    def finish(self, end_ms: int | None = None) -> list[TimelineRow]:
        """Rows up to ``end_ms`` (default: one second after the last queued transition or event)."""
        last = max([t.at_ms for t in self._queue] + [self._watermark_ms or 0])
        return self.advance(end_ms if end_ms is not None else last + 1000)

    def pod_times(self) -> list[PodTimes]:
        """Per pod: when it was first seen and first seen running (seconds since the origin)."""
        return self._tally.pod_times(self.origin_ms or 0)

    def to_state(self) -> dict[str, Any]:
        """Everything needed to continue the fold later, as JSON-able data (see :meth:`from_state`)."""
        return {
            "version": STATE_VERSION,
            "origin_ms": self.origin_ms,
            "next_second": self._next_second,
            "quiet": self._quiet,
            "watermark_ms": self._watermark_ms,
            "seq": self._seq,
            **self._tally.to_state(),
            "parents": self._parents,
            "templates": {k: [r.cpu_m, r.memory_bytes] for k, r in self._templates.items()},
            "queue": [t.to_json() for t in self._queue],
        }

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        where: str = "timeline state",
        *,
        clock_ms: Callable[[], int] | None = None,
        horizon_ms: int = FUTURE_HORIZON_MS,
        max_idle_s: int = MAX_IDLE_S,
    ) -> TimelineFolder:
        """The folder :meth:`to_state` described (with these limits, which are settings, not state);
        FormatError naming ``where`` if it does not fit."""
        if state.get("version") != STATE_VERSION:
            raise FormatError(
                f"{where}: timeline state version {state.get('version')!r} is not {STATE_VERSION}; "
                f"delete it to start the timeline afresh"
            )
        try:
            folder = cls(state["origin_ms"], clock_ms=clock_ms, horizon_ms=horizon_ms, max_idle_s=max_idle_s)
            folder._next_second = int(state["next_second"])
            folder._quiet = int(state.get("quiet", 0))  # absent in states written before it existed
            folder._watermark_ms = state["watermark_ms"]
            folder._seq = int(state["seq"])
            folder._tally = ClusterTally.from_state(state)
            folder._parents = dict(state["parents"])
            folder._templates = {k: Requests(cpu, mem) for k, (cpu, mem) in state["templates"].items()}
            folder._queue = [Transition.from_json(t) for t in state["queue"]]
            heapq.heapify(folder._queue)
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"{where}: malformed timeline state ({type(exc).__name__}: {exc})") from None
        return folder


@dataclass(frozen=True, slots=True)
class Folded:
    rows: list[TimelineRow]
    pods: list[PodTimes]
    origin_ms: int


def fold_events(
    events: Iterable[Event],
    origin_ms: int | None = None,
    end_ms: int | None = None,
    *,
    usage: Iterable[UsageSample] = (),
) -> Folded:
    """Every row of ``events`` (a whole trace, with its recorded ``usage``) and the pods' times, in one
    call."""
    folder = TimelineFolder(origin_ms)
    ordered = sorted(events, key=lambda e: e.ts_ms)
    rows: list[TimelineRow] = []
    for event in ordered:
        folder.add(event)
    folder.add_all_usage(usage)
    rows.extend(folder.finish(end_ms))
    return Folded(rows, folder.pod_times(), folder.origin_ms or 0)
