"""The export's speed-ups change no output: each is checked against the straightforward way it replaced.

* :func:`rebuild_window` against the plain event-by-event fold it replaced (deferred duplicate state,
  segments cut by bisection, one stable sort by time), on a store with keyframes, an overlap left by
  two racing sinks and an unreadable segment;
* :func:`trace_to_simkube` against the plain per-event conversion, with every delete's spec hash
  recomputed by SimKube's algorithm rather than reused from the object's last apply;
* the copy that moves objects alive at a window's start against ``dataclasses.replace``;
* :func:`export_window` in both formats against the trace assembled straight from the events, on a
  workload with owned, DaemonSet-owned and hash-less deleted objects.
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from typing import Any

import pytest

from pipeline.formats.assemble import assemble_window, moved_to, to_seconds, trace_to_simkube
from pipeline.formats.segment.content import Segment
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import (
    SIMKUBE_TRACE_VERSION,
    SimkubeEvent,
    SimkubeLifecycle,
    SimkubeTrace,
    write_simkube_trace,
)
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import GroupVersionKind, ObjectKey, object_key, parse_object_key
from pipeline.model.sanitize import deletion_stub
from pipeline.model.tracer_config import TracerConfig
from pipeline.sink import synthetic
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import (
    EXPORT_ZSTD_LEVEL,
    ExportFilters,
    ExportFormat,
    ExportRequest,
    export_window,
    window_trace,
)
from pipeline.store.history import Window, load_segment, rebuild_window
from pipeline.store.memory_store import MemorySegmentStore
from pipeline.store.segment_store import segment_name
from pipeline.store.state import ObjectState

T0 = 1_763_700_000_000
T0 -= T0 % 60_000
SPAN_MS = 600_000
PARTITIONS = 3
SETTINGS = CompactionSettings(window_ms=60_000, keyframe_every=3)


@pytest.fixture(autouse=True)
def _simkube_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real SimKube spec hashes: a reused hash must equal a recomputed one."""
    monkeypatch.setattr(synthetic, "FAST_HASHES", False)


# ---- a workload and its store ---------------------------------------------------------------------
def _owned(kind: str, namespace: str, name: str, owner_kind: str, owner: str) -> dict[str, Any]:
    obj = synthetic.deployment(namespace, name, 1)
    obj["kind"] = kind
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": owner_kind, "name": owner, "uid": f"uid-{owner}"}
    ]
    return obj


def workload() -> list[Event]:
    """Synthetic deployments and pods, plus objects owned by one of them (dropped: their owner
    recreates them), by an absent owner (kept), by a DaemonSet (filtered), a delete with no hash of
    an object never applied (its hash is computed), and objects applied in the same millisecond in
    every partition, in reverse key order (ties are ordered by partition, then offset)."""
    events = synthetic.synthetic_events(2_000, T0, SPAN_MS)
    owner = next(e for e in events if e.type is EventType.APPLIED).obj
    assert owner is not None
    owner_ns, owner_name = owner["metadata"]["namespace"], owner["metadata"]["name"]
    extras = [
        synthetic.applied(
            T0 + 5_000, _owned("ReplicaSet", owner_ns, "rs-owned", "Deployment", owner_name), 1
        ),
        synthetic.applied(T0 + 6_000, _owned("ReplicaSet", "ns-0", "rs-orphan", "Deployment", "gone"), 2),
        synthetic.applied(T0 + 7_000, _owned("ReplicaSet", "ns-0", "rs-ds", "DaemonSet", "agent"), 3),
        synthetic.deleted(T0 + 250_123, synthetic.deployment("ns-2", "never-applied", 3), 4),
        synthetic.deleted(T0 + 250_123, _owned("ReplicaSet", "ns-0", "rs-orphan", "Deployment", "gone"), 5),
    ]
    tied = [
        synthetic.applied(T0 + 300_000, synthetic.deployment("ns-3", f"tie-{i:02}", 1), 10 + i)
        for i in reversed(range(12))
    ]
    return sorted(events + extras + tied, key=lambda e: e.ts_ms)


def _partition(e: Event) -> int:
    return zlib.crc32(e.key.encode()) % PARTITIONS


def store_of(events: list[Event], *, hole: bool = True) -> MemorySegmentStore:
    """The sink's segments of ``events``; partition 0 also holds segments of a second, evicted
    member over offsets already written (an overlap), partition 1 an unreadable segment (a hole)."""
    store = MemorySegmentStore()
    logs: list[list[Event]] = [[] for _ in range(PARTITIONS)]
    for e in events:
        logs[_partition(e)].append(e)
    for p, log in enumerate(logs):
        _write(store, PartitionCompactor(p, SETTINGS), enumerate(log))
    first = sorted(n for n in store.files if n.startswith("p0000"))[4]
    start = int(first.split("-")[1].split(".")[0]) + 1  # inside a segment: other boundaries
    assert segment_name(0, start) not in store.files
    # other windows, so its segments straddle the first member's (one wholly inside another is
    # skipped before reading); a name both wrote keeps the first member's file
    other = dataclasses.replace(SETTINGS, window_ms=120_000)
    evicted = PartitionCompactor(0, other, next_offset=start, segments_since_keyframe=0)
    _write(store, evicted, ((o, logs[0][o]) for o in range(start, start + 150)), replace=False)
    if hole:
        victim = sorted(n for n in store.files if n.startswith("p0001"))[2]
        store.files[victim] = store.files[victim][:-10] + b"0123456789"  # the body's checksum fails
    return store


def _write(
    store: MemorySegmentStore, compactor: PartitionCompactor, messages: Any, *, replace: bool = True
) -> None:
    closed = []
    for offset, e in messages:
        closed += compactor.add(offset, e, 0.0)
    last = compactor.flush()
    for c in [*closed, *([last] if last is not None else [])]:
        if replace or c.name not in store.files:
            store.put(c.name, c.encode(3))


WINDOWS = [
    (T0, T0 + SPAN_MS),
    (T0 + 200_000, T0 + 350_000),  # cuts segments and starts after keyframes
    (T0 + 250_123, T0 + 250_124),  # one millisecond
    (T0 - 60_000, T0 + 2 * SPAN_MS),
]


# ---- the references: the straightforward ways ------------------------------------------------------
def reference_rebuild(catalog: SegmentCatalog, start_ms: int, end_ms: int) -> Window:
    """Every event folded one by one, ordered by (time, partition, sequence) tuples."""
    catalog.refresh()
    window = Window(start_ms, end_ms)
    ordered: list[tuple[int, int, int, Event]] = []
    for partition in catalog.partitions():
        seen, at_start, seq, next_offset = ObjectState(), ObjectState(), 0, None
        for index, entry in enumerate(catalog.plan(partition, start_ms, end_ms)):
            kf_at = entry.header.keyframe_at_ms
            use_keyframe = kf_at is not None and (index == 0 or kf_at <= start_ms)
            try:
                segment = load_segment(catalog.store, entry, with_keyframe=use_keyframe)
            except FormatError:
                next_offset = -1
                continue
            if segment.keyframe is not None:
                seen = ObjectState.from_keyframe(segment.keyframe)
                at_start = ObjectState.from_keyframe(segment.keyframe)
            trusted = segment.keyframe is not None or next_offset in (None, entry.first_offset)
            next_offset = entry.last_offset + 1
            for e in segment.events:
                if e.ts_ms >= end_ms:
                    continue
                if trusted:
                    seen.apply(e)
                elif not seen.offer(e):
                    continue
                if e.ts_ms < start_ms:
                    at_start.apply(e)
                    continue
                ordered.append((e.ts_ms, partition, seq, e))
                seq += 1
        window.state.objects.update(at_start.objects)
        window.state.lifecycles.update(at_start.lifecycles)
    ordered.sort(key=lambda t: (t[0], t[1], t[2]))
    window.events = [t[3] for t in ordered]
    return window


def reference_simkube(trace: Segment, config: TracerConfig) -> SimkubeTrace:
    """One pass, every GVK built per event, every hash-less delete hashed again by SimKube's rules."""
    events = [SimkubeEvent(to_seconds(trace.header.start_ms))]
    index: dict[str, dict[str, int]] = {}
    api_versions: dict[ObjectKey, str] = {}
    for e in trace.events:
        if e.type not in (EventType.APPLIED, EventType.DELETED):
            continue
        obj = e.obj
        assert obj is not None
        ts, current = to_seconds(e.ts_ms), events[-1]
        if e.type is EventType.APPLIED:
            if current.ts != ts or current.deleted_objs:
                events.append(current := SimkubeEvent(ts))
            current.applied_objs.append(obj)
        else:
            if current.ts != ts:
                events.append(current := SimkubeEvent(ts))
            current.deleted_objs.append(deletion_stub(obj))
        gvk = GroupVersionKind.from_api_version(obj["apiVersion"], obj["kind"]).format()
        meta = obj["metadata"]
        name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        index.setdefault(gvk, {})[name] = e.spec_hash or object_spec_hash(obj)
        api_versions[e.key] = obj["apiVersion"]
    grouped: dict[tuple[str, str], dict[int, list[Event]]] = {}
    for e in trace.events:
        if e.type is EventType.POD_LIFECYCLE and e.owner_key in api_versions:
            owner = parse_object_key(e.owner_key)
            gvk = GroupVersionKind.from_api_version(api_versions[e.owner_key], owner.kind).format()
            grouped.setdefault((gvk, owner.namespaced_name), {}).setdefault(e.pod_spec_hash, []).append(e)
    lifecycles = {
        owner_id: {
            pod_hash: [
                SimkubeLifecycle(
                    to_seconds(e.pod_start_ms or 0),
                    None if e.pod_end_ms is None else to_seconds(e.pod_end_ms),
                )
                for e in sorted(lcs, key=lambda e: (e.pod_start_ms, e.key))
            ]
            for pod_hash, lcs in by_hash.items()
        }
        for owner_id, by_hash in grouped.items()
    }
    return SimkubeTrace(SIMKUBE_TRACE_VERSION, config.to_simkube_mapping(), events, index, lifecycles)


def direct_trace(events: list[Event], start_ms: int, end_ms: int, filters: ExportFilters) -> Segment:
    """The window's trace straight from the (deduplicated, filtered) events: no store involved. Events
    of the same millisecond are in partition order, as an export from the store gives them."""
    state = ObjectState()
    unique = [e for e in events if state.offer(e) and not filters.excludes(e)]
    unique.sort(key=lambda e: (e.ts_ms, _partition(e)))
    return assemble_window(
        None, unique, start_ms, end_ms, config=TracerConfig.default(), suppress_owned=filters.suppress_owned
    )


# ---- the checks ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("start_ms", "end_ms"), WINDOWS)
def test_rebuild_window_equals_the_event_by_event_fold(start_ms: int, end_ms: int) -> None:
    store = store_of(workload())
    fast = rebuild_window(SegmentCatalog(store), start_ms, end_ms)
    slow = reference_rebuild(SegmentCatalog(store), start_ms, end_ms)
    assert fast.events == slow.events  # same events, same order (ties: partition, then offset)
    assert fast.state.objects == slow.state.objects
    assert fast.state.lifecycles == slow.state.lifecycles
    if start_ms <= T0:  # the whole history is read: the overlap and the hole too, read event by event
        assert len(fast.skipped) == 1
        catalog = SegmentCatalog(store)
        catalog.refresh()
        chain = catalog.of_partition(0)
        assert any(a.last_offset >= b.first_offset for a, b in itertools.pairwise(chain))


@pytest.mark.parametrize(("start_ms", "end_ms"), WINDOWS)
def test_simkube_conversion_equals_the_per_event_one_with_recomputed_delete_hashes(
    start_ms: int, end_ms: int
) -> None:
    events = workload()
    config = TracerConfig.default()
    trace = direct_trace(events, start_ms, end_ms, ExportFilters(suppress_owned=False))
    deletes = [e for e in trace.events if e.type is EventType.DELETED]
    if (start_ms, end_ms) == WINDOWS[0]:
        assert len(deletes) > 100
        assert all(e.spec_hash == 0 for e in deletes)  # every delete's hash is reused or computed
    fast, slow = trace_to_simkube(trace, config), reference_simkube(trace, config)
    assert fast.index == slow.index
    assert fast == slow
    assert write_simkube_trace(fast) == write_simkube_trace(slow)


def test_moving_an_event_to_the_window_start_equals_dataclasses_replace() -> None:
    key, pod = ObjectKey("apps/Deployment/ns/d"), ObjectKey("core/Pod/ns/p")
    events = [
        Event.applied(T0, key, synthetic.deployment("ns", "d", 2), 7, uid="u", resource_version="9"),
        Event.deleted(T0, key, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
        Event.pod_lifecycle(T0, pod, owner_key=key, pod_spec_hash=3, start_ms=T0 - 5, end_ms=T0, uid="p"),
        Event.gap(T0, object_key("apps/v1", "Deployment", "ns", "d"), reason="410", from_rv="1", to_rv="2"),
    ]
    for e in events:
        moved = moved_to(e, T0 + 1)
        assert moved == dataclasses.replace(e, ts_ms=T0 + 1)
        assert moved.obj is e.obj  # the body is shared, as replace shares it
    with pytest.raises(FormatError):
        moved_to(events[0], -1)  # validated like any constructed event


@pytest.mark.parametrize("fmt", list(ExportFormat))
@pytest.mark.parametrize(
    "filters", [ExportFilters(), ExportFilters(excluded_namespaces=("ns-1",), suppress_owned=False)]
)
def test_export_equals_the_trace_assembled_from_the_events(fmt: ExportFormat, filters: ExportFilters) -> None:
    events = workload()
    catalog = SegmentCatalog(store_of(events, hole=False))
    for start_ms, end_ms in WINDOWS:
        exported = export_window(catalog, ExportRequest(start_ms, end_ms, fmt, filters))
        trace = direct_trace(events, start_ms, end_ms, filters)
        if fmt is ExportFormat.SIMKUBE:
            simkube = reference_simkube(trace, TracerConfig.default())
            expected, count = write_simkube_trace(simkube), len(simkube.events)  # by second, as inspect
        else:
            expected, count = encode_segment(trace, EXPORT_ZSTD_LEVEL), len(trace.events)
        assert exported.data == expected
        assert exported.events == count
    if fmt is ExportFormat.KUBETAPE and filters == ExportFilters():
        names = {e.key.rpartition("/")[2] for e in decode_segment(exported.data).events}
        assert {"rs-orphan", "tie-00", "tie-11"} <= names
        assert not {"rs-owned", "rs-ds"} & names  # owned by an exported object, by a DaemonSet


def test_a_replayed_range_is_the_exported_file_without_the_bytes() -> None:
    """``replay --segments`` takes the window's trace as it is: it must be what decoding the exported file
    of the same range gives, or a range would replay differently from its export."""
    events = workload()
    catalog = SegmentCatalog(store_of(events, hole=False))
    for start_ms, end_ms in WINDOWS:
        request = ExportRequest(start_ms, end_ms)
        direct = window_trace(catalog, request)
        decoded = decode_segment(export_window(catalog, request).data)
        assert direct.events == decoded.events
        assert direct.keyframe == decoded.keyframe
        assert (direct.header.start_ms, direct.header.end_ms) == (
            decoded.header.start_ms,
            decoded.header.end_ms,
        )
    with pytest.raises(ConfigError, match="replay range is empty"):
        window_trace(catalog, ExportRequest(T0, T0))
