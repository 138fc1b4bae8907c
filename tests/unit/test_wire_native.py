"""The C ingest path (pipeline.formats.wire.native, pipeline.sink.native_fold) gives exactly what the
Python rules give.

The sink stores what the C scanner accepts and folds with the C duplicate rules, so any difference
from :class:`WireProbe` / :class:`ObjectState` would silently change what a trace holds. These tests
drive both with generated events, redeliveries, re-lists and damaged bytes and compare everything.
"""

from __future__ import annotations

import copy
import os
import string
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.formats.wire.codec import encode_event, event_to_wire
from pipeline.formats.wire.native import INGEST_RULES, NATIVE, scan
from pipeline.formats.wire.probe import EventHead, WireProbe
from pipeline.model.errors import KubetapeError
from pipeline.model.events import RV_MAX_DIGITS, TS_MAX_MS, Event
from pipeline.model.keys import is_object_key, key_of, object_key
from pipeline.sink import native_fold
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.store.state import ObjectState
from tests.unit.test_model_events import JSON, events

pytestmark = pytest.mark.skipif(
    not NATIVE and os.environ.get("CI", "").lower() not in {"1", "true", "yes"},
    reason="the C extension was not built (no compiler at install time)",
)


def test_the_c_extension_is_built() -> None:
    """In CI the extension must exist: a silent fallback would hide a broken build and a 10x slower sink."""
    assert NATIVE


def test_the_c_limits_are_the_python_ones() -> None:
    """The limits are compiled into the scanner; a build from another _wirescan.c is not used at all."""
    from pipeline.formats.wire import _wirescan  # type: ignore[attr-defined]  # a C extension

    assert NATIVE
    assert (_wirescan.TS_MAX_MS, _wirescan.RV_MAX_DIGITS) == (TS_MAX_MS, RV_MAX_DIGITS)
    assert _wirescan.INGEST_RULES == INGEST_RULES


def obj_of(key: str, **extra: Any) -> dict[str, Any]:
    """The smallest object body ``key`` names (any string split at '/'), plus ``extra`` fields."""
    group, kind, namespace, name = ([*key.split("/"), "", "", "", ""])[:4]
    meta = {"name": name} if namespace == "_" else {"name": name, "namespace": namespace}
    api_version = "v1" if group == "core" else f"{group}/v1"
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **extra}


def _probe(data: bytes | None) -> EventHead | None:
    try:
        return WireProbe().head(data)  # type: ignore[arg-type]  # None is refused, as in the sink
    except KubetapeError:
        return None


def _same_head(native: EventHead | None, data: bytes | None) -> None:
    """The scanner may leave a message to the probe, but never accepts one the probe refuses, and
    never reads a field differently."""
    expected = _probe(data)
    if native is None:
        return
    assert expected is not None, f"scanner accepted what the probe refuses: {data!r}"
    assert tuple(native) == tuple(expected)
    assert [type(x) for x in native] == [type(x) for x in expected]
    assert native.wire is data


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events(), min_size=1, max_size=8))
def test_scan_reads_every_valid_event_as_the_probe_does(batch: list[Event]) -> None:
    values: list[bytes | None] = [encode_event(e) for e in batch]
    heads, undecided = scan(values)
    assert undecided == []  # valid events written by kubetape never need the slow path
    for head, value in zip(heads, values, strict=True):
        _same_head(head, value)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(events(), st.data())
def test_scan_never_accepts_damaged_bytes_the_probe_refuses(event: Event, data: st.DataObject) -> None:
    encoded = bytearray(encode_event(event))
    damaged: list[bytes | None] = [bytes(encoded[: data.draw(st.integers(0, len(encoded) - 1))])]
    damaged.append(bytes(encoded) + data.draw(st.binary(min_size=1, max_size=3)))
    for _ in range(3):
        flipped = bytearray(encoded)
        flipped[data.draw(st.integers(0, len(encoded) - 1))] ^= data.draw(st.integers(1, 255))
        damaged.append(bytes(flipped))
    damaged.append(None)
    heads, undecided = scan(damaged)
    assert undecided == [i for i, h in enumerate(heads) if h is None]
    for head, value in zip(heads, damaged, strict=True):
        _same_head(head, value)


FIELD = st.one_of(
    JSON,
    st.sampled_from(["a/b/c/d", "core/Pod/ns/p", "x/y", "apps/Deployment/_/d"]),
    st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1),
    st.binary(max_size=6),
)


@settings(max_examples=800, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2),
    st.integers(0, 5),
    st.lists(FIELD, min_size=6, max_size=12),
)
def test_scan_agrees_with_the_probe_on_arbitrary_wire_lists(version: int, code: int, rest: list[Any]) -> None:
    """Lists shaped like events with any field of any type: wrong types, ranges and lengths."""
    value = msgpack.packb([version, code, *rest], use_bin_type=True)
    (head,), _ = scan([value])
    _same_head(head, value)


# ---- the limits of what later stages can handle: time range, key form, resourceVersions ------------
# Each field on either side of its limit: mostly just inside (so most messages are valid and the
# accepting side is compared too), sometimes just outside.
GOOD_TIMES = st.sampled_from([0, 1, TS_MAX_MS - 1, TS_MAX_MS]) | st.integers(0, TS_MAX_MS)
BAD_TIMES = st.sampled_from([TS_MAX_MS + 1, (1 << 63) - 60_000, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, -1])
BAD_TIMES |= st.integers(min_value=-(1 << 63), max_value=-1) | st.integers(TS_MAX_MS + 1, (1 << 64) - 1)
GOOD_RVS = st.sampled_from(["", "0", "007", "9" * RV_MAX_DIGITS]) | st.text(
    string.digits, max_size=RV_MAX_DIGITS
)
BAD_RVS = st.sampled_from(["9" * (RV_MAX_DIGITS + 1), "²", "٣", "1²", "x", " 1", "-1", "1" * 5000])
BAD_RVS |= st.text(string.digits + "²٣x ", min_size=1, max_size=RV_MAX_DIGITS + 2).filter(
    lambda rv: not (len(rv) <= RV_MAX_DIGITS and rv.isascii() and rv.isdigit())
)
PART = st.sampled_from(
    ["core", "apps", "ConfigMap", "Pod", "_", "*", "é", "名", "a b", "\x00", "\u2215", "x" * 300]
)
PART |= st.text(min_size=1, max_size=4).filter(lambda t: "/" not in t)
GOOD_KEYS = st.builds("/".join, st.lists(PART, min_size=4, max_size=4))
BAD_KEYS = st.sampled_from(["", "/", "///", "core/ConfigMap//x", "/a/b/c", "a/b/c/", "a/b/c", "a/b/c/d/e"])
BAD_KEYS |= st.builds("/".join, st.lists(PART | st.just(""), min_size=1, max_size=6)).filter(
    lambda k: not is_object_key(k)
)
TEXTS = st.sampled_from(["", "é", "\x00", "名前", "x" * 40]) | st.text(max_size=6)
GOOD_HASHES = st.sampled_from([0, 1, (1 << 64) - 1]) | st.integers(0, (1 << 64) - 1)
BAD_HASHES = st.sampled_from([-1, -(1 << 63)])


def pick(draw: st.DrawFn, good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
    """A value from ``good``, or one time in six from ``bad``."""
    return draw(bad if draw(st.integers(0, 5)) == 0 else good)


ODD_VALUES = st.sampled_from([None, "", 0, -1, 1.5, True, b"bytes", [], {}, ["x"], {"name": "x"}, "é", "a/b"])


@st.composite
def bodies(draw: st.DrawFn, key: str) -> dict[Any, Any]:
    """The object ``key`` names, mostly; else with one identity field missing, of another type or
    value (apiVersion forms, cluster scope spellings), plus odd content elsewhere."""
    body: dict[Any, Any] = obj_of(key)
    meta: dict[Any, Any] = body["metadata"]
    change = draw(st.integers(0, 9))
    if change == 1:
        target = draw(st.sampled_from(["apiVersion", "kind", "metadata", "name", "namespace"]))
        (meta if target in ("name", "namespace") else body).pop(target, None)
    elif change == 2:
        target = draw(st.sampled_from(["apiVersion", "kind", "metadata", "name", "namespace"]))
        (meta if target in ("name", "namespace") else body)[target] = draw(ODD_VALUES)
    elif change == 3:
        group = key.split("/", maxsplit=1)[0]
        forms = ["v1", "/v1", "", "apps/", f"{group}/v2", f"x/{group}/v1", f"{group}/", "é/v1"]
        body["apiVersion"] = draw(st.sampled_from(forms))
    elif change == 4 and key.split("/")[2:3] == ["_"]:
        meta["namespace"] = draw(st.sampled_from([None, "", "_"]))
    elif change == 5:
        meta["name"] = meta.get("name", "") + draw(st.sampled_from(["", "x", "/", "é"]))
    if draw(st.booleans()):  # odd content beside the identity: non-string keys, bytes, deep or huge
        body[draw(st.sampled_from(["spec", 7, b"metadata", 1.5]))] = draw(
            st.sampled_from([{"x": "y" * 70_000}, {1: [b"\x00"]}, {"a": {"b": {"c": []}}}, "é"])
        )
    if draw(st.booleans()):
        meta[draw(st.sampled_from(["labels", 3, b"name"]))] = draw(ODD_VALUES)
    return body


@st.composite
def edge_wires(draw: st.DrawFn) -> list[Any]:
    """Well-shaped event lists whose every field sits at, or just past, the edge of what is accepted."""
    code = draw(st.integers(1, 4))
    key = pick(draw, GOOD_KEYS, BAD_KEYS)
    head = [1, code, pick(draw, GOOD_TIMES, BAD_TIMES), key]
    if code <= 2:
        body = draw(bodies(key))
        return [*head, draw(TEXTS), pick(draw, GOOD_RVS, BAD_RVS), body, pick(draw, GOOD_HASHES, BAD_HASHES)]
    rv = pick(draw, GOOD_RVS, BAD_RVS)
    if code == 3:
        start = pick(draw, GOOD_TIMES, BAD_TIMES)
        after = (
            st.integers(min_value=max(start, 0), max_value=TS_MAX_MS)
            if 0 <= start <= TS_MAX_MS
            else BAD_TIMES
        )
        lowest = -(1 << 63)
        before = st.integers(lowest, min(start - 1, (1 << 64) - 1)) if start > lowest else BAD_TIMES
        end = pick(draw, st.none() | st.just(start) | after, before | BAD_TIMES)
        owner = pick(draw, GOOD_KEYS, BAD_KEYS)
        spec_hash, pod_hash = (pick(draw, GOOD_HASHES, BAD_HASHES) for _ in range(2))
        return [*head, draw(TEXTS), rv, None, spec_hash, owner, pod_hash, start, end]
    rvs = st.none() | GOOD_RVS
    return [*head, "", "", None, 0, pick(draw, rvs, BAD_RVS), pick(draw, rvs, BAD_RVS), draw(TEXTS)]


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(edge_wires())
def test_scan_and_probe_draw_the_same_line_at_every_limit(wire: list[Any]) -> None:
    """Times past year 9999 (a window end past int64), keys with an empty part, resourceVersions that
    are not ASCII digits: both refuse them, both accept everything inside, and neither leaves a valid
    event to the slow path."""
    value = msgpack.packb(wire, use_bin_type=True)
    (head,), undecided = scan([value])
    probed = _probe(value)
    _same_head(head, value)
    assert (head is None) == (probed is None), f"scanner and probe disagree on {wire!r}"
    assert undecided == ([] if head is not None else [0])
    if probed is None:
        return
    ts_fields = [probed.ts_ms, probed.pod_start_ms, probed.pod_end_ms]
    assert all(t is None or 0 <= t <= TS_MAX_MS for t in ts_fields)
    assert is_object_key(probed.key)
    assert probed.owner_key is None or is_object_key(probed.owner_key)
    if probed.obj is not None:  # exports read these fields of every object
        assert key_of(probed.obj) == probed.key
    for rv in (probed.resource_version, probed.gap_from_rv, probed.gap_to_rv):
        assert not rv or (rv.isascii() and rv.isdigit() and int(rv) >= 0)


def _map(*entries: tuple[bytes, bytes]) -> bytes:
    """A msgpack map from packed keys and values, duplicates allowed (a dict cannot hold them)."""
    return bytes([0x80 | len(entries)]) + b"".join(k + v for k, v in entries)


def _p(value: Any) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


NAME_D = (_p("name"), _p("d"))
META = (_p("metadata"), _map(NAME_D, (_p("namespace"), _p("ns"))))
API = (_p("apiVersion"), _p("apps/v1"))
KIND = (_p("kind"), _p("Deployment"))


@pytest.mark.parametrize(
    ("body", "admitted"),
    [
        (_map(API, KIND, META), True),
        (_map((_p("apiVersion"), _p("v2")), API, KIND, META), True),  # the last of equal keys wins
        (_map(API, KIND, META, (_p("kind"), _p(5))), False),
        (_map(API, KIND, META, (_p("metadata"), _map(NAME_D))), False),  # a later metadata, another ns
        (_map(API, KIND, META, (_p("metadata"), _p([1]))), False),
        (_map(API, KIND, (_p("metadata"), _map(NAME_D, (_p("namespace"), _p(None)))), META), True),
        (
            _map(API, KIND, (_p("metadata"), _map((b"\xd9\x04name", _p("d")), (_p("namespace"), _p("ns"))))),
            True,
        ),
        (_map(API, KIND, META, (_p("spec"), _p({7: b"x", "a": {(1, 2): 3}}))), True),  # deeper: anything
        (_map(API, KIND, META, (_p(b"metadata"), _p(7))), False),  # keys are strings, as in JSON
        (_map(API, KIND, META, (_p(7), _p(b"x"))), False),
        (_map(API, KIND, META, (_p([1, 2]), _p({3: 4}))), False),
        (_map(API, KIND, META, (b"\xa1\xff", _p(1))), False),  # a key that is not UTF-8
        (_map(API, KIND, META, (_p("é"), _p(1))), True),
        (_map(API, KIND, (_p("metadata"), _map(NAME_D, (_p("namespace"), _p("ns")), (_p(1), _p(2))))), False),
        (
            _map(API, KIND, (_p("metadata"), _map((_p("name"), b"\xa1\xff"), (_p("namespace"), _p("ns"))))),
            False,
        ),
        (_map((_p("apiVersion"), b"\xa6apps/\xff"), KIND, META), False),  # apiVersion is decoded
        (_map((_p("apiVersion"), _p("")), KIND, META), False),
        (_map((_p("apiVersion"), _p("/apps/v1")), KIND, META), False),  # group "/apps"
        (_map(KIND, META), False),
        (_map(API, META), False),
        (_map(API, KIND), False),
    ],
)
def test_scan_and_probe_read_the_object_of_the_key_alike(body: bytes, admitted: bool) -> None:
    """The identity fields of a body: duplicates, odd keys, non-minimal encodings, invalid text."""
    head = [1, 1, 5, "apps/Deployment/ns/d", "u", "7"]
    value = b"\x98" + msgpack.packb(head)[1:] + body + msgpack.packb(3)
    (scanned,), _ = scan([value])
    _same_head(scanned, value)
    assert (scanned is not None) is admitted
    assert (_probe(value) is not None) is admitted


def _body(depth: int) -> dict[str, Any]:
    body: Any = "leaf"
    for _ in range(depth):
        body = {"k": [body]}
    return {"metadata": body}


@pytest.mark.parametrize(
    "body_bytes",
    [
        msgpack.packb(_body(20)),  # deep but fine
        msgpack.packb(_body(200)),  # deeper than the scanner walks: the probe decides
        b"\x81\xa1k\xc1",  # 0xc1 is never valid msgpack
        b"\x81\xa1k\xd4\xff\x00",  # fixext inside the body
        b"\x81\xa1k\xc7\x03\x05abc",  # ext8
        b"\x81\xa1k\xa2\xff\xfe",  # invalid UTF-8 inside the body (the probe does not decode bodies)
        b"\x81\xa1k\xdb\xff\xff\xff\xff",  # str32 longer than the message
        b"\xdf\xff\xff\xff\xff",  # map32 with more entries than bytes
        b"\x81\xa1k\xcb\x00\x00",  # truncated float64
    ],
)
def test_scan_walks_bodies_as_the_probe_does(body_bytes: bytes) -> None:
    head = [1, 1, 5, "apps/Deployment/ns/d", "u", "7"]
    identity = msgpack.packb(obj_of("apps/Deployment/ns/d"))  # a fixmap of 3 entries
    body = bytes([identity[0] + 1]) + identity[1:] + msgpack.packb("spec") + body_bytes
    value = b"\x98" + msgpack.packb(head)[1:] + body + msgpack.packb(3)
    assert _probe(b"\x98" + msgpack.packb(head)[1:] + identity + msgpack.packb(3)) is not None
    (scanned,), _ = scan([value])
    _same_head(scanned, value)


@pytest.mark.parametrize(
    ("field_index", "value"),
    [(3, b"\xff\xfe/a/b/c"), (4, b"\xc3\x28"), (5, b"\xed\xa0\x80")],  # invalid UTF-8 / a surrogate
)
def test_scan_leaves_invalid_utf8_in_head_fields_to_the_probe(field_index: int, value: bytes) -> None:
    key = object_key("apps/v1", "Deployment", "ns", "d")
    wire = event_to_wire(Event.applied(5, key, obj_of(key), 3, uid="u", resource_version="7"))
    packed = [msgpack.packb(x) for x in wire]
    packed[field_index] = b"\xd9" + bytes([len(value)]) + value
    data = b"\x98" + b"".join(packed)
    (scanned,), undecided = scan([data])
    assert scanned is None
    assert undecided == [0]
    assert _probe(data) is None


# ---- folding -------------------------------------------------------------------------------------
KEYS = [object_key("apps/v1", "Deployment", "ns", n) for n in "abc"]
PODS = [object_key("v1", "Pod", "ns", n) for n in "pq"]
OWNER = object_key("apps/v1", "Deployment", "ns", "a")


@st.composite
def stream_events(draw: st.DrawFn) -> Event:
    """Events over a few keys, with repeated versions, older versions, odd resourceVersions."""
    ts = draw(st.integers(0, 300_000))
    uid = draw(st.sampled_from(["u1", "u2"]))
    # leading zeros and the longest resourceVersion accepted: the C fold compares them as numbers
    rv = draw(st.sampled_from(["", "1", "2", "10", "010", "9" * RV_MAX_DIGITS, "0" * RV_MAX_DIGITS]))
    kind = draw(st.integers(0, 3))
    if kind <= 1:
        key = draw(st.sampled_from(KEYS))
        obj = obj_of(key, spec={"replicas": draw(st.integers(0, 2))})
        make = Event.applied if kind == 0 else Event.deleted
        return make(ts, key, obj, draw(st.integers(0, 2)), uid=uid, resource_version=rv)
    if kind == 2:
        start = draw(st.integers(0, 1000))
        end = draw(st.none() | st.integers(start, start + 5))
        return Event.pod_lifecycle(
            ts,
            draw(st.sampled_from(PODS)),
            owner_key=OWNER,
            pod_spec_hash=draw(st.integers(0, 1)),
            start_ms=start,
            end_ms=end,
            uid=uid,
        )
    return Event.gap(
        ts,
        object_key("v1", "Pod", None, "_"),
        reason=draw(st.sampled_from(["410", "restart"])),
        from_rv=draw(st.sampled_from([None, "1"])),
        to_rv="2",
    )


def _compactor(restored: list[Event]) -> PartitionCompactor:
    state = ObjectState()
    for e in restored:  # decoded events, as restore_partition leaves them: the C fold defers to Python
        state.offer(e)
    return PartitionCompactor(
        3, CompactionSettings(window_ms=60_000, max_events=7, keyframe_every=2), state=state
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(stream_events(), max_size=4),
    st.lists(stream_events(), min_size=1, max_size=60),
    st.data(),
)
def test_fold_gives_the_segments_and_state_the_python_rules_give(
    restored: list[Event], stream: list[Event], data: st.DataObject
) -> None:
    values: list[bytes | None] = [encode_event(e) for e in stream]
    for i in data.draw(st.lists(st.integers(0, len(values) - 1), max_size=3)):
        values[i] = None if data.draw(st.booleans()) else b"\x00junk"  # dead-lettered messages
    offsets = list(range(100, 100 + len(values)))
    python, native = _compactor(restored), _compactor(copy.deepcopy(restored))
    python_closed, native_closed = [], []
    # the same messages in random batches, with some batches delivered twice (redeliveries)
    start = 0
    while start < len(values):
        end = data.draw(st.integers(start + 1, len(values)))
        redo = data.draw(st.integers(start, end)) if data.draw(st.booleans()) else end
        for lo, hi in ((start, end), (redo, end)):
            if lo == hi:
                continue
            batch_offsets, batch_values = offsets[lo:hi], values[lo:hi]
            heads, undecided = scan(batch_values)
            for i in undecided:
                heads[i] = _probe(batch_values[i])
            python_heads = [_probe(v) if v is not None else None for v in batch_values]
            assert [tuple(h) if h else h for h in heads] == [tuple(h) if h else h for h in python_heads]
            python_closed += python.add_many(zip(batch_offsets, python_heads, strict=True), 0.0)
            native_closed += native.add_batch(batch_offsets, heads, 0.0)
        start = end
    python_closed += [c for c in [python.flush()] if c is not None]
    native_closed += [c for c in [native.flush()] if c is not None]
    assert [(c.name, c.encode()) for c in native_closed] == [(c.name, c.encode()) for c in python_closed]
    for c in native_closed:  # decoding checks the events are in time order (sorts skipped when known)
        assert c.segment.header.counts.total == len(c.segment.events)
    assert (native.duplicates, native.redelivered, native.next_offset) == (
        python.duplicates,
        python.redelivered,
        python.next_offset,
    )
    assert _state(native.state) == _state(python.state)


def _state(state: ObjectState) -> list[dict[str, tuple[Any, ...]]]:
    def fields(e: Any) -> tuple[Any, ...]:
        head = e if isinstance(e, EventHead) else EventHead.of(e)
        return tuple(head)[:-1]

    return [
        {k: fields(e) for k, e in d.items()}
        for d in (state.objects, state.tombstones, state.lifecycles, state.gaps)
    ]


def test_fold_stops_at_the_window_end_without_applying_that_event() -> None:
    key = object_key("v1", "ConfigMap", "ns", "c")
    heads = [
        WireProbe().head(
            encode_event(Event.applied(ts, key, obj_of(key, v=ts), 1, uid="u", resource_version=str(ts)))
        )
        for ts in (10, 20, 70_000)
    ]
    objects: dict[str, Any] = {}
    kept: list[EventHead] = []
    folded = native_fold.fold(list(heads), 0, (objects, {}, {}, {}), 60_000, 100, kept, 0)
    assert folded == (2, 0, 10, 20, True, native_fold.FOLD_SEGMENT_FULL)
    assert kept == heads[:2]
    assert objects[key] is heads[1]  # the event after the window end was not applied


def test_fold_refuses_arguments_of_the_wrong_type() -> None:
    with pytest.raises(TypeError):
        native_fold.fold([], 0, ({}, {}, {}, []), 0, 0, [], 0)  # type: ignore[arg-type]  # a list, not a dict
