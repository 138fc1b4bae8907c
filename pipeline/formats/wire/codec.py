"""The versioned wire encoding of events: a msgpack array whose first element is :data:`WIRE_VERSION`.

msgpack was chosen over orjson after measuring both (``bench/bench_codec.py``): values are a fifth
smaller, encoding is faster, decoding is as fast, and u64 hashes and binary-safe strings need no
special handling. :func:`decode_event` raises :class:`~pipeline.model.errors.UnknownVersionError` for
another version and :class:`~pipeline.model.errors.FormatError` for anything malformed, always saying
what was wrong. The envelope (version, type code, field count) is checked by :func:`wire_type`, which
the probe shares; the fields by :func:`pipeline.model.events.event_problem`, which every Event obeys.
"""

from __future__ import annotations

from typing import Any

import msgpack

from pipeline.formats.wire.skeleton import BodySkeleton
from pipeline.model.errors import FormatError, UnknownVersionError
from pipeline.model.events import Event, EventType, decoded_event

WIRE_VERSION = 1
"""Version of the event wire encoding written by :func:`encode_event`."""

WIRE_CODE: dict[EventType, int] = {
    EventType.APPLIED: 1,
    EventType.DELETED: 2,
    EventType.POD_LIFECYCLE: 3,
    EventType.GAP: 4,
}
"""The one table of type codes. The readers index the derived tuples below by code: hashing enum
members is slow on the decoding path."""
_TYPE_OF_CODE = {code: t for t, code in WIRE_CODE.items()}
TYPE_BY_CODE: tuple[EventType | None, ...] = tuple(
    _TYPE_OF_CODE.get(c) for c in range(max(_TYPE_OF_CODE) + 1)
)
"""Index = wire code; None where no type has that code."""
FIELD_COUNT: tuple[int, ...] = (0, 8, 8, 12, 11)
"""Fields per wire code: eight shared, then a lifecycle's four or a gap's three."""


def _is_int(value: object) -> bool:
    return type(value) is int  # bools are ints to isinstance, but never valid here


def wire_type(where: str, version: object, code: object, length: int) -> EventType:
    """The event type of a wire list whose first fields are ``version`` and ``code`` and which has
    ``length`` fields; UnknownVersionError for another version, FormatError for anything else wrong."""
    if version != WIRE_VERSION or type(version) is not int:
        if _is_int(version):
            raise UnknownVersionError(
                f"{where}: event wire version {version} is not supported (this build reads version "
                f"{WIRE_VERSION}); upgrade kubetape to read it"
            )
        raise FormatError(f"{where}: not a kubetape event (first field {version!r} is not a version)")
    index = code if type(code) is int and 0 <= code < len(TYPE_BY_CODE) else 0  # 0: no type
    event_type = TYPE_BY_CODE[index]
    if event_type is None:
        raise FormatError(f"{where}: unknown event type code {code!r}")
    expected = FIELD_COUNT[index]
    if length != expected:
        raise FormatError(f"{where}: a {event_type.value} event has {expected} fields, got {length}")
    return event_type


def event_to_wire(e: Event) -> list[Any]:
    """The event as the plain list that :func:`encode_event` packs (also used inside segments)."""
    if type(e.obj) is BodySkeleton:  # a stand-in: packing it would lose the body
        raise ValueError(f"the event of {e.key} at {e.ts_ms} holds a body skeleton: write its stored bytes")
    head = [WIRE_VERSION, WIRE_CODE[e.type], e.ts_ms, e.key, e.uid, e.resource_version, e.obj, e.spec_hash]
    if e.type is EventType.POD_LIFECYCLE:
        head += [e.owner_key, e.pod_spec_hash, e.pod_start_ms, e.pod_end_ms]
    elif e.type is EventType.GAP:
        head += [e.gap_from_rv, e.gap_to_rv, e.gap_reason]
    return head


_TIME_AT = 3
"""Where the time starts in an event's bytes: after the fixarray header, the version and the type code
(one byte each: an event has at most 12 fields, version and codes are below 128)."""
_INT_LENGTH = {0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9}


def with_time(wire: bytes, ts_ms: int) -> bytes:
    """``wire`` (an event's bytes, in msgpack's own form) with its time replaced by ``ts_ms``: the
    bytes :func:`encode_event` gives for the event moved to that time, without packing its body
    again (msgpack writes an int in its shortest form, so the rest of the bytes does not move)."""
    first = wire[_TIME_AT]
    length = 1 if first < 0x80 else _INT_LENGTH[first]
    time: bytes = msgpack.packb(ts_ms)
    return b"".join((wire[:_TIME_AT], time, wire[_TIME_AT + length :]))


def event_from_wire(value: Any, where: str = "event") -> Event:
    """Rebuild an event from :func:`event_to_wire`'s list; raises FormatError naming ``where``."""
    if type(value) is not list or len(value) < 8:
        raise FormatError(f"{where}: not a kubetape event (expected a list of at least 8 fields)")
    event_type = wire_type(where, value[0], value[1], len(value))
    try:
        if len(value) == 8:
            return decoded_event(event_type, value[2], value[3], value[4], value[5], value[6], value[7])
        if event_type is EventType.POD_LIFECYCLE:
            return decoded_event(event_type, *value[2:])
        _, _, ts_ms, key, uid, rv, obj, spec_hash, from_rv, to_rv, reason = value
        return decoded_event(
            event_type,
            ts_ms,
            key,
            uid,
            rv,
            obj,
            spec_hash,
            gap_from_rv=from_rv,
            gap_to_rv=to_rv,
            gap_reason=reason,
        )
    except FormatError as exc:
        raise FormatError(f"{where}: {exc}") from None


def encode_event(e: Event) -> bytes:
    """The versioned wire bytes of ``e`` (a Kafka message value)."""
    packed: bytes = msgpack.packb(event_to_wire(e), use_bin_type=True)
    return packed


def decode_event(data: bytes, where: str = "event") -> Event:
    """Decode :func:`encode_event`'s bytes; ``where`` (e.g. ``"topic kubetape.events p3 @1234"``)
    prefixes error messages. Raises UnknownVersionError or FormatError, never anything else."""
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types for corrupt input
        raise FormatError(f"{where}: undecodable msgpack ({type(exc).__name__}: {exc})") from None
    return event_from_wire(value, where)
