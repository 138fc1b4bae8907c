"""The event wire codec (Kafka message values) and the sink's probe of it: round trips, and every
malformed message refused with its problem named."""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.formats.wire.codec import WIRE_VERSION, decode_event, encode_event, event_to_wire
from pipeline.formats.wire.probe import EventHead, WireProbe
from pipeline.formats.wire.rules import object_problem
from pipeline.model.errors import FormatError, KubetapeError, UnknownVersionError
from pipeline.model.events import TS_MAX_MS, Event
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import key_of, kind_key, object_key
from tests.unit.test_model_events import deployment, events


def test_applied_event_round_trips_with_u64_hash() -> None:
    obj = deployment()
    event = Event.applied(
        1_700_000_000_123, key_of(obj), obj, (1 << 64) - 1, uid="u-1", resource_version="42"
    )
    decoded = decode_event(encode_event(event))
    assert decoded == event
    assert decoded.key == "apps/Deployment/default/web"
    assert decoded.spec_hash == (1 << 64) - 1


def test_each_event_type_round_trips() -> None:
    obj = deployment()
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
    wire = event_to_wire(Event.deleted(1, key_of(deployment()), deployment()))
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
    wire = event_to_wire(Event.deleted(1, key_of(deployment()), deployment()))
    wire[6] = [1, 2, 3]
    with pytest.raises(FormatError, match="obj must be the"):
        WireProbe().head(msgpack.packb(wire), "p0@1")
