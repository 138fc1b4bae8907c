"""Where a replay's events come from besides a trace file: a Kafka topic range, or the live topic.

* **Topic range** (:func:`read_topic_trace`): every retained record up to ``end`` is read without a
  consumer group (no group's offsets move); records before ``start`` are folded into the state at
  ``start`` (objects alive then are created first, as an export's keyframe does), the rest is the
  window. The recorded load of the same cluster on ``kubetape.usage`` is read the same way and folded
  in as an export folds it. It is the same assembly as ``kubetape export``, so replaying a topic range
  and replaying the exported file of that range give the same replay.
* **Follow** (:class:`FollowSource`): the live topic is shadowed with a fixed lag: an event recorded at
  ``ts`` is applied at wall time ``ts + lag``. When the replay is behind (a late start, a burst), every
  overdue event is due at once and the bounded-concurrency scheduler catches up as fast as the
  apiserver allows. Pod lifetimes are learnt as lifecycles arrive: an owner whose pods end by themselves
  gets the median duration seen so far when its object is (re)applied.

Both read one cluster of a topic a fleet shares (``cluster``, by the record header: other clusters'
values are never decoded; see :class:`pipeline.io.kafka.headers.ClusterFilter`).

Redelivered records (Kafka is at least once) are byte-identical to the first delivery and are skipped.

Following runs for months, so nothing here grows with the topic: redeliveries are recognized within a
window of the last :data:`DEDUP_WINDOW` records (a producer's retry lands next to the original); each
owner's durations are a fixed-size uniform reservoir (:data:`DURATION_SAMPLES`), whose median is the
exact median while an owner has fewer pods than that; and only the :data:`MAX_OWNERS` owners seen most
recently are remembered (an owner forgotten learns its lifetime again from its next pods).
"""

from __future__ import annotations

import functools
import hashlib
import random
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable
from statistics import median

from pipeline.formats.assemble import assemble_window
from pipeline.formats.segment.content import Segment
from pipeline.formats.trace import initial_events
from pipeline.formats.wire.codec import decode_event
from pipeline.formats.wire.usage import decode_usage
from pipeline.io.kafka.headers import ClusterFilter
from pipeline.io.kafka.message import Message
from pipeline.io.kafka.reader import TopicMissingError
from pipeline.io.kafka.reads import read_topic_range, tail_topic
from pipeline.io.kafka.settings import USAGE_TOPIC, KafkaSettings
from pipeline.model.errors import FormatError, KubetapeError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ClusterId, ObjectKey
from pipeline.model.tracer_config import TracerConfig
from pipeline.model.usage import UsageSample
from pipeline.replay.clock.schedule import ScheduledStep
from pipeline.replay.plan import ReplayPlan, plan_replay, pods_end_by_themselves

Warn = Callable[[str], None]
Tail = Callable[[KafkaSettings, str, int], AsyncIterator[list[Message]]]

DEDUP_WINDOW = 100_000
"""Records whose digests are remembered to recognize redeliveries (about 10 MB)."""
DURATION_SAMPLES = 64
"""Pod durations kept per owner (a uniform reservoir sample of all seen)."""
MAX_OWNERS = 50_000
"""Owners whose durations and self-ending flag are remembered (least recently seen forgotten first)."""


class _Decoder:
    """Decodes records once each: malformed ones are reported (topic, partition, offset) and skipped."""

    def __init__(self, topic: str, warn: Warn, window: int = DEDUP_WINDOW) -> None:
        self.topic = topic
        self.warn = warn
        self.skipped = 0
        self._seen: set[bytes] = set()
        self._order: deque[bytes] = deque()  # the digests in _seen, oldest first
        self._window = window

    def decode(self, records: Iterable[Message]) -> list[Event]:
        events = []
        for record in records:
            if record.value is None:
                continue  # a tombstone: nothing to replay
            digest = hashlib.blake2b(record.value, digest_size=16).digest()
            if digest in self._seen:
                continue
            self._seen.add(digest)
            self._order.append(digest)
            if len(self._order) > self._window:
                self._seen.discard(self._order.popleft())
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
    cluster: ClusterId | None = None,
) -> Segment:
    """The trace of ``[start_ms, end_ms)`` of ``cluster`` from ``topic`` (see the module docstring)."""
    if start_ms >= end_ms:
        raise FormatError(f"topic range is empty: from {start_ms} ms is not before to {end_ms} ms")
    chosen = ClusterFilter(topic, cluster)
    records = await read_topic_range(settings, topic, end_ms, cluster=chosen)
    events = _Decoder(topic, warn).decode(records)
    usage = await read_usage_range(settings, end_ms, chosen.cluster, warn)
    return assemble_window(
        None, events, start_ms, end_ms, config=config or TracerConfig.default(), usage=usage
    )


async def read_usage_range(
    settings: KafkaSettings, end_ms: int, cluster: ClusterId | None, warn: Warn
) -> list[UsageSample]:
    """The recorded load of ``cluster`` on ``kubetape.usage`` before ``end_ms`` (the window and what
    came before it, for the load at the start). None recorded (no such topic): none. A topic that cannot
    be read is said once; the events still replay, without the load."""
    try:
        records = await read_topic_range(settings, USAGE_TOPIC, end_ms, cluster=cluster)
    except TopicMissingError:
        return []
    except KubetapeError as exc:
        warn(f"the recorded load ({USAGE_TOPIC}) was not read, the replay goes on without it: {exc}")
        return []
    samples = []
    for record in records:
        if record.value is None:
            continue
        try:
            samples.append(
                decode_usage(record.value, f"topic {USAGE_TOPIC} p{record.partition} @{record.offset}")
            )
        except FormatError as exc:
            warn(f"skipped a malformed usage sample: {exc}")
    return samples


class DurationSample:
    """A uniform reservoir of at most ``size`` durations out of all added (Vitter's algorithm R)."""

    __slots__ = ("_rng", "_size", "seen", "values")

    def __init__(self, size: int, rng: random.Random) -> None:
        self._size = size
        self._rng = rng
        self.seen = 0
        self.values: list[int] = []

    def add(self, value: int) -> None:
        self.seen += 1
        if len(self.values) < self._size:
            self.values.append(value)
            return
        slot = self._rng.randrange(self.seen)
        if slot < self._size:
            self.values[slot] = value

    def median(self) -> float:
        return float(median(self.values))


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
        tail: Tail | None = None,
        cluster: ClusterId | None = None,
    ) -> None:
        """``tail``: the topic's records from a time on (a seam for tests and benchmarks; default: the
        topic's, of ``cluster``)."""
        self.settings = settings
        self.topic = topic
        self.lag_ms = lag_ms
        self.config = config or TracerConfig.default()
        self._decoder = _Decoder(topic, warn)
        self._now_ms = now_ms
        self.start_ms = now_ms() - lag_ms
        self.plan: ReplayPlan | None = None
        self.cluster = ClusterFilter(topic, cluster)  # one for the range and the tail: the same cluster
        self._tail = tail or functools.partial(tail_topic, cluster=self.cluster)
        self._rng = random.Random(0)  # reproducible samples
        self._durations: OrderedDict[ObjectKey, DurationSample] = OrderedDict()  # least recent first
        self._self_ending: OrderedDict[ObjectKey, None] = OrderedDict()

    async def initial_plan(self) -> ReplayPlan:
        """The state at ``now − lag`` (every retained record before it, folded) as the replay's first
        steps; the plan's lifetimes then grow as :meth:`steps` sees lifecycles."""
        records = await read_topic_range(self.settings, self.topic, self.start_ms, cluster=self.cluster)
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
        async for batch in self._tail(self.settings, self.topic, self.start_ms):
            for event in sorted(self._decoder.decode(batch), key=lambda e: e.ts_ms):
                self._learn(event)
                if event.type in (EventType.APPLIED, EventType.DELETED):
                    yield ScheduledStep(event.ts_ms, str(event.key), event)

    def _learn(self, event: Event) -> None:
        assert self.plan is not None
        if event.type is EventType.APPLIED and event.obj is not None:
            if pods_end_by_themselves(event.obj, self.config):
                self._self_ending[event.key] = None
                self._self_ending.move_to_end(event.key)
                if len(self._self_ending) > MAX_OWNERS:
                    self._self_ending.popitem(last=False)
            else:
                self._self_ending.pop(event.key, None)
        elif event.type is EventType.POD_LIFECYCLE and event.pod_end_ms is not None:
            assert event.owner_key is not None
            assert event.pod_start_ms is not None
            owner = event.owner_key
            durations = self._durations.get(owner)
            if durations is None:
                durations = self._durations[owner] = DurationSample(DURATION_SAMPLES, self._rng)
                if len(self._durations) > MAX_OWNERS:
                    forgotten, _ = self._durations.popitem(last=False)
                    self.plan.lifetimes_ms.pop(forgotten, None)
            else:
                self._durations.move_to_end(owner)
            durations.add(event.pod_end_ms - event.pod_start_ms)
            if owner in self._self_ending:
                self.plan.lifetimes_ms[owner] = durations.median()

    def memory_figures(self) -> dict[str, int]:
        """Sizes of everything this source keeps (each bounded; for benchmarks and tests)."""
        assert self.plan is not None
        return {
            "dedup_digests": len(self._decoder._seen),
            "owners_with_durations": len(self._durations),
            "durations": sum(len(d.values) for d in self._durations.values()),
            "self_ending_owners": len(self._self_ending),
            "lifetimes": len(self.plan.lifetimes_ms),
        }
