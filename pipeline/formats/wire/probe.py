"""The sink's Python ingest path: check event wire bytes by the rules of :mod:`.rules` without
building the object body.

The sink only needs the small fields of an event to deduplicate and order it, and stores its wire
bytes as they are, so the body (most of the bytes) is never turned into Python objects on the way to a
segment. The C scan (:mod:`.native`) does the same for the common cases in bulk and leaves the rest to
:class:`WireProbe`.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import msgpack

from pipeline.formats.wire.codec import TYPE_BY_CODE, WIRE_VERSION, decode_event, encode_event, wire_type
from pipeline.formats.wire.rules import object_problem
from pipeline.model.errors import FormatError
from pipeline.model.events import TS_MAX_MS, U64_MAX, Event, EventType, event_problem, is_resource_version
from pipeline.model.keys import ObjectKey, is_object_key


class EventHead(NamedTuple):
    """An event checked by :class:`WireProbe`: every field but the object body, plus its wire bytes.

    ``obj`` decodes the body on demand (rare: content comparison, keyframe tools, tests). A named
    tuple because building one is a single C call (a slotted class costs 3x more per message).
    """

    type: EventType
    ts_ms: int
    key: ObjectKey
    uid: str
    resource_version: str
    spec_hash: int
    owner_key: ObjectKey | None
    pod_spec_hash: int
    pod_start_ms: int | None
    pod_end_ms: int | None
    gap_from_rv: str | None
    gap_to_rv: str | None
    gap_reason: str | None
    wire: bytes

    @property
    def obj(self) -> dict[str, Any] | None:
        """The object body (decoded from ``wire`` on each access)."""
        return self.to_event().obj

    def to_event(self) -> Event:
        """The full :class:`Event` (decodes and validates the wire bytes)."""
        return decode_event(self.wire)

    @classmethod
    def of(cls, e: Event) -> EventHead:
        """The head of an already built event (encodes it once)."""
        return cls._make((*_head_fields(e), encode_event(e)))


_head_fields = operator.attrgetter(*EventHead._fields[:-1])
"""The fields of an event that its head holds: all but ``wire`` (the last), under the same names."""
_make_head = tuple.__new__
_MAP_BYTES = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))
_NIL_BYTE = 0xC0


class WireProbe:
    """Checks event wire bytes as :func:`~pipeline.formats.wire.rules.admitted_event` does, without
    building the object body.

    msgpack's C unpacker walks the whole message (so truncated or malformed msgpack is caught) but only
    the small fields become Python objects; of the body (a map) only its keys, ``apiVersion``, ``kind``
    and ``metadata``'s keys, ``name`` and ``namespace`` are decoded, for :func:`object_problem`; the
    rest is skipped. That is several times cheaper than a full decode. Not checked here: the rest of the
    text inside the body being valid UTF-8 (segment readers replace invalid bytes by U+FFFD; no kubetape
    watcher writes such text). One probe per consumer: it is not thread-safe.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self._position = 0  # bytes consumed by the unpacker so far (tell() counts from its creation)

    def head(self, data: bytes, where: str = "event") -> EventHead:
        """The head of ``data``; raises UnknownVersionError or FormatError as
        :func:`~pipeline.formats.wire.rules.admitted_event`."""
        up = self._unpacker
        start = self._position
        try:
            up.feed(data)
            n = up.read_array_header()
            if not 8 <= n <= 12:
                raise FormatError(f"{where}: not a kubetape event (expected a list of at least 8 fields)")
            version = up.unpack()
            code = up.unpack()
            ts_ms = up.unpack()
            key = up.unpack()
            uid = up.unpack()
            rv = up.unpack()
            body_at = up.tell() - start
            identity = _identity(up, data, start) if data[body_at] in _MAP_BYTES else None
            if identity is None:
                up.skip()
            spec_hash = up.unpack()
            rest = [up.unpack() for _ in range(n - 8)] if n > 8 else []
            end = up.tell()
        except FormatError:
            self._reset()
            raise
        except Exception as exc:  # msgpack raises several unrelated types for corrupt input
            self._reset()
            decode_event(data, where)  # raises the same error a full decode gives (rare path)
            raise FormatError(f"{where}: undecodable msgpack ({type(exc).__name__}: {exc})") from None
        self._position = end
        if end - start != len(data):
            self._reset()
            raise FormatError(f"{where}: undecodable msgpack (ExtraData: bytes after the event)")
        # The common case, an applied or deleted object, checked inline by event_problem's rules (a
        # shortcut for speed: _checked_head applies the rules themselves; test_wire_validity holds both
        # to the definition).
        if (
            n == 8  # fields of an object event
            and version == WIRE_VERSION
            and (code == 1 or code == 2)  # noqa: PLR1714 - faster than a tuple test
            and type(version) is int
            and type(code) is int
            and type(ts_ms) is int
            and 0 <= ts_ms <= TS_MAX_MS
            and type(key) is str
            and is_object_key(key)  # group/Kind/namespace/name
            and type(uid) is str
            and type(rv) is str
            and (not rv or is_resource_version(rv))
            and type(spec_hash) is int
            and 0 <= spec_hash <= U64_MAX
            and identity is not None
            and object_problem(key, identity) is None
        ):
            fields = (
                TYPE_BY_CODE[code],
                ts_ms,
                key,
                uid,
                rv,
                spec_hash,
                None,
                0,
                None,
                None,
                None,
                None,
                None,
            )
            return _make_head(EventHead, (*fields, data))
        # lifecycles, gaps, and anything wrong (raises naming the problem)
        body = identity if identity is not None else None if data[body_at] == _NIL_BYTE else data[body_at]
        return _checked_head(data, where, version, code, ts_ms, key, uid, rv, body, spec_hash, rest)


def _identity(up: Any, data: bytes, start: int) -> dict[Any, Any]:
    """From the body map the unpacker ``up`` is at: its ``apiVersion``, ``kind`` and ``metadata`` (only
    ``name`` and ``namespace``), as a dict of the whole body would hold them (the last of equal keys
    wins), for :func:`object_problem`; every other value is skipped, not decoded. A key that is not a
    str is noted (:data:`_NON_STRING_KEY`), as object_problem refuses it. ``_wirescan.c`` reads bodies
    the same way. (Written for speed: it runs per message on the Python path; ``tell()`` is slow.)"""
    found: dict[Any, Any] = {}
    unpack, skip = up.unpack, up.skip
    for _ in range(up.read_map_header()):
        name = unpack()
        if type(name) is not str:
            found[_NON_STRING_KEY] = True
            skip()
        elif name == "metadata":
            if data[up.tell() - start] in _MAP_BYTES:
                meta: dict[Any, Any] = {}
                for _ in range(up.read_map_header()):
                    meta_name = unpack()
                    if type(meta_name) is not str:
                        meta[_NON_STRING_KEY] = True
                        skip()
                    elif meta_name == "name" or meta_name == "namespace":  # noqa: PLR1714 - faster
                        meta[meta_name] = unpack()
                    else:
                        skip()
                found[name] = meta
            else:
                skip()
                found[name] = _NOT_A_MAP
        elif name == "apiVersion" or name == "kind":  # noqa: PLR1714 - faster
            found[name] = unpack()
        else:
            skip()
    return found


_NON_STRING_KEY = ("a key that is not a string",)
"""Stands for map keys that are not strings in what :func:`_identity` returns."""
_NOT_A_MAP = ("not a map",)
"""Stands for a skipped ``metadata`` that is not a map (:func:`~pipeline.model.keys.key_of` refuses it)."""


def _checked_head(  # noqa: PLR0917 - the wire fields, in wire order
    data: bytes,
    where: str,
    version: object,
    code: object,
    ts_ms: Any,
    key: Any,
    uid: Any,
    rv: Any,
    body: object,
    spec_hash: Any,
    rest: list[Any],
) -> EventHead:
    length = 8 + len(rest)
    event_type = wire_type(where, version, code, length)
    if length == 8:  # an object event
        fields = (event_type, ts_ms, key, uid, rv, spec_hash, None, 0, None, None, None, None, None, data)
    elif length == 12:  # a lifecycle: owner, pod hash, start, end
        fields = (event_type, ts_ms, key, uid, rv, spec_hash, *rest, None, None, None, data)
    else:  # a gap: from, to, reason
        fields = (event_type, ts_ms, key, uid, rv, spec_hash, None, 0, None, None, *rest, data)
    head: EventHead = _make_head(EventHead, fields)
    problem = event_problem(
        head, body
    )  # body: the identity fields of a map, None for nil, else its type byte
    if problem is None and length == 8:
        problem = object_problem(key, body)
    if problem is not None:
        raise FormatError(f"{where}: invalid {event_type.value} event for {key!r} at {ts_ms!r}: {problem}")
    return head
