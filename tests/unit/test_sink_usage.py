"""The usage sink (pipeline.sink.usage_sink): kubetape.usage into the usage sub-store's segments, offsets
committed only once durable, resumed after what is stored, bad records dead-lettered; and an export of
a window carries the stored load with each owner's at the window's start."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.wire.usage import encode_usage
from pipeline.io.metrics import Metrics
from pipeline.model.keys import DEFAULT_CLUSTER, ObjectKey
from pipeline.model.usage import ContainerUsage, UsageSample
from pipeline.sink.usage_sink import UsageSink
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportFormat, ExportRequest, export_window
from pipeline.store.memory_store import MemorySegmentStore
from pipeline.store.usage_history import stored_usage
from tests.unit.test_sink_compaction import Clock, FakeSource

WEB = ObjectKey("apps/Deployment/shop/web")
API = ObjectKey("apps/Deployment/shop/api")


def sample(ts: int, owner: ObjectKey = WEB, cpu: int = 100) -> UsageSample:
    return UsageSample(ts, owner, "a", 2, (ContainerUsage("app", cpu, 1 << 20),))


def usage_sink(source: FakeSource, store: MemorySegmentStore, clock: Clock) -> UsageSink:
    return UsageSink(source, store, Metrics(), cluster=DEFAULT_CLUSTER, flush_every_s=60.0, clock=clock)


async def test_samples_become_segments_then_offsets_are_committed_and_bad_records_set_aside() -> None:
    log = {
        0: [encode_usage(sample(1_000)), b"\x93not a sample", encode_usage(sample(16_000, cpu=300))],
        1: [encode_usage(sample(1_000, API, cpu=50))],
    }
    source, store, clock = FakeSource(log), MemorySegmentStore(), Clock()
    sink = usage_sink(source, store, clock)
    await sink.on_assigned([0, 1])
    await sink.run_once(timeout_ms=1)
    assert store.list() == []  # not yet due: nothing durable, nothing committed
    assert source.commits == {}
    clock.now = 61.0
    await sink.run_once(timeout_ms=1)
    assert source.commits == {0: 3, 1: 1}
    assert [m.offset for m, _ in source.dead] == [1]
    assert "usage sample" in source.dead[0][1]
    segments = {str(entry.name): decode_segment(store.get(entry.name)) for entry in store.list()}
    assert sorted(segments) == ["p0000-000000000000000.kseg", "p0001-000000000000000.kseg"]
    first = segments["p0000-000000000000000.kseg"]
    assert [s.cpu_millicores for s in first.usage] == [100, 300]
    assert first.header.partitions[0].last_offset == 2
    assert first.events == ()


async def test_a_restart_resumes_after_what_is_stored_and_stores_nothing_twice() -> None:
    log = {0: [encode_usage(sample(1_000)), encode_usage(sample(16_000))]}
    source, store, clock = FakeSource(log), MemorySegmentStore(), Clock()
    first = usage_sink(source, store, clock)
    await first.on_assigned([0])
    await first.run_once(timeout_ms=1)
    await first.flush([0])
    source.commits.clear()  # the commit was lost in the crash: the store alone says where to go on
    source.restart()
    log[0].append(encode_usage(sample(31_000)))
    second = usage_sink(source, store, clock)
    await second.on_assigned([0])
    await second.run_once(timeout_ms=1)
    await second.flush([0])
    assert sorted(s.ts_ms for s in stored_usage(store, 10**12)) == [1_000, 16_000, 31_000]
    assert source.commits == {0: 3}


async def test_an_export_carries_the_stored_load_with_the_load_at_the_window_start() -> None:
    log = {0: [encode_usage(sample(ts, cpu=ts // 1000)) for ts in (1_000, 16_000, 31_000, 46_000)]}
    source, usage_store, clock = FakeSource(log), MemorySegmentStore(), Clock()
    sink = usage_sink(source, usage_store, clock)
    await sink.on_assigned([0])
    await sink.run_once(timeout_ms=1)
    await sink.flush([0])
    events = SegmentCatalog(MemorySegmentStore())  # no object was recorded: the load alone
    result = export_window(events, ExportRequest(20_000, 40_000), usage=usage_store)
    trace = decode_segment(result.data)
    # 16 s is the load at the start, moved to it; 31 s is inside; 1 s and 46 s are not
    assert [(s.ts_ms, s.cpu_millicores) for s in trace.usage] == [(20_000, 16), (31_000, 31)]
    warnings: list[str] = []
    simkube = ExportRequest(20_000, 40_000, format=ExportFormat.SIMKUBE)
    export_window(events, simkube, warnings.append, usage=usage_store)
    assert len(warnings) == 1
    assert "leaves out the 2 usage samples" in warnings[0]


class StopOnCommit(FakeSource):
    def __init__(self, log: dict[int, list[bytes]], stop: asyncio.Event) -> None:
        super().__init__(log)
        self.stop = stop

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        self.stop.set()
        return await super().commit(offsets)


class FailingOnce(MemorySegmentStore):
    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def put(self, name, data, fence=None):  # type: ignore[no-untyped-def]
        if self.failures:
            self.failures -= 1
            raise OSError("the volume is gone")
        super().put(name, data, fence)


async def test_a_store_that_fails_keeps_the_samples_open_and_commits_nothing_until_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("pipeline.sink.usage_sink.RETRY_S", 0.0)
    stop = asyncio.Event()
    source, store, clock = StopOnCommit({0: [encode_usage(sample(1_000))]}, stop), FailingOnce(), Clock()
    sink = UsageSink(source, store, Metrics(), cluster=DEFAULT_CLUSTER, flush_every_s=0.0, clock=clock)
    await sink.on_assigned([0])
    await sink.run(stop)
    assert store.failures == 0
    assert source.commits == {0: 1}
    assert [s.ts_ms for s in stored_usage(store, 10**12)] == [1_000]


async def test_a_stale_usage_writer_is_refused_and_drops_the_partition_without_committing() -> None:
    log = {0: [encode_usage(sample(1_000)), encode_usage(sample(16_000))]}
    source, store, clock = FakeSource(log), MemorySegmentStore(), Clock()
    stale = usage_sink(source, store, clock)
    await stale.on_assigned([0])
    await stale.run_once(timeout_ms=1)
    newer = usage_sink(FakeSource(log), store, clock)
    await newer.on_assigned([0])  # a rebalance gave the partition to another member meanwhile
    await stale.flush([0])
    assert store.list() == []  # refused: the stale member wrote nothing
    assert source.commits == {}  # and committed nothing
    assert "kubetape_usage_fenced_total 1" in stale._metrics.render()
    await stale.run_once(timeout_ms=1)  # later batches of the lost partition are not taken up again
    await stale.flush([0])
    assert store.list() == []
    await newer.run_once(timeout_ms=1)
    await newer.flush([0])
    assert sorted(s.ts_ms for s in stored_usage(store, 10**12)) == [1_000, 16_000]
