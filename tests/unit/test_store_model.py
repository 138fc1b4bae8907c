"""A model-based test of the sink and its store: every export window equals a naive reference fold.

A hypothesis state machine drives a consumer group of sinks over a two-partition topic, interleaving
events (event times out of order across objects and across window boundaries, re-published versions),
consuming rounds, idle closes, keyframe boundaries and size caps (small settings hit both often),
crashes at any point, rebalances, a member cut off from the group that later writes what it held,
retention runs, a wiped store whose topic lost its oldest offsets, and a recreated topic.

The reference is deliberately naive: every event of the topic in offset order, re-publishes dropped,
then :func:`assemble_window` over the whole list; offsets the topic deleted before the store got them
are replaced by the gap event the model expects. After every step, every checked window of the store
must give exactly the reference's bytes, over the offsets the store says it holds; once drained, the
store must hold every offset of the topic.

Within one object, event times follow offsets (a watcher reports an object's changes in order); across
objects they are freely out of order.

One case is beyond the store and not generated: a pod whose every version the store lost (a wiped store
whose topic deleted them) whose lifecycle then ends. The sink's state cannot know that pod is live, so
it forgets the ended lifecycle after the tombstone horizon (``ObjectState.settle``); a later version of
the pod then shows it running in windows after its end. Remembering every ended lifecycle instead would
grow the state with all pods ever finished. The export says the gap (a GAP event and a warning).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pipeline.formats.assemble import assemble_window
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.message import Message, PartitionBatch
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey, object_key
from pipeline.model.tracer_config import TracerConfig
from pipeline.sink.compactor import CompactionSettings
from pipeline.sink.settings import SinkSettings
from pipeline.sink.sink import Sink
from pipeline.sink.source import TopicIdentityError
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import EXPORT_ZSTD_LEVEL, ExportRequest, export_window
from pipeline.store.history import gap_key
from pipeline.store.memory_store import MemorySegmentStore
from pipeline.store.retention import apply_retention
from pipeline.store.segment_store import IndexLayout
from tests.unit.test_sink_compaction import Clock, PolledRecord

T0 = 1_763_700_000_000 - 1_763_700_000_000 % 60_000
PARTITIONS = (0, 1)
TOPIC = "kubetape.events"
COMPACTION = CompactionSettings(
    window_ms=10_000, idle_close_s=5.0, keyframe_every=2, max_events=4, tombstone_horizon_ms=5_000
)
SETTINGS = SinkSettings(COMPACTION, batch_max_records=5, poll_timeout_ms=10, write_concurrency=2)
INDEX = IndexLayout(bucket_ms=4_000, late_slack_ms=5_000)
"""The store keeps an index as an object store does, with buckets and slack small enough that windows
span several buckets and events up to 15 s late make late segments."""
OWNER = object_key("batch/v1", "Job", "ns", "job")


@dataclass
class Topic:
    """The events topic as the broker holds it, shared by the group's members."""

    cluster: str = "c1"
    log: dict[int, list[bytes]] = field(default_factory=lambda: {p: [] for p in PARTITIONS})
    log_start: dict[int, int] = field(default_factory=lambda: dict.fromkeys(PARTITIONS, 0))
    commits: dict[int, int] = field(default_factory=dict)
    owner: object = None  # the member of the group's current generation


class Member:
    """One group member's consumer: its own positions, the topic and the group's commits shared."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.position: dict[int, int] = {}
        self.assigned: list[int] = []

    async def getmany(self, timeout_ms: int, max_records: int) -> list[PartitionBatch]:
        out, room = [], max_records
        for p in self.assigned:
            start = max(self.position.get(p, self.topic.commits.get(p, 0)), self.topic.log_start[p])
            chunk = self.topic.log[p][start : start + room]
            if chunk:
                out.append(
                    PartitionBatch.of(p, [PolledRecord(start + i, b"k", v, 0) for i, v in enumerate(chunk)])
                )
            room -= len(chunk)
            self.position[p] = start + len(chunk)
        return out

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        if self.topic.owner is not self:
            return False  # the broker refuses commits of an older generation
        self.topic.commits.update(offsets)
        return True

    async def committed(self, partition: int) -> int | None:
        return self.topic.commits.get(partition)

    async def seek(self, partition: int, offset: int) -> None:
        self.position[partition] = offset

    async def dead_letter(self, message: Message, error: str) -> None:
        raise AssertionError(f"no message of this test is undecodable: {error}")

    async def identity(self) -> str | None:
        return f"kafka:{self.topic.cluster}/{TOPIC}"

    async def offset_bounds(self, partition: int) -> tuple[int, int]:
        return self.topic.log_start[partition], len(self.topic.log[partition])


@dataclass
class Obj:
    key: ObjectKey
    uid: str
    rv: int = 0
    ts: int = 0
    live: bool = False
    dead: bool = False
    last: Event | None = None
    last_offset: int = -1  # of its last version
    lost: bool = False  # every version of it was lost with the store (see the module docstring)


def _run(coro: object) -> object:
    return asyncio.get_event_loop().run_until_complete(coro)  # type: ignore[arg-type]


class SinkStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.topic = Topic()
        self.store = MemorySegmentStore(INDEX)
        self.clock = Clock()
        self.objects: dict[int, list[Obj]] = {p: [] for p in PARTITIONS}
        self.events: dict[int, list[tuple[Event, bool]]] = {p: [] for p in PARTITIONS}  # (e, re-published)
        self.lost: dict[int, int] = dict.fromkeys(PARTITIONS, 0)  # offsets below were truly lost
        self.retention_cutoff: int | None = None
        self.serial = 0
        self.now_ms = T0  # event time moves on; events land around it, some of them late
        self.clusters = 1
        self.sink = self._new_sink()
        self.stale: Sink | None = None

    def teardown(self) -> None:
        for s in (self.sink, self.stale):
            if s is not None:
                s.close()
        self.loop.close()

    def run(self, coro: object) -> object:
        return self.loop.run_until_complete(coro)  # type: ignore[arg-type]

    def _new_sink(self) -> Sink:
        member = Member(self.topic)
        sink = Sink(member, self.store, SETTINGS, clock=self.clock)
        member.assigned = list(PARTITIONS)
        self.topic.owner = member
        self.run(sink.on_assigned(PARTITIONS))
        return sink

    # ---- the topic -----------------------------------------------------------------------------
    def _publish(self, p: int, e: Event, *, republished: bool = False) -> None:
        self.topic.log[p].append(encode_event(e))
        self.events[p].append((e, republished))

    @rule(
        ops=st.lists(
            st.tuples(
                st.sampled_from(PARTITIONS),
                st.integers(-15_000, 2_000),  # around the current event time: late or a bit ahead
                st.integers(0, 3_000),
                st.sampled_from(["new", "update", "delete", "lifecycle", "republish"]),
                st.integers(0, 1_000),
            ),
            min_size=1,
            max_size=10,
        )
    )
    def produce(self, ops: list[tuple[int, int, int, str, int]]) -> None:
        for op in ops:
            self._produce_one(*op)

    def _produce_one(self, p: int, jitter: int, step: int, kind: str, pick: int) -> None:
        self.now_ms += step
        base = max(self.now_ms + jitter, T0) - T0
        live = [o for o in self.objects[p] if o.live]
        if kind == "new" or not live:
            self.serial += 1
            name = f"p{p}-o{self.serial}"
            o = Obj(object_key("v1", "Pod", "ns", name), f"uid-{self.serial}", ts=T0 + base)
            self.objects[p].append(o)
            kind = "update"
        else:
            o = live[pick % len(live)]
        ts = max(o.ts, T0 + base) + step + (kind == "lifecycle")  # a lifecycle's start is its own
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": o.key.split("/")[-1], "namespace": "ns"},
        }
        if kind == "republish":
            assert o.last is not None
            self._publish(p, o.last, republished=True)  # a re-list of the version already recorded
            return
        o.ts = ts
        if kind == "update":
            o.rv += 1
            o.live = True
            e = Event.applied(
                ts, o.key, {**obj, "spec": {"v": o.rv}}, o.rv, uid=o.uid, resource_version=str(o.rv)
            )
            o.last = e
            o.last_offset, o.lost = len(self.topic.log[p]), False
        elif kind == "delete":
            o.rv += 1
            o.live, o.dead = False, True
            e = Event.deleted(ts, o.key, obj, uid=o.uid, resource_version=str(o.rv))
        else:
            end = None if pick % 2 or o.lost else ts - step - 1
            e = Event.pod_lifecycle(
                ts,
                o.key,
                owner_key=o.key if pick % 3 else OWNER,  # a bare pod owns its lifecycles: in the trace
                pod_spec_hash=7,
                start_ms=max(ts - 5_000, 0),
                end_ms=end,
                uid=o.uid,
            )
        self._publish(p, e)

    # ---- the sinks -------------------------------------------------------------------------------
    @rule(rounds=st.integers(1, 4), seconds=st.sampled_from([0.0, 1.0, 6.0]))
    def consume(self, rounds: int, seconds: float) -> None:
        for _ in range(rounds):
            self.clock.now += seconds  # 6 s: open segments close idle
            self.run(self.sink.run_round())

    @rule()
    def crash(self) -> None:
        """kill -9: open segments are lost, the group commits stay; a new member takes over."""
        self.run(self.sink._reap(wait_all=True))  # writes already submitted land (they are in flight)
        self.sink.close()
        self.sink = self._new_sink()

    @rule()
    def rebalance(self) -> None:
        """A graceful rebalance: the owner flushes and commits, the partitions move to a new member."""
        self.run(self.sink.on_revoked(PARTITIONS))
        self.sink.close()
        self.sink = self._new_sink()

    @precondition(lambda self: self.stale is None)
    @rule()
    def cut_off(self) -> None:
        """The owner is cut off from the group without noticing; a new member takes its partitions."""
        self.stale = self.sink
        self.sink = self._new_sink()

    @precondition(lambda self: self.stale is not None)
    @rule()
    def stale_writer_wakes_up(self) -> None:
        stale = self.stale
        assert stale is not None
        self.stale = None
        self.clock.now += 6.0
        self.run(stale.flush_all())  # what it held: refused by the store
        stale.close()
        assert not stale.compactors or all(not c.has_open_segment for c in stale.compactors.values())

    @rule(back_ms=st.integers(0, 60_000))
    def retention(self, back_ms: int) -> None:
        cutoff = T0 + 60_000 - back_ms
        self.run(self.sink._reap(wait_all=True))
        apply_retention(SegmentCatalog(self.store), cutoff)
        self.retention_cutoff = max(self.retention_cutoff or cutoff, cutoff)

    @rule(keep=st.integers(0, 1_000))
    def wipe_store(self, keep: int) -> None:
        """The segment directory is lost while the group keeps its offsets; meanwhile the topic's own
        retention deleted some of its oldest (committed) offsets: those are truly gone."""
        self.run(self.sink._reap(wait_all=True))
        self.sink.close()
        if self.stale is not None:
            self.stale.close()
            self.stale = None
        self.store.wipe()
        self.retention_cutoff = None
        for p in PARTITIONS:
            committed = self.topic.commits.get(p, 0)
            deleted = min(committed, keep % (committed + 1))
            self.topic.log_start[p] = max(self.topic.log_start[p], deleted)
            self.lost[p] = self.topic.log_start[p]  # the store lacks everything below
            for o in self.objects[p]:
                o.lost = o.lost or o.last_offset < self.lost[p]
        self.sink = self._new_sink()

    @rule()
    def recreate_topic(self) -> None:
        """The topic is recreated on a new broker: the sink refuses the store; the operator starts it
        with a new, empty store for the new topic."""
        self.run(self.sink._reap(wait_all=True))
        self.sink.close()
        if self.stale is not None:
            self.stale.close()
            self.stale = None
        self.clusters += 1
        self.topic = Topic(cluster=f"c{self.clusters}")
        member = Member(self.topic)
        member.assigned = list(PARTITIONS)
        refused = Sink(member, self.store, SETTINGS, clock=self.clock)
        with pytest.raises(TopicIdentityError, match="another Kafka cluster, or the topic was recreated"):
            self.run(refused.on_assigned(PARTITIONS))
        refused.close()
        self.store = MemorySegmentStore(INDEX)
        self.objects = {p: [] for p in PARTITIONS}
        self.events = {p: [] for p in PARTITIONS}
        self.lost = dict.fromkeys(PARTITIONS, 0)
        self.retention_cutoff = None
        self.sink = self._new_sink()

    @rule()
    def drain(self) -> None:
        """Consume everything and flush: the store then holds every offset of the topic."""
        for _ in range(200):
            if self.run(self.sink.run_round()) == 0:
                break
        self.run(self.sink.flush_all())
        catalog = SegmentCatalog(self.store)
        catalog.refresh()
        for p in PARTITIONS:
            # a re-publish dropped as a duplicate after the last segment is committed, never stored
            trailing = 0
            while trailing < len(self.events[p]) and self.events[p][-1 - trailing][1]:
                trailing += 1
            assert catalog.next_offset(p) >= len(self.topic.log[p]) - trailing, (p, catalog.next_offset(p))
            assert self.topic.commits.get(p, 0) == len(self.topic.log[p]), (p, self.topic.commits)

    # ---- the reference ---------------------------------------------------------------------------
    def _reference(self, held: dict[int, int], start_ms: int, end_ms: int) -> bytes:
        events: list[Event] = []
        for p in PARTITIONS:
            live: dict[ObjectKey, Event] = {}
            for offset, (e, republished) in enumerate(self.events[p][: held[p]]):
                if offset < self.lost[p]:
                    continue  # lost with the topic's retention
                known = live.get(e.key)
                if republished and known is not None and known.resource_version == e.resource_version:
                    continue  # the version is recorded already
                if e.type is EventType.APPLIED:
                    live[e.key] = e
                elif e.type is EventType.DELETED:
                    live.pop(e.key, None)
                events.append(e)
            if self.lost[p]:  # the sink's gap marker, from the state it had: nothing
                events.append(
                    Event.gap(
                        min(max(0, start_ms), end_ms - 1),
                        ObjectKey(gap_key(TOPIC, p)),
                        reason=(
                            f"kubetape store gap: offsets 0..{self.lost[p] - 1} of {TOPIC} partition {p} "
                            "were lost (the topic's retention deleted them before the store got them)"
                        ),
                        from_rv="0",
                        to_rv=str(self.lost[p] - 1),
                    )
                )
        trace = assemble_window(
            None, events, start_ms, end_ms, config=TracerConfig.default(), suppress_owned=True
        )
        return encode_segment(trace, EXPORT_ZSTD_LEVEL)

    @invariant()
    def every_window_equals_the_reference(self) -> None:
        self.run(self.sink._reap(wait_all=True))
        catalog = SegmentCatalog(self.store)
        catalog.refresh()
        assert not catalog.corrupt
        held = {p: catalog.next_offset(p) for p in PARTITIONS}
        for p in PARTITIONS:
            assert held[p] <= len(self.topic.log[p])
        windows = [(T0, T0 + 400_000), (T0 + 9_000, T0 + 21_000), (T0 + 30_001, T0 + 30_002)]
        windows += [(T0 + 47_500, T0 + 90_000), (T0 + 75_000, T0 + 400_000)]
        for start, end in windows:
            if self.retention_cutoff is not None and start < self.retention_cutoff:
                continue  # retention dropped what windows before the cutoff need
            got = export_window(catalog, ExportRequest(start, end)).data
            assert catalog.answered_from_index, (start - T0, end - T0, sorted(self.store.markers))
            assert got == self._reference(held, start, end), (start - T0, end - T0, held)


SinkStoreMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,  # the same examples on every run and machine
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSinkStore = SinkStoreMachine.TestCase
