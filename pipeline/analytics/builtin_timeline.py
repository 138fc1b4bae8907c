"""The ``timeline`` consumer: per-second cluster state written to Parquet at every checkpoint.

Output directory layout (``--out DIR``):

* ``timeline.parquet`` — one row per second and owner (:class:`~pipeline.analytics.timeline_rows.TimelineRow`;
  owner ``*`` is the whole cluster), e.g. ``SELECT second, running FROM 'timeline.parquet' WHERE owner='*'``;
* ``pods.parquet`` — per pod, when it was first seen and first seen running (scheduling delay);
* ``timeline-state.json`` — the fold's state, so a restarted consumer continues where it checkpointed.

Each checkpoint rewrites the files atomically (state last, then the runner commits offsets).

Events of different partitions arrive interleaved, not in time order. Rows are therefore emitted only at
checkpoints and only for seconds older than the newest event by ``lateness_ms`` (30 s by default); an
event later than that is applied to the next open second.

The recorded load gives the rows their usage columns (``cpu_used_m``, ``memory_used_bytes``,
``usage_pods``): over Kafka, :meth:`TimelineConsumer.on_usage` is fed ``kubetape.usage`` under the
consumer group ``kubetape-analytics-timeline.usage``
(:class:`~pipeline.analytics.runner.UsageRunner`); offline, the trace's usage samples. The seconds are
the events' (usage does not move the watermark); while the usage reader is behind its topic, rows
wait for it too, so a backlog of events does not run ahead of the load.

Reading a live topic, an event dated more than an hour past the wall clock (a skewed clock) is set
aside and logged rather than folded: it would hold every row back until its date
(:data:`~pipeline.analytics.timeline.FUTURE_HORIZON_MS`). Offline runs over a whole trace
(``final=True``) fold every event, whatever its date.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pipeline.analytics.consumer import BatchContext
from pipeline.analytics.timeline import TimelineFolder
from pipeline.analytics.timeline_rows import TimelineRow
from pipeline.analytics.timeline_store import read_timeline, write_pod_times, write_timeline
from pipeline.model.errors import FormatError
from pipeline.model.events import Event
from pipeline.model.usage import UsageSample

STATE_FILE = "timeline-state.json"
TIMELINE_FILE = "timeline.parquet"
PODS_FILE = "pods.parquet"


class TimelineConsumer:
    """Folds events into a :class:`TimelineFolder`; ``final=True`` also emits the open last seconds
    at the end (offline runs over a whole trace)."""

    name = "timeline"

    def __init__(
        self,
        out_dir: Path,
        *,
        final: bool = False,
        lateness_ms: int = 30_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.out_dir = out_dir
        self.final = final
        self.lateness_ms = lateness_ms
        self.rows: list[TimelineRow] = []
        self._usage_watermark_ms: int | None = None
        self._usage_behind = False  # the usage reader had messages left at its last batch
        # a live fold refuses events dated beyond the wall clock's horizon; an offline one takes all
        clock_ms = None if final else (lambda: int(clock() * 1000))
        state_path = out_dir / STATE_FILE
        if state_path.exists():
            try:
                state = json.loads(state_path.read_text())
            except (OSError, ValueError) as exc:
                raise FormatError(f"{state_path}: unreadable timeline state ({exc}); delete it") from None
            self.folder = TimelineFolder.from_state(state, str(state_path), clock_ms=clock_ms)
            if (out_dir / TIMELINE_FILE).exists():
                self.rows = read_timeline(out_dir / TIMELINE_FILE)
        else:
            self.folder = TimelineFolder(clock_ms=clock_ms)

    def on_batch(self, events: Sequence[Event], context: BatchContext) -> None:
        del context
        self.folder.add_all(events)

    def on_usage(self, samples: Sequence[UsageSample], context: BatchContext) -> None:
        self.folder.add_all_usage(samples)
        if samples:
            newest = max(s.ts_ms for s in samples)
            self._usage_watermark_ms = max(self._usage_watermark_ms or newest, newest)
        self._usage_behind = bool(context.lag_messages)

    def checkpoint(self) -> None:
        if self.final:
            self.rows.extend(self.folder.finish())
        elif self.folder.watermark_ms is not None:
            until = self.folder.watermark_ms
            if self._usage_behind and self._usage_watermark_ms is not None:
                until = min(until, self._usage_watermark_ms)
            self.rows.extend(self.folder.advance(until - self.lateness_ms))
        self.out_dir.mkdir(parents=True, exist_ok=True)
        write_timeline(self.out_dir / TIMELINE_FILE, self.rows)
        write_pod_times(self.out_dir / PODS_FILE, self.folder.pod_times())
        state_path = self.out_dir / STATE_FILE
        temp = state_path.with_name(f".{STATE_FILE}.tmp")
        with temp.open("w") as handle:
            json.dump(self.folder.to_state(), handle)
            handle.flush()
            os.fsync(handle.fileno())
        temp.replace(state_path)

    def close(self) -> None:
        pass
