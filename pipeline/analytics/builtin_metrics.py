"""The ``metrics`` consumer: live Prometheus series about the recorded cluster and the pipeline.

Series (prefix ``kubetape_analytics_``):

* ``events_total{type,kind}`` — events consumed (rate it with PromQL ``rate()``);
  ``event_rate_per_second`` — the same over the last minute of wall time, for people without PromQL;
* ``objects{kind,namespace}`` — live recorded objects (applied and not deleted since);
* ``pods{phase}`` — pods by phase (Pending, Running, Succeeded, Failed) from the timeline fold;
* ``consumer_lag_messages`` — messages between this consumer and the end of ``kubetape.events``;
* ``event_age_seconds`` — wall time since the newest consumed event happened: how far the whole
  pipeline (watcher → Kafka → this consumer) trails the cluster;
* ``undecodable_messages_total``;
* ``future_dated_events_total`` — events dated more than an hour past this consumer's clock (a skewed
  clock): counted, but neither folded into ``pods`` nor taken as the newest event for
  ``event_age_seconds`` (see :data:`~pipeline.analytics.timeline.FUTURE_HORIZON_MS`).

The series reveal namespaces and kinds, so the service serves them only with a bearer token.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

from pipeline.analytics.consumer import BatchContext
from pipeline.analytics.timeline import FUTURE_HORIZON_MS, TimelineFolder
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, PHASES
from pipeline.io.metrics import Metrics
from pipeline.model.events import Event, EventType
from pipeline.model.keys import parse_object_key

RATE_WINDOW_S = 60.0


class MetricsConsumer:
    name = "metrics"

    def __init__(self, metrics: Metrics | None = None, clock: Callable[[], float] = time.time) -> None:
        self.metrics = metrics or Metrics(prefix="kubetape_analytics")
        self._clock = clock
        self._objects: dict[str, tuple[str, str]] = {}
        self._newest_ms: int | None = None
        self._recent: deque[tuple[float, int]] = deque()
        self._folder = TimelineFolder(clock_ms=lambda: int(self._clock() * 1000))
        m = self.metrics
        m.counter("events_total", "events consumed from kubetape.events, by type and kind")
        m.gauge("event_rate_per_second", "events consumed per second over the last minute")
        m.gauge("objects", "live recorded objects, by kind and namespace")
        m.gauge("pods", "pods by phase")
        m.gauge("consumer_lag_messages", "messages not yet consumed up to the end of the topic")
        m.gauge("event_age_seconds", "wall seconds since the newest consumed event happened")
        m.counter("undecodable_messages_total", "messages skipped because they could not be decoded")
        m.counter("future_dated_events_total", "events dated beyond the clock's horizon, set aside")

    def on_batch(self, events: Sequence[Event], context: BatchContext) -> None:
        m = self.metrics
        horizon_end_ms = int(self._clock() * 1000) + FUTURE_HORIZON_MS
        for event in events:
            parsed = parse_object_key(event.key)
            m.inc("events_total", labels={"type": event.type.value, "kind": parsed.kind})
            self._count_object(event, parsed.kind, parsed.namespace or "")
            if event.ts_ms <= horizon_end_ms:  # a future-dated event would pin the age at 0
                self._newest_ms = max(self._newest_ms or event.ts_ms, event.ts_ms)
        future_before = self._folder.future_dated
        self._folder.add_all(events)
        if self._folder.future_dated > future_before:
            m.inc("future_dated_events_total", float(self._folder.future_dated - future_before))
        rows = self._folder.advance()
        cluster = [row for row in rows if row.owner == CLUSTER_OWNER]
        if cluster:
            latest = cluster[-1]
            for phase in PHASES:
                m.set("pods", float(getattr(latest, phase.lower())), labels={"phase": phase})
        now = self._clock()
        self._recent.append((now, len(events)))
        while self._recent and now - self._recent[0][0] > RATE_WINDOW_S:
            self._recent.popleft()
        m.set("event_rate_per_second", sum(n for _, n in self._recent) / RATE_WINDOW_S)
        if context.lag_messages is not None:
            m.set("consumer_lag_messages", float(context.lag_messages))
        if self._newest_ms is not None:
            m.set("event_age_seconds", max(now - self._newest_ms / 1000, 0.0))
        undecodable = context.undecodable_total - m.value("undecodable_messages_total")
        if undecodable > 0:
            m.inc("undecodable_messages_total", undecodable)

    def _count_object(self, event: Event, kind: str, namespace: str) -> None:
        before = self._objects.get(event.key)
        if event.type is EventType.APPLIED:
            self._objects[event.key] = (kind, namespace)
        elif event.type is EventType.DELETED:
            self._objects.pop(event.key, None)
        else:
            return
        after = self._objects.get(event.key)
        if before != after:
            for labels, delta in ((before, -1.0), (after, 1.0)):
                if labels is not None:
                    self.metrics.inc("objects", delta, labels={"kind": labels[0], "namespace": labels[1]})

    def checkpoint(self) -> None:
        """Nothing to persist: live series start afresh (from the committed position) after a restart."""

    def close(self) -> None:
        pass
