"""The topic id in the store's topic identity: a topic deleted and re-created under its name, even grown
past the store's end (which offsets alone cannot tell), is refused; a store filled before topic ids goes
on as before."""

from __future__ import annotations

import pytest

from pipeline.sink.sink import Sink
from pipeline.sink.source import TopicIdentityError
from pipeline.sink.synthetic import synthetic_events
from pipeline.store.memory_store import MemorySegmentStore
from tests.unit.test_sink_compaction import SETTINGS, Clock, FakeSource, drain, partitioned

T0 = 1_763_700_000_000
T0 -= T0 % 60_000


class IdSource(FakeSource):
    """A topic that tells its id (``None``: a broker without topic ids)."""

    def __init__(self, events_log: dict[int, list[bytes]], topic_id: str | None) -> None:
        super().__init__(events_log)
        self.topic_id = topic_id

    async def identity(self) -> str | None:
        base = await super().identity()
        return base if self.topic_id is None else f"{base}@{self.topic_id}"


async def test_a_recreated_topic_past_the_stores_end_is_refused_by_its_id() -> None:
    store = MemorySegmentStore()
    first = IdSource(partitioned(synthetic_events(100, T0, 60_000), 1), "AAAAAAAAAAAAAAAAAAAAAA")
    sink = Sink(first, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0])
    await drain(sink, first)
    longer = partitioned(synthetic_events(300, T0 + 120_000, 60_000), 1)  # grew past the store's end
    recreated = IdSource(longer, "BBBBBBBBBBBBBBBBBBBBBB")
    with pytest.raises(TopicIdentityError, match=r"@AAAA.*this sink reads .*@BBBB.*recreated"):
        await Sink(recreated, store, SETTINGS, clock=Clock()).on_assigned([0])
    again = IdSource(first.log, "AAAAAAAAAAAAAAAAAAAAAA")
    await Sink(again, store, SETTINGS, clock=Clock()).on_assigned([0])  # the same topic goes on


async def test_a_store_filled_before_topic_ids_goes_on_with_them() -> None:
    store = MemorySegmentStore()
    log = partitioned(synthetic_events(100, T0, 60_000), 1)
    legacy = IdSource(log, None)
    sink = Sink(legacy, store, SETTINGS, clock=Clock())
    await sink.on_assigned([0])
    await drain(sink, legacy)
    await Sink(IdSource(log, "AAAAAAAAAAAAAAAAAAAAAA"), store, SETTINGS, clock=Clock()).on_assigned([0])
