"""A fleet in one topic: each cluster's sink keeps exactly its own cluster's events, told apart by the
Kafka header alone (another cluster's payload is never decoded, not even to refuse it), and its store
and segments name the cluster."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.formats.inspect import inspect_bytes
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.headers import CLUSTER_HEADER
from pipeline.io.kafka.message import PartitionBatch
from pipeline.model.errors import ConfigError
from pipeline.model.events import Event
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId
from pipeline.sink.sink import Sink
from pipeline.sink.synthetic import synthetic_events
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportRequest, export_window
from pipeline.store.memory_store import MemorySegmentStore
from tests.unit.test_sink_compaction import (
    SETTINGS,
    T0,
    Clock,
    FakeSource,
    PolledRecord,
    direct_trace_bytes,
    drain,
)

EU, US = ClusterId("eu"), ClusterId("us")
GARBAGE = b"\xc1 not msgpack"


class FleetSource(FakeSource):
    """The shared events topic: every message with the header of the cluster that wrote it."""

    def __init__(self, log: dict[int, list[tuple[ClusterId, bytes]]]) -> None:
        super().__init__({p: [v for _, v in messages] for p, messages in log.items()})
        self.clusters = {p: [c for c, _ in messages] for p, messages in log.items()}

    async def getmany(self, timeout_ms: int, max_records: int) -> list[PartitionBatch]:
        batches = await super().getmany(timeout_ms, max_records)
        return [
            PartitionBatch.of(
                b.partition,
                [
                    PolledRecord(r.offset, r.key, r.value, r.timestamp, self._headers(b.partition, r.offset))
                    for r in b.records
                ],
            )
            for b in batches
        ]

    def _headers(self, partition: int, offset: int) -> tuple[tuple[str, bytes], ...]:
        cluster = self.clusters[partition][offset]
        return () if cluster == DEFAULT_CLUSTER else ((CLUSTER_HEADER, cluster.encode()),)


def fleet_log(by_cluster: dict[ClusterId, list[Event | bytes]]) -> dict[int, list[tuple[ClusterId, bytes]]]:
    """The clusters' messages interleaved in each of 3 partitions, as watchers publishing at once do."""
    log: dict[int, list[tuple[ClusterId, bytes]]] = {0: [], 1: [], 2: []}
    streams = {c: list(messages) for c, messages in by_cluster.items()}
    while any(streams.values()):
        for cluster, messages in streams.items():
            if messages:
                m = messages.pop(0)
                value = m if isinstance(m, bytes) else encode_event(m)
                partition = 0 if isinstance(m, bytes) else sum(m.key.encode()) % 3
                log[partition].append((cluster, value))
    return log


async def record(
    cluster: ClusterId, log: dict[int, list[tuple[ClusterId, bytes]]]
) -> tuple[Sink, FleetSource]:
    source = FleetSource(log)
    sink = Sink(source, MemorySegmentStore(), SETTINGS, clock=Clock(), cluster=cluster)
    await sink.on_assigned([0, 1, 2])
    await drain(sink, source)
    return sink, source


async def test_each_clusters_sink_stores_exactly_what_that_cluster_alone_would_give() -> None:
    eu = synthetic_events(1_500, T0, 300_000, seed=1)
    us = synthetic_events(1_000, T0, 300_000, seed=2)  # same keys in part: they must not merge
    legacy = synthetic_events(300, T0, 300_000, seed=3)
    log = fleet_log({EU: [*eu[:700], GARBAGE, *eu[700:]], US: list(us), DEFAULT_CLUSTER: list(legacy)})
    for cluster, events in ((EU, eu), (US, us), (DEFAULT_CLUSTER, legacy)):
        sink, source = await record(cluster, log)
        exported = export_window(SegmentCatalog(sink.store), ExportRequest(T0, T0 + 300_000))
        assert exported.data == direct_trace_bytes(events, T0, T0 + 300_000), cluster
        # another cluster's bad message is not this sink's to refuse: it was never decoded
        assert [m.offset for m, _ in source.dead] == ([log[0].index((EU, GARBAGE))] if cluster == EU else [])
        others = sum(len(v) for v in log.values()) - len(events) - (cluster == EU)
        assert sink.metrics.value("sink_other_cluster_messages_total") == others
        # everything consumed is committed, other clusters' messages included
        assert source.commits == {p: len(v) for p, v in log.items()}


async def test_a_fleet_members_store_and_segments_name_its_cluster() -> None:
    sink, _ = await record(EU, fleet_log({EU: list(synthetic_events(100, T0, 60_000))}))
    store = sink.store
    assert isinstance(store, MemorySegmentStore)
    assert store.claim_source("anything else") == "kafka:c1/kubetape.events#cluster=eu"
    sources = {decode_segment(data).header.source for data in store.files.values()}
    assert sources == {"kafka:c1/kubetape.events#cluster=eu"}
    # a segment file on its own says which cluster it holds
    name, data = next(iter(store.files.items()))
    assert inspect_bytes(data, name).to_json()["details"]["source"] == "kafka:c1/kubetape.events#cluster=eu"


async def test_a_sink_whose_cluster_nobody_named_stops_at_another_clusters_message_naming_it() -> None:
    legacy = synthetic_events(50, T0, 60_000, seed=3)
    source = FleetSource(
        fleet_log({DEFAULT_CLUSTER: list(legacy), US: list(synthetic_events(5, T0, 60_000))})
    )
    sink = Sink(source, MemorySegmentStore(), SETTINGS, clock=Clock(), skip_other_clusters=False)
    await sink.on_assigned([0, 1, 2])
    with pytest.raises(ConfigError, match=r"cluster\(s\) us besides default .* start it with --cluster us"):
        await drain(sink, source)
    assert not [c for p, c in source.commits.items() if c > 0], (
        "nothing past the refused message is committed"
    )


async def test_a_sink_nobody_named_a_cluster_for_records_the_topics_only_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pipeline.io.kafka.settings import KafkaSettings
    from pipeline.sink import service

    met: set[str] = set()

    async def latest(_settings: KafkaSettings, _topic: str) -> set[str]:
        return met

    monkeypatch.setattr(service, "latest_clusters", latest)
    kafka = KafkaSettings("unused:9092")
    met.update({DEFAULT_CLUSTER})  # records without a cluster header, as before fleets
    assert await service._only_cluster(kafka, "t") == DEFAULT_CLUSTER
    met.clear()
    # an empty topic (the sink started before its watcher): the first record tells the cluster
    learning = asyncio.create_task(service._only_cluster(kafka, "t", asyncio.Event(), poll_s=0))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not learning.done()
    met.update({"eu"})
    assert await learning == EU
    assert await service._only_cluster(kafka, "t") == EU
    met.clear()
    stop = asyncio.Event()
    stop.set()
    assert await service._only_cluster(kafka, "t", stop, poll_s=0) is None  # stopped before any record
    met.update({"eu"})
    met.update({"us"})
    with pytest.raises(ConfigError, match=r"topic t holds records of several clusters \(eu, us\)"):
        await service._only_cluster(kafka, "t")
