"""Where a replay's events come from besides a trace file: a Kafka topic range, or the live topic.

* **Topic range** (:func:`read_topic_trace`): every retained record up to ``end`` is read without a
  consumer group (no group's offsets move); records before ``start`` are folded into the state at
  ``start`` (objects alive then are created first, as an export's keyframe does), the rest is the
  window. It is the same assembly as ``kubetape export``, so replaying a topic range and replaying the
  exported file of that range give the same replay.
* **Follow** (:class:`FollowSource`): the live topic is shadowed with a fixed lag: an event recorded at
  ``ts`` is applied at wall time ``ts + lag``. When the replay is behind (a late start, a burst), every
  overdue event is due at once and the bounded-concurrency scheduler catches up as fast as the
  apiserver allows. Pod lifetimes are learnt as lifecycles arrive: an owner whose pods end by themselves
  gets the median duration seen so far when its object is (re)applied.

Redelivered records (Kafka is at least once) are byte-identical to the first delivery and are skipped.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Callable, Iterable
from statistics import median

from pipeline.formats.assemble import assemble_window
from pipeline.formats.segment import Segment
from pipeline.io.kafka import KafkaSettings
from pipeline.io.kafka_range import TopicRecord, read_topic_range, tail_topic
from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType, decode_event
from pipeline.model.keys import ObjectKey
from pipeline.model.tracer_config import TracerConfig
from pipeline.replay.plan import ReplayPlan, initial_events, plan_replay, pods_end_by_themselves
from pipeline.replay.schedule import ScheduledStep

Warn = Callable[[str], None]


class _Decoder:
    """Decodes records once each: malformed ones are reported (topic, partition, offset) and skipped."""

    def __init__(self, topic: str, warn: Warn) -> None:
        self.topic = topic
        self.warn = warn
        self.skipped = 0
        self._seen: set[bytes] = set()

    def decode(self, records: Iterable[TopicRecord]) -> list[Event]:
        events = []
        for record in records:
            if record.value is None:
                continue  # a tombstone: nothing to replay
            digest = hashlib.blake2b(record.value, digest_size=16).digest()
            if digest in self._seen:
                continue
            self._seen.add(digest)
            try:
                events.append(
                    decode_event(record.value, f"topic {self.topic} p{record.partition} @{record.offset}")
                )
            except FormatError as exc:
                self.skipped += 1
                self.warn(f"skipped a malformed record: {exc}")
        return events


async def read_topic_trace(
    settings: KafkaSettings,
    topic: str,
    start_ms: int,
    end_ms: int,
    *,
    config: TracerConfig | None = None,
    warn: Warn = lambda _: None,
) -> Segment:
    """The trace of ``[start_ms, end_ms)`` from ``topic`` (see the module docstring)."""
    if start_ms >= end_ms:
        raise FormatError(f"topic range is empty: from {start_ms} ms is not before to {end_ms} ms")
    records = await read_topic_range(settings, topic, end_ms)
    events = _Decoder(topic, warn).decode(records)
    return assemble_window(None, events, start_ms, end_ms, config=config or TracerConfig.default())


class FollowSource:
    """The live topic as a stream of scheduler steps with a fixed lag (see the module docstring)."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        lag_ms: int,
        *,
        config: TracerConfig | None = None,
        warn: Warn = lambda _: None,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.settings = settings
        self.topic = topic
        self.lag_ms = lag_ms
        self.config = config or TracerConfig.default()
        self._decoder = _Decoder(topic, warn)
        self._now_ms = now_ms
        self.start_ms = now_ms() - lag_ms
        self.plan: ReplayPlan | None = None
        self._durations: dict[ObjectKey, list[int]] = {}
        self._self_ending: set[ObjectKey] = set()

    async def initial_plan(self) -> ReplayPlan:
        """The state at ``now − lag`` (every retained record before it, folded) as the replay's first
        steps; the plan's lifetimes then grow as :meth:`steps` sees lifecycles."""
        records = await read_topic_range(self.settings, self.topic, self.start_ms)
        events = self._decoder.decode(records)
        trace = assemble_window(None, events, self.start_ms, self.start_ms + 1, config=self.config)
        self.plan = plan_replay(trace, 1.0)
        for event in initial_events(trace):
            self._learn(event)
        return self.plan

    def first_due_at(self, monotonic_now: float) -> Callable[[int], float]:
        """The scheduler anchor: an event at ``ts`` is due ``lag`` after it, on the monotonic clock."""
        wall_now = self._now_ms()
        return lambda ts_ms: monotonic_now + (ts_ms + self.lag_ms - wall_now) / 1000.0

    async def steps(self) -> AsyncIterator[ScheduledStep[Event]]:
        """The plan's initial steps, then every new event of the topic, forever."""
        assert self.plan is not None, "initial_plan() first"
        for step in self.plan.steps:
            yield step
        async for batch in tail_topic(self.settings, self.topic, self.start_ms):
            for event in sorted(self._decoder.decode(batch), key=lambda e: e.ts_ms):
                self._learn(event)
                if event.type in (EventType.APPLIED, EventType.DELETED):
                    yield ScheduledStep(event.ts_ms, str(event.key), event)

    def _learn(self, event: Event) -> None:
        assert self.plan is not None
        if event.type is EventType.APPLIED and event.obj is not None:
            if pods_end_by_themselves(event.obj, self.config):
                self._self_ending.add(event.key)
            else:
                self._self_ending.discard(event.key)
        elif event.type is EventType.POD_LIFECYCLE and event.pod_end_ms is not None:
            assert event.owner_key is not None
            assert event.pod_start_ms is not None
            durations = self._durations.setdefault(event.owner_key, [])
            durations.append(event.pod_end_ms - event.pod_start_ms)
            if event.owner_key in self._self_ending:
                self.plan.lifetimes_ms[event.owner_key] = median(durations)
