"""The event model and its wire encoding (Kafka message values).

The hypothesis strategies defined here (objects, events) are shared by the format tests.
"""

from __future__ import annotations

import contextlib
import string
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.formats.wire.codec import WIRE_VERSION, decode_event, encode_event, event_to_wire
from pipeline.formats.wire.probe import EventHead, WireProbe
from pipeline.formats.wire.rules import object_problem
from pipeline.model.errors import FormatError, KubetapeError, UnknownVersionError
from pipeline.model.events import RV_MAX_DIGITS, TS_MAX_MS, Event, EventType
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import ObjectKey, key_of, kind_key, object_key

# ---- strategies shared with the format tests -------------------------------------------------------
NAMES = st.text(string.ascii_lowercase + string.digits + "-", min_size=1, max_size=12)
U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
TS_MS = st.integers(min_value=0, max_value=4_102_444_800_000)  # up to year 2100
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KINDS = st.sampled_from(
    [("apps/v1", "Deployment"), ("batch/v1", "Job"), ("v1", "Pod"), ("v1", "ConfigMap"), ("v1", "Namespace")]
)


@st.composite
def k8s_objects(draw: st.DrawFn, namespace: str | None = None) -> dict[str, Any]:
    """A sanitized-looking Kubernetes object with an arbitrary JSON spec."""
    api_version, kind = draw(KINDS)
    meta: dict[str, Any] = {"name": draw(NAMES), "annotations": {}}
    if kind != "Namespace":
        meta["namespace"] = namespace or draw(NAMES)
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    if draw(st.booleans()):
        obj["spec"] = draw(JSON)
    return obj


@st.composite
def events(draw: st.DrawFn, ts: st.SearchStrategy[int] = TS_MS) -> Event:
    """Any valid event."""
    event_type = draw(st.sampled_from(EventType))
    uid, rv = draw(st.text(max_size=10)), draw(st.text(string.digits, max_size=8))
    if event_type in (EventType.APPLIED, EventType.DELETED):
        obj = draw(k8s_objects())
        return Event(event_type, draw(ts), key_of(obj), uid, rv, obj, draw(U64))
    key = object_key("v1", "Pod", draw(NAMES), draw(NAMES))
    if event_type is EventType.POD_LIFECYCLE:
        start = draw(TS_MS)
        end = draw(st.none() | st.integers(min_value=start, max_value=start + 10**9))
        owner = object_key("apps/v1", "Deployment", "ns", draw(NAMES))
        return Event.pod_lifecycle(
            draw(ts), key, owner_key=owner, pod_spec_hash=draw(U64), start_ms=start, end_ms=end, uid=uid
        )
    return Event.gap(
        draw(ts),
        kind_key("v1", "Pod"),
        reason=draw(st.text(max_size=20)),
        from_rv=draw(st.none() | st.text(string.digits, max_size=8)),
        to_rv=draw(st.none() | st.text(string.digits, max_size=8)),
    )


# ---- tests -----------------------------------------------------------------------------------------
def _deployment(name: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "annotations": {}},
        "spec": {"replicas": 3},
    }


def test_applied_event_round_trips_with_u64_hash() -> None:
    obj = _deployment()
    event = Event.applied(
        1_700_000_000_123, key_of(obj), obj, (1 << 64) - 1, uid="u-1", resource_version="42"
    )
    decoded = decode_event(encode_event(event))
    assert decoded == event
    assert decoded.key == "apps/Deployment/default/web"
    assert decoded.spec_hash == (1 << 64) - 1


def test_each_event_type_round_trips() -> None:
    obj = _deployment()
    pod = object_key("v1", "Pod", "default", "web-1")
    samples = [
        Event.applied(1, key_of(obj), obj, object_spec_hash(obj)),
        Event.deleted(2, key_of(obj), obj),
        Event.pod_lifecycle(
            3, pod, owner_key=key_of(obj), pod_spec_hash=7, start_ms=3, end_ms=None, uid="pod-uid"
        ),
        Event.gap(4, kind_key("apps/v1", "Deployment"), reason="410 Gone", from_rv="10", to_rv="99"),
    ]
    for event in samples:
        assert decode_event(encode_event(event)) == event


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(events())
def test_random_events_round_trip(event: Event) -> None:
    assert decode_event(encode_event(event)) == event


def test_unknown_wire_version_is_rejected_with_the_version_named() -> None:
    wire = event_to_wire(Event.deleted(1, key_of(_deployment()), _deployment()))
    wire[0] = WIRE_VERSION + 1
    with pytest.raises(UnknownVersionError, match=f"version {WIRE_VERSION + 1} is not supported"):
        decode_event(msgpack.packb(wire), where="kubetape.events[0]@17")


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ({"not": "a list"}, "not a kubetape event"),
        ([WIRE_VERSION, 9, 0, "a/B/c/d", "", "", None, 0], "unknown event type code 9"),
        ([WIRE_VERSION, 1, 0, "a/B/c/d", "", "", {}, 0, "extra"], "has 8 fields, got 9"),
        ([WIRE_VERSION, 1, -5, "a/B/c/d", "", "", {}, 0], "ts_ms must be a non-negative"),
        ([WIRE_VERSION, 1, TS_MAX_MS + 1, "a/B/c/d", "", "", {}, 0], "ts_ms must be .* up to"),
        ([WIRE_VERSION, 1, (1 << 63) - 60_000, "a/B/c/d", "", "", {}, 0], "ts_ms must be .*year 9999"),
        ([WIRE_VERSION, 1, 0, "core/ConfigMap//x", "", "", {}, 0], "key must be .*four non-empty parts"),
        ([WIRE_VERSION, 1, 0, "a/B/c/d", "", "²", {}, 0], "resource_version must be empty or .* digits"),
        ([WIRE_VERSION, 1, 0, "no-slashes", "", "", {}, 0], "key must be group/Kind/namespace/name"),
        ([WIRE_VERSION, 1, 0, "a/B/c/d", "", "", None, 0], "obj must be the"),
        ([WIRE_VERSION, 1, 0, "a/B/c/d", "", "", {}, -1], "spec_hash must be an unsigned 64-bit"),
        ([WIRE_VERSION, 3, 0, "a/B/c/d", "", "", None, 0, "o/B/c/d", 1, 10, 5], "pod_end_ms must be"),
        ([WIRE_VERSION, 3, 0, "a/B/c/d", "", "", None, 0, "o/B//d", 1, 10, None], "owner_key must be"),
        ([WIRE_VERSION, 3, 0, "a/B/c/d", "", "", None, 0, "o/B/c/d", 1, TS_MAX_MS + 1, None], "pod_start_ms"),
        ([WIRE_VERSION, 4, 0, "a/B/*/*", "", "", None, 0, "1", "x", "410"], "gap_to_rv must be"),
        (["1", 1], "not a kubetape event"),
    ],
)
def test_malformed_wire_values_name_the_problem(wire: Any, message: str) -> None:
    with pytest.raises(FormatError, match=message) as info:
        decode_event(msgpack.packb(wire), where="msg@3")
    assert str(info.value).startswith("msg@3: ")
    with pytest.raises(FormatError, match=message) as info:  # the sink's cheaper check says the same
        WireProbe().head(msgpack.packb(wire), where="msg@3")
    assert str(info.value).startswith("msg@3: ")


def test_undecodable_bytes_raise_format_error() -> None:
    with pytest.raises(FormatError, match="undecodable msgpack"):
        decode_event(b"\xc1")


@settings(max_examples=300)
@given(events(), st.data())
def test_truncated_or_corrupted_wire_bytes_raise_only_kubetape_errors(
    event: Event, data: st.DataObject
) -> None:
    encoded = bytearray(encode_event(event))
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(KubetapeError):
        decode_event(bytes(encoded[:cut]))
    position = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    with contextlib.suppress(KubetapeError):  # a flipped byte may still decode to a valid event
        decode_event(bytes(encoded))


def test_constructors_refuse_inconsistent_events() -> None:
    obj = _deployment()
    with pytest.raises(FormatError, match="lifecycle or gap fields"):
        Event(EventType.APPLIED, 1, key_of(obj), obj=obj, owner_key=ObjectKey("a/B/c/d"))
    with pytest.raises(FormatError, match="obj must be None"):
        Event(EventType.GAP, 1, key_of(obj), obj=obj, gap_reason="x")
    with pytest.raises(FormatError, match="ts_ms"):
        Event.applied(True, key_of(obj), obj, 0)  # bool is an int to Python, but not a time


def test_events_are_hashable_values() -> None:
    obj = _deployment()
    first = Event.applied(1, key_of(obj), obj, 5)
    assert len({first, Event.applied(1, key_of(obj), _deployment(), 5)}) == 1


# ---- the sink's structural check -------------------------------------------------------------------
def _head_fields(head: EventHead) -> tuple[Any, ...]:
    return tuple(head)[:-1]  # all but the wire bytes


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(events())
def test_the_probe_reads_every_field_but_the_body_and_keeps_the_bytes(event: Event) -> None:
    data = encode_event(event)
    head = WireProbe().head(data)
    assert _head_fields(head) == _head_fields(EventHead.of(event))
    assert head.wire is data
    assert head.to_event() == event


@settings(max_examples=300)
@given(events(), st.data())
def test_the_probe_refuses_what_decoding_refuses_and_recovers_after_each_error(
    event: Event, data: st.DataObject
) -> None:
    """One probe serves a whole consumer: a refused message must not disturb the next one."""
    probe = WireProbe()
    encoded = bytearray(encode_event(event))
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(KubetapeError):
        probe.head(bytes(encoded[:cut]))
    with pytest.raises(FormatError, match="bytes after the event"):
        probe.head(bytes(encoded) + b"\x00")
    position = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    try:
        decoded = decode_event(bytes(encoded))
        # what decodes is admitted unless its body is not the object its key names
        admissible = decoded.obj is None or object_problem(decoded.key, decoded.obj) is None
    except UnicodeDecodeError:  # pragma: no cover - decode_event turns it into FormatError
        raise
    except KubetapeError:
        admissible = False
    try:
        head = probe.head(bytes(encoded))
    except KubetapeError:
        head = None
    # The probe does not decode the body's text: a flipped byte inside it may only break its UTF-8.
    assert head is not None or not admissible
    if head is not None and admissible:
        assert _head_fields(head) == _head_fields(EventHead.of(decoded))
    assert _head_fields(probe.head(encode_event(event))) == _head_fields(EventHead.of(event))


def test_a_body_that_is_not_a_map_is_refused_without_decoding_it() -> None:
    wire = event_to_wire(Event.deleted(1, key_of(_deployment()), _deployment()))
    wire[6] = [1, 2, 3]
    with pytest.raises(FormatError, match="obj must be the"):
        WireProbe().head(msgpack.packb(wire), "p0@1")


# ---- what later stages can handle: the limits every event is held to ------------------------------
@pytest.mark.parametrize(
    ("ts_ms", "ok"),
    [
        (0, True),
        (TS_MAX_MS, True),
        (TS_MAX_MS + 1, False),
        ((1 << 63) - 60_000, False),
        ((1 << 63) - 1, False),
    ],
)
def test_event_times_end_with_year_9999(ts_ms: int, ok: bool) -> None:
    """A window end (time + 60 s) of any accepted time fits the C fold's ``long long``."""
    obj = _deployment()
    if ok:
        assert decode_event(encode_event(Event.applied(ts_ms, key_of(obj), obj, 0))).ts_ms == ts_ms
        assert ts_ms + 3_600_000 < (1 << 63)
        return
    with pytest.raises(FormatError, match="ts_ms must be"):
        Event.applied(ts_ms, key_of(obj), obj, 0)
    wire = event_to_wire(Event.applied(0, key_of(obj), obj, 0))
    wire[2] = ts_ms
    with pytest.raises(FormatError, match="ts_ms must be"):
        WireProbe().head(msgpack.packb(wire))


@pytest.mark.parametrize(
    ("rv", "ok"),
    [
        ("", True),
        ("0", True),
        ("007", True),
        ("9" * RV_MAX_DIGITS, True),
        ("9" * (RV_MAX_DIGITS + 1), False),  # int() would still work; etcd never issues it
        ("1" * 5000, False),  # past Python's int() digit limit
        ("²", False),  # a digit to str.isdigit, not to int()
        ("٣", False),  # a decimal digit to int(), but not ASCII
        ("12a", False),
        (" 12", False),
        ("-1", False),
    ],
)
def test_resource_versions_are_empty_or_ascii_digits(rv: str, ok: bool) -> None:
    obj = _deployment()
    wire = event_to_wire(Event.applied(5, key_of(obj), obj, 0))
    wire[5] = rv
    gap = event_to_wire(Event.gap(5, kind_key("v1", "Pod"), reason="410"))
    gap[8] = rv
    for value in (wire, gap):
        data = msgpack.packb(value)
        if ok:
            assert decode_event(data) == WireProbe().head(data).to_event()
            continue
        with pytest.raises(FormatError, match="must be empty or at most 20 ASCII digits"):
            decode_event(data)
        with pytest.raises(FormatError, match="must be empty or at most 20 ASCII digits"):
            WireProbe().head(data)


def _body_of(key: str) -> dict[str, Any]:
    """The smallest object body a key names (for any string split at '/', well formed or not)."""
    group, kind, namespace, name = ([*key.split("/"), "", "", "", ""])[:4]
    meta = {"name": name} if namespace == "_" else {"name": name, "namespace": namespace}
    return {"apiVersion": "v1" if group == "core" else f"{group}/v1", "kind": kind, "metadata": meta}


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("core/ConfigMap/ns/x", True),
        ("core/Node/_/n", True),
        ("core/Pod/*/*", True),  # a kind-wide key (gaps)
        ("core/ConfigMap/ns/é", True),  # not a Kubernetes name, but nothing downstream breaks on it
        ("core/ConfigMap//x", False),
        ("/ConfigMap/ns/x", False),
        ("core/ConfigMap/ns/", False),
        ("core//ns/x", False),
        ("core/ConfigMap/ns/x/y", False),
        ("core/ConfigMap/ns", False),
        ("", False),
        ("///", False),
    ],
)
def test_keys_follow_the_rule_exports_apply(key: str, ok: bool) -> None:
    """One rule: what ingest lets in, ``parse_object_key`` (exports, analytics) reads."""
    from pipeline.model.keys import is_object_key, parse_object_key

    assert is_object_key(key) is ok
    wires = [
        [WIRE_VERSION, 1, 0, key, "", "", _body_of(key), 0],
        [WIRE_VERSION, 3, 0, "core/Pod/ns/p", "", "", None, 0, key, 1, 10, None],
    ]
    for wire in wires:
        data = msgpack.packb(wire)
        if ok:
            WireProbe().head(data)
            event = decode_event(data)
            parse_object_key(event.key)
            parse_object_key(event.owner_key or event.key)
            continue
        with pytest.raises(FormatError, match="key must be group/Kind/namespace/name"):
            WireProbe().head(data)
        with pytest.raises(FormatError, match="malformed object key"):
            parse_object_key(key)
