"""The export's splice path writes exactly what decoding every body writes.

A kubetape export builds the events the C scan vouches for with a body skeleton (namespace, owners,
labels) and writes their stored bytes, with the new time spliced in for objects moved to the window
start (:func:`pipeline.formats.wire.native.light`). That is exact only for bytes in the form msgpack
packs their decoded value in, so these tests feed it that form and every other form the sink admits
(wider ints and headers, float32, repeated map keys, ext values, text that is not UTF-8, NaN) and
damaged lists, and compare, event by event and file by file, with the path that decodes every body.
"""

from __future__ import annotations

import dataclasses
import math
import os
import struct
import zlib
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.formats.segment.decode import EventWires, decode_segment
from pipeline.formats.wire.codec import encode_event, event_from_wire, with_time
from pipeline.formats.wire.native import LIGHT, light
from pipeline.formats.wire.probe import EventHead, WireProbe
from pipeline.formats.wire.skeleton import BodySkeleton
from pipeline.model.errors import KubetapeError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey
from pipeline.model.selectors import parse_selector_text
from pipeline.sink import synthetic
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportFilters, ExportFormat, ExportRequest, export_window
from pipeline.store.memory_store import MemorySegmentStore

pytestmark = pytest.mark.skipif(
    not LIGHT and os.environ.get("CI", "").lower() not in {"1", "true", "yes"},
    reason="the C extension was not built (no compiler at install time)",
)

T0 = 1_763_700_000_000
T0 -= T0 % 60_000


# ---- msgpack in any form the format allows ----------------------------------------------------------
def _int_forms(v: int) -> list[bytes]:
    """Every encoding of ``v``: msgpack's own first."""
    forms = [msgpack.packb(v)]
    for code, fmt, lo, hi in (
        (0xCC, ">B", 0, 0xFF),
        (0xCD, ">H", 0, 0xFFFF),
        (0xCE, ">I", 0, 0xFFFFFFFF),
        (0xCF, ">Q", 0, (1 << 64) - 1),
        (0xD0, ">b", -128, 127),
        (0xD1, ">h", -(1 << 15), (1 << 15) - 1),
        (0xD2, ">i", -(1 << 31), (1 << 31) - 1),
        (0xD3, ">q", -(1 << 63), (1 << 63) - 1),
    ):
        if lo <= v <= hi:
            forms.append(bytes([code]) + struct.pack(fmt, v))
    return forms


def _header_forms(n: int, fix: int | None, fix_max: int, codes: tuple[int, ...]) -> list[bytes]:
    """The headers of a str (or array, map) of ``n`` items: the fix form, then 8/16/32-bit lengths."""
    forms = [bytes([fix | n])] if fix is not None and n <= fix_max else []
    for code, size in zip(codes, (1, 2, 4)[-len(codes) :], strict=True):
        if n < 1 << (8 * size):
            forms.append(bytes([code]) + n.to_bytes(size, "big"))
    return forms


@st.composite
def packed(draw: st.DrawFn, value: Any, hostile: bool) -> bytes:
    """``value`` packed by msgpack or, if ``hostile``, in a form drawn from all it may take."""
    if not hostile or isinstance(value, bool) or value is None:
        return bytes(msgpack.packb(value, use_bin_type=True))
    pick = draw(st.integers(0, 7))
    if isinstance(value, int):
        forms = _int_forms(value)
        return forms[pick % len(forms)]
    if isinstance(value, float):
        if pick == 1 and abs(value) < 1e38 and struct.unpack(">f", struct.pack(">f", value))[0] == value:
            return b"\xca" + struct.pack(">f", value)  # float32: decodes to the same float
        return bytes(msgpack.packb(math.nan if pick == 2 else value))
    if isinstance(value, str):
        raw = value.encode()
        if pick == 3:
            raw += b"\xff"  # not UTF-8 (a segment reader replaces it)
        forms = _header_forms(len(raw), 0xA0, 31, (0xD9, 0xDA, 0xDB))
        return forms[pick % len(forms)] + raw
    if isinstance(value, list):
        forms = _header_forms(len(value), 0x90, 15, (0xDC, 0xDD))
        return forms[pick % len(forms)] + b"".join(draw(packed(v, hostile)) for v in value)
    assert isinstance(value, dict)
    entries = [draw(packed(k, hostile)) + draw(packed(v, hostile)) for k, v in value.items()]
    if entries and pick == 4:
        entries.append(entries[0])  # a repeated key: the dict keeps one
    if pick == 5:
        entries.append(msgpack.packb("x") + msgpack.packb(msgpack.ExtType(5, b"ext")))
    forms = _header_forms(len(entries), 0x80, 15, (0xDE, 0xDF))
    return forms[pick % len(forms)] + b"".join(entries)


OWNERS = [
    [],
    [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u", "controller": True}],
    [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "d"}],
    [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
    [{"kind": "Deployment", "name": "web"}, "not a reference"],
]
KEYS = st.sampled_from(
    [("apps/v1", "Deployment", "ns-a", "web"), ("apps/v1", "ReplicaSet", "ns-a", "web-1")]
    + [("v1", "Pod", ns, f"web-1-{i}") for ns in ("ns-a", "ns-b") for i in range(3)]
    + [("v1", "Namespace", None, "ns-b")]
)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """An object's key and a body with owners, labels and a spec of any JSON."""
    api_version, kind, namespace, name = draw(KEYS)
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    elif draw(st.booleans()):
        meta["namespace"] = None
    owners = draw(st.sampled_from(OWNERS))
    if owners:
        meta["ownerReferences"] = owners
    if draw(st.booleans()):
        meta["labels"] = {"app": draw(st.sampled_from(["web", "db"])), "tier": "x" * draw(st.integers(0, 40))}
    body: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    body["spec"] = draw(
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers(-(1 << 63), (1 << 64) - 1)
            | st.floats(allow_nan=False)
            | st.text(max_size=40),
            lambda inner: (
                st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
            ),
            max_leaves=8,
        )
    )
    group = api_version.rpartition("/")[0] or "core"
    return f"{group}/{kind}/{namespace or '_'}/{name}", body


@st.composite
def wire_events(draw: st.DrawFn, ts: st.SearchStrategy[int]) -> bytes:
    """One event's bytes: an object applied or deleted, or a pod lifecycle; any form if hostile."""
    hostile = draw(st.booleans())
    code = draw(st.sampled_from([1, 1, 1, 2, 3]))
    rv = draw(st.sampled_from(["", "7", "12"]))
    fields: list[Any] = [draw(ts)]
    if code == 3:
        pod_key = f"core/Pod/ns-a/web-1-{draw(st.integers(0, 2))}"
        start = draw(ts)
        end = draw(st.none() | st.integers(start, start + 600_000))
        fields += [
            pod_key,
            "uid-p",
            rv,
            None,
            0,
            "apps/Deployment/ns-a/web",
            draw(st.integers(0, 3)),
            start,
            end,
        ]
    else:
        key, body = draw(bodies())
        fields += [key, draw(st.sampled_from(["u1", "u2"])), rv, body, draw(st.integers(0, (1 << 64) - 1))]
    head = bytes([0x90 | (len(fields) + 2), 1, code])
    return head + b"".join(draw(packed(f, hostile)) for f in fields)


def _whole(piece: bytes) -> Event:
    """An event decoded with its body (tolerantly, as a segment reader does for text not UTF-8)."""
    try:
        value = msgpack.unpackb(piece, raw=False, strict_map_key=False)
    except Exception:
        value = msgpack.unpackb(piece, raw=False, strict_map_key=False, unicode_errors="replace")
    return event_from_wire(value)


# ---- the C scan, event by event ---------------------------------------------------------------------
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(wire_events(st.integers(T0, T0 + 60_000)), min_size=1, max_size=12), st.booleans())
def test_an_event_built_without_its_body_is_the_decoded_event_and_its_bytes_are_its_encoding(
    pieces: list[bytes], labels: bool
) -> None:
    result = light(b"".join(pieces), len(pieces), labels)
    assert result is not None
    events, split, undecided = result
    assert split == pieces
    assert undecided == [i for i, e in enumerate(events) if e is None]
    for event, piece in zip(events, pieces, strict=True):
        if event is None:
            continue
        whole = _whole(piece)
        assert event == whole  # every field; the skeleton compares as the body it stands for
        assert encode_event(whole) == piece  # the stored bytes are what encoding gives
        if whole.type is EventType.APPLIED:  # what an export moves to a window's start
            assert with_time(piece, T0 + 123) == encode_event(dataclasses.replace(whole, ts_ms=T0 + 123))
        if whole.obj is None:
            assert event.obj is None
            continue
        assert type(event.obj) is BodySkeleton
        meta = whole.obj["metadata"]
        wanted = ("namespace", "ownerReferences", "labels") if labels else ("namespace", "ownerReferences")
        assert dict(event.obj) == {"metadata": {k: meta[k] for k in wanted if k in meta}}
    hostile = [p for p in pieces if not _canonical(p)]
    assert all(e is None for e, p in zip(events, pieces, strict=True) if p in hostile)


def _canonical(piece: bytes) -> bool:
    try:
        return encode_event(_whole(piece)) == piece
    except KubetapeError:  # not a valid event at all
        return False


def test_msgpacks_own_form_of_an_ordinary_event_is_built_without_its_body() -> None:
    """The scan must vouch for what watchers write, or the export gains nothing."""
    events = synthetic.synthetic_events(200, T0, 60_000)
    pieces = [encode_event(e) for e in events]
    result = light(b"".join(pieces), len(pieces), False)
    assert result is not None
    built, _, undecided = result
    assert not undecided
    assert built == events
    assert all(b is not None and (b.obj is None or type(b.obj) is BodySkeleton) for b in built)


@pytest.mark.parametrize(
    "blob",
    [
        b"",  # fewer values than counted
        encode_event(synthetic.synthetic_events(1, T0, 1)[0])[:-3],  # cut short
        encode_event(synthetic.synthetic_events(1, T0, 1)[0]) + b"\xc0",  # a value more
        b"\xdd\xff\xff\xff\xff",  # an array of 4 billion items in five bytes
        b"\xdb\x7f\xff\xff\xff" + b"a" * 10,  # a str longer than the list
        b"\x91" * 100 + b"\xc0",  # nested deeper than the scan follows
    ],
)
def test_a_damaged_list_is_left_whole_to_the_decoder(blob: bytes) -> None:
    """Sizes are checked against the bytes there before anything is built; the decoder then reports
    what is wrong as it always did."""
    assert light(blob, 1, True) is None


def test_a_map_too_big_to_check_for_repeated_keys_is_decoded_whole() -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}
    body["data"] = {f"k{i}": "v" for i in range(65)}
    piece = encode_event(Event.applied(T0, ObjectKey("core/ConfigMap/n/c"), body, 1, uid="u"))
    result = light(piece, 1, True)
    assert result is not None
    assert result[0] == [None]
    assert result[2] == [0]


def test_a_huge_count_builds_nothing() -> None:
    """The count comes from a header: a crafted one must not size anything."""
    piece = encode_event(synthetic.synthetic_events(1, T0, 1)[0])
    assert light(piece, 1 << 60, True) is None


def test_an_event_with_a_skeleton_is_never_packed_from_it() -> None:
    events = synthetic.synthetic_events(20, T0, 60_000)
    result = light(b"".join(map(encode_event, events)), len(events), False)
    assert result is not None
    skeletal = next(e for e in result[0] if e is not None and e.obj is not None)
    with pytest.raises(ValueError, match="body skeleton"):
        encode_event(skeletal)


# ---- whole exports ---------------------------------------------------------------------------------
def _store(pieces: list[bytes], format_version: int) -> tuple[MemorySegmentStore, int]:
    """The sink's segments of the events the sink admits among ``pieces`` (two partitions, short
    windows, a keyframe every other segment); and how many were admitted."""
    store = MemorySegmentStore()
    settings_ = CompactionSettings(window_ms=10_000, keyframe_every=2)
    batches: list[list[tuple[int, EventHead | None]]] = [[], []]
    probe = WireProbe()
    admitted = 0
    for piece in pieces:
        try:
            head = probe.head(piece)
        except KubetapeError:
            continue  # the sink sends it to the dead-letter topic
        admitted += 1
        batch = batches[zlib.crc32(head.key.encode()) % 2]
        batch.append((len(batch), head))
    for partition, batch in enumerate(batches):
        compactor = PartitionCompactor(partition, settings_)
        closed = compactor.add_many(batch, now=0.0)
        last = compactor.flush()
        for c in [*closed, *([last] if last is not None else [])]:
            store.put(c.name, c.encode(3, format_version=format_version))
    return store, admitted


FILTERS = [
    ExportFilters(),
    ExportFilters(suppress_owned=False, exclude_daemonset_owned=False),
    ExportFilters(excluded_labels=(parse_selector_text("app=db", "test"),), excluded_namespaces=("ns-b",)),
    ExportFilters(
        included_labels=(parse_selector_text("app in (web)", "test"),), excluded_kinds=("ReplicaSet",)
    ),
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    st.lists(wire_events(st.integers(T0, T0 + 60_000)), min_size=1, max_size=40),
    st.sampled_from([2, 3]),
    st.integers(T0, T0 + 50_000),
    st.sampled_from(FILTERS),
)
def test_the_splice_export_equals_the_export_that_decodes_every_body(
    pieces: list[bytes], format_version: int, start_ms: int, filters: ExportFilters
) -> None:
    store, admitted = _store(pieces, format_version)
    for window in [(T0, T0 + 70_000), (start_ms, start_ms + 15_000)]:
        request = ExportRequest(*window, ExportFormat.KUBETAPE, filters)
        spliced = export_window(SegmentCatalog(store), request)
        whole = export_window(SegmentCatalog(store), request, decode_bodies=True)
        assert spliced == whole
    assert admitted <= len(pieces)


def test_the_benchmark_workload_is_read_without_bodies() -> None:
    """The sink's segments of ordinary events: every object body is a skeleton (none decoded)."""
    events = synthetic.synthetic_events(300, T0, 60_000)
    store, admitted = _store([encode_event(e) for e in events], 2)
    assert admitted == len(events)
    for name in store.files:
        wires = EventWires(bodies=False, labels=False)
        segment = decode_segment(store.files[name], wires=wires)
        assert segment.events
        assert all(e.obj is None or type(e.obj) is BodySkeleton for e in segment.events)
        assert all(wires.get(e) == encode_event(_whole(wires.get(e) or b"")) for e in segment.events)


def test_objects_moved_to_the_window_start_are_spliced() -> None:
    events = synthetic.synthetic_events(300, T0, 60_000)
    store, _ = _store([encode_event(e) for e in events], 2)
    request = ExportRequest(T0 + 30_000, T0 + 40_000)
    spliced = export_window(SegmentCatalog(store), request)
    assert spliced == export_window(SegmentCatalog(store), request, decode_bodies=True)
    moved = [e for e in decode_segment(spliced.data).events if e.ts_ms == T0 + 30_000 and e.obj is not None]
    assert len(moved) > 10
