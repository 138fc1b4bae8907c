"""The sink's SettleIndex forgets exactly what ObjectState.settle (the definition) forgets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.model.events import Event
from pipeline.model.keys import object_key
from pipeline.sink.settling import SettleIndex
from pipeline.store.state import ObjectState

HORIZON = 100
KEYS = [object_key("v1", "Pod", "ns", f"p{i}") for i in range(4)]
OWNER = object_key("apps/v1", "ReplicaSet", "ns", "rs")


def _event(kind: int, key: int, ts: int, end: int | None, rv: int) -> Event:
    k = KEYS[key]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": k, "namespace": "ns"}}
    if kind == 0:
        return Event.applied(ts, k, body, 1, uid=f"u{key}", resource_version=str(rv))
    if kind == 1:
        return Event.deleted(ts, k, body, uid=f"u{key}", resource_version=str(rv))
    if kind == 2:
        start = max(ts - 50, 0)
        end_ms = None if end is None else start + end  # ended before, at or after its event time
        return Event.pod_lifecycle(
            ts, k, owner_key=OWNER, pod_spec_hash=7, start_ms=start, end_ms=end_ms, uid=f"u{rv % 2}"
        )
    return Event.gap(ts, k, reason="watch expired", from_rv=str(rv))


events = st.builds(
    _event,
    st.integers(0, 3),
    st.integers(0, len(KEYS) - 1),
    st.integers(0, 600),
    st.one_of(st.none(), st.integers(0, 150)),
    st.integers(1, 50),
)
# a run of events, then a settle; late events (times before earlier ones) included
steps = st.lists(st.tuples(st.lists(events, max_size=6), st.integers(0, 150)), max_size=25)


def _state(s: ObjectState) -> tuple[object, ...]:
    return (dict(s.objects), dict(s.tombstones), dict(s.lifecycles), dict(s.gaps))


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=10), steps)
def test_settles_like_the_definition(before: list[Event], history: list[tuple[list[Event], int]]) -> None:
    reference, indexed = ObjectState(), ObjectState()
    for e in before:  # a restored state the index starts from
        reference.offer(e)
        indexed.offer(e)
    index = SettleIndex(indexed)
    max_ts = max((e.ts_ms for e in before), default=-1)
    for run, extra in history:
        applied = [e for e in run if indexed.offer(e)]
        assert applied == [e for e in run if reference.offer(e)]
        max_ts = max([max_ts, *(e.ts_ms for e in run)])
        settle_at = max_ts + 1 + extra  # the sink settles at its latest time + 1; later is allowed
        max_ts = settle_at - 1
        reference.settle(settle_at, HORIZON)
        index.settle(applied, settle_at, HORIZON)
        assert _state(indexed) == _state(reference)
