"""The analytics consumer interface: what a consumer implements, and what it is told with each batch.

An analytics consumer turns the event stream into something people look at (metrics, timelines, ...).
The :class:`~pipeline.analytics.runner.ConsumerRunner` drives it:

1. it joins the consumer group ``kubetape-analytics-<name>`` on ``kubetape.events`` (or reads a trace
   file offline), so every consumer has its own committed position and never moves the sink's;
2. it calls :meth:`AnalyticsConsumer.on_batch` with the decoded events of each fetch, in order per
   partition (undecodable messages are counted, logged and skipped, never handed over);
3. every ``flush_every_s`` seconds or ``flush_every_messages`` messages
   (:class:`~pipeline.io.kafka.consume.LoopSettings`) and at the end, it calls
   :meth:`AnalyticsConsumer.checkpoint`; the
   consumer makes what it has computed durable (and its state needed to resume), and only after it
   returned are the offsets committed. A crash between two checkpoints re-delivers the events since the
   last one: consumers must tolerate seeing an event twice (the built-ins fold idempotently per key);
4. :meth:`AnalyticsConsumer.close` runs once at the end, after the last checkpoint.

A minimal consumer::

    class CountKinds:
        name = "count-kinds"

        def __init__(self) -> None:
            self.counts: Counter[str] = Counter()

        def on_batch(self, events: Sequence[Event], context: BatchContext) -> None:
            self.counts.update(parse_object_key(e.key).kind for e in events)

        def checkpoint(self) -> None:
            Path("counts.json").write_text(json.dumps(self.counts))

        def close(self) -> None:
            pass
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.model.events import Event

ANALYTICS_GROUP_PREFIX = "kubetape-analytics-"


def group_id_for(name: str) -> str:
    """The consumer group of the analytics consumer ``name``."""
    return f"{ANALYTICS_GROUP_PREFIX}{name}"


@dataclass(frozen=True, slots=True)
class BatchContext:
    """Where the runner stands when it hands over a batch."""

    source: str
    """``kafka:<topic>`` or the trace file's path."""
    lag_messages: int | None
    """Messages between this batch and the end of the topic (None offline or when unknown)."""
    undecodable_total: int
    """Messages skipped so far because they could not be decoded."""


class AnalyticsConsumer(Protocol):
    """An analytics consumer; see the module docstring for the contract."""

    @property
    def name(self) -> str:
        """Names the consumer group (``kubetape-analytics-<name>``) and ``kubetape analytics run NAME``."""
        ...

    def on_batch(self, events: Sequence[Event], context: BatchContext) -> None:
        """Fold a batch of events (in order per partition) into the consumer's state; fast, no I/O."""
        ...

    def checkpoint(self) -> None:
        """Make results and resume state durable; offsets are committed only after this returns."""
        ...

    def close(self) -> None:
        """Release resources after the final checkpoint."""
        ...
