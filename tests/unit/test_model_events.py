"""The event model: constructors, the limits every event is held to, and what the wire and the probe
make of them.

The hypothesis strategies defined here (objects, events) are shared by the format tests.
"""

from __future__ import annotations

import string
from typing import Any

import msgpack
import pytest
from hypothesis import strategies as st

from pipeline.formats.wire.codec import WIRE_VERSION, decode_event, encode_event, event_to_wire
from pipeline.formats.wire.probe import WireProbe
from pipeline.model.errors import FormatError
from pipeline.model.events import RV_MAX_DIGITS, TS_MAX_MS, Event, EventType
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
def deployment(name: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "annotations": {}},
        "spec": {"replicas": 3},
    }


def test_constructors_refuse_inconsistent_events() -> None:
    obj = deployment()
    with pytest.raises(FormatError, match="lifecycle or gap fields"):
        Event(EventType.APPLIED, 1, key_of(obj), obj=obj, owner_key=ObjectKey("a/B/c/d"))
    with pytest.raises(FormatError, match="obj must be None"):
        Event(EventType.GAP, 1, key_of(obj), obj=obj, gap_reason="x")
    with pytest.raises(FormatError, match="ts_ms"):
        Event.applied(True, key_of(obj), obj, 0)  # bool is an int to Python, but not a time


def test_events_are_hashable_values() -> None:
    obj = deployment()
    first = Event.applied(1, key_of(obj), obj, 5)
    assert len({first, Event.applied(1, key_of(obj), deployment(), 5)}) == 1


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
    obj = deployment()
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
    obj = deployment()
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
