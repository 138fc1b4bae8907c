"""The event model and its versioned wire encoding (the value of every ``kubetape.events`` message).

An :class:`Event` is one thing that happened to one object at one event time (milliseconds since the
Unix epoch):

* ``APPLIED`` — the object was created or its spec changed; ``obj`` is the sanitized object and
  ``spec_hash`` its SimKube-compatible spec hash (:func:`pipeline.model.hashing.object_spec_hash`).
* ``DELETED`` — the object was deleted; ``obj`` is its last sanitized state (or a stub with apiVersion,
  kind and metadata name/namespace).
* ``POD_LIFECYCLE`` — a pod's lifecycle (start, and end once finished) as derived by
  :mod:`pipeline.model.lifecycle`; ``key`` is the pod's key, ``owner_key`` the tracked owner whose
  lifecycles it belongs to, ``pod_spec_hash`` the SimKube pod-spec hash keying them. ``obj`` is ``None``.
* ``GAP`` — the watcher could not follow a watch continuously (410 Gone, broken stream, restart); the
  changes between ``gap_from_rv`` and ``gap_to_rv`` were recovered by a re-list, not observed one by one.
  ``key`` is usually a kind-wide key (:func:`pipeline.model.keys.kind_key`). ``obj`` is ``None``.

Every :class:`Event` is validated on construction (a malformed one cannot exist), and by the same rules
(:func:`_problem`) when decoded and when the sink checks a message at ingest; whatever those rules let
in, every later stage can handle. Beyond the types, they bound what later stages compute with:

* times (``ts_ms``, ``pod_start_ms``, ``pod_end_ms``) lie in ``0..``:data:`TS_MAX_MS`, the last
  millisecond of year 9999: a segment window end or a datetime stays in range for any accepted time;
* a resourceVersion (``resource_version``, ``gap_from_rv``, ``gap_to_rv``) is empty or at most
  :data:`RV_MAX_DIGITS` ASCII digits, which is what etcd-backed apiservers issue (an int64 revision),
  so ordering versions as integers never fails (``"²"`` is a digit to ``str.isdigit`` but not to
  ``int``);
* keys (``key``, ``owner_key``) follow :func:`pipeline.model.keys.is_object_key`, the rule that
  exports and every other reader of keys apply.

The sink admits a message by one more rule, :func:`object_problem` (checked by :class:`WireProbe`
without decoding the body): an applied or deleted event's body is the Kubernetes object its key names
(``apiVersion``, ``kind``, ``metadata.name`` and ``metadata.namespace`` as :func:`~pipeline.model.keys.key_of`
reads them). Exports, their filters and SimKube's format read those fields of every object. Events built
in code are not held to it (tools and tests build events with partial bodies).

The wire encoding is a
msgpack array whose first element is :data:`WIRE_VERSION`. msgpack was chosen over orjson after
measuring both (``bench/bench_codec.py``): values are a fifth smaller, encoding is faster, decoding
is as fast, and u64 hashes and binary-safe strings need no special handling.
:func:`decode_event` raises :class:`~pipeline.model.errors.UnknownVersionError` for another version and
:class:`~pipeline.model.errors.FormatError` for anything malformed, always saying what was wrong.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack

from pipeline.model.errors import FormatError, UnknownVersionError
from pipeline.model.keys import ObjectKey, is_object_key, key_of, key_problem

WIRE_VERSION = 1
"""Version of the event wire encoding written by :func:`encode_event`."""

U64_MAX = (1 << 64) - 1
TS_MAX_MS = 253_402_300_799_999
"""The latest time an event may carry: 9999-12-31T23:59:59.999Z in milliseconds since the Unix epoch.
Far below int64's end, so a segment window end (time + window) never overflows (the C fold takes it as
a ``long long``), and every accepted time is a valid ``datetime``."""
RV_MAX_DIGITS = 20
"""A resourceVersion has at most this many ASCII digits (a u64 has 20; etcd revisions are int64)."""


class EventType(enum.Enum):
    """What happened to the object."""

    APPLIED = "applied"
    DELETED = "deleted"
    POD_LIFECYCLE = "pod_lifecycle"
    GAP = "gap"


_WIRE_CODE: dict[EventType, int] = {
    EventType.APPLIED: 1,
    EventType.DELETED: 2,
    EventType.POD_LIFECYCLE: 3,
    EventType.GAP: 4,
}
_TYPE_OF_CODE: dict[int, EventType] = {code: t for t, code in _WIRE_CODE.items()}
_WIRE_LENGTH: dict[int, int] = {1: 8, 2: 8, 3: 12, 4: 11}
"""Fields per wire code (keyed by code: hashing enum members is slow on the decoding path)."""


@dataclass(frozen=True, slots=True)
class Event:
    """One change of one object at ``ts_ms``; see the module docstring for the meaning per ``type``.

    Prefer the constructors :meth:`applied`, :meth:`deleted`, :meth:`pod_lifecycle` and :meth:`gap`.
    Construction raises FormatError when a field does not fit the type.
    """

    type: EventType
    ts_ms: int
    key: ObjectKey
    uid: str = ""
    resource_version: str = ""
    obj: dict[str, Any] | None = field(default=None, hash=False)
    spec_hash: int = 0
    # POD_LIFECYCLE only
    owner_key: ObjectKey | None = None
    pod_spec_hash: int = 0
    pod_start_ms: int | None = None
    pod_end_ms: int | None = None
    # GAP only
    gap_from_rv: str | None = None
    gap_to_rv: str | None = None
    gap_reason: str | None = None

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            raise FormatError(
                f"invalid {self.type.value if isinstance(self.type, EventType) else '?'} "
                f"event for {self.key!r} at {self.ts_ms!r}: {problem}"
            )

    @classmethod
    def applied(
        cls,
        ts_ms: int,
        key: ObjectKey,
        obj: dict[str, Any],
        spec_hash: int,
        *,
        uid: str = "",
        resource_version: str = "",
    ) -> Event:
        """The object (already sanitized) was created or its spec changed."""
        return cls(EventType.APPLIED, ts_ms, key, uid, resource_version, obj, spec_hash)

    @classmethod
    def deleted(
        cls,
        ts_ms: int,
        key: ObjectKey,
        obj: dict[str, Any],
        spec_hash: int = 0,
        *,
        uid: str = "",
        resource_version: str = "",
    ) -> Event:
        """The object was deleted; ``obj`` is its last sanitized state or a stub."""
        return cls(EventType.DELETED, ts_ms, key, uid, resource_version, obj, spec_hash)

    @classmethod
    def pod_lifecycle(
        cls,
        ts_ms: int,
        pod_key: ObjectKey,
        *,
        owner_key: ObjectKey,
        pod_spec_hash: int,
        start_ms: int,
        end_ms: int | None,
        uid: str = "",
        resource_version: str = "",
    ) -> Event:
        """The pod ``pod_key``, counted under ``owner_key``, runs since ``start_ms`` (until ``end_ms``)."""
        return cls(
            EventType.POD_LIFECYCLE,
            ts_ms,
            pod_key,
            uid,
            resource_version,
            owner_key=owner_key,
            pod_spec_hash=pod_spec_hash,
            pod_start_ms=start_ms,
            pod_end_ms=end_ms,
        )

    @classmethod
    def gap(
        cls,
        ts_ms: int,
        key: ObjectKey,
        *,
        reason: str,
        from_rv: str | None = None,
        to_rv: str | None = None,
    ) -> Event:
        """Changes between ``from_rv`` and ``to_rv`` were recovered by a re-list (``reason`` says why)."""
        return cls(EventType.GAP, ts_ms, key, gap_from_rv=from_rv, gap_to_rv=to_rv, gap_reason=reason)


_new_object = object.__new__
_set_field = object.__setattr__


def decoded_event(  # noqa: PLR0917 - positional on purpose: decoders pass the wire order, per event
    event_type: EventType,
    ts_ms: int,
    key: str,
    uid: str,
    resource_version: str,
    obj: Any,
    spec_hash: int,
    owner_key: str | None = None,
    pod_spec_hash: int = 0,
    pod_start_ms: int | None = None,
    pod_end_ms: int | None = None,
    gap_from_rv: str | None = None,
    gap_to_rv: str | None = None,
    gap_reason: str | None = None,
) -> Event:
    """An :class:`Event` from decoded fields, validated exactly as the constructor does (FormatError).

    Decoders build hundreds of thousands of events; this skips the dataclass ``__init__`` machinery,
    which costs about a fifth of decoding an event, and keeps the validation.
    """
    e: Event = _new_object(Event)
    _set_field(e, "type", event_type)
    _set_field(e, "ts_ms", ts_ms)
    _set_field(e, "key", key)
    _set_field(e, "uid", uid)
    _set_field(e, "resource_version", resource_version)
    _set_field(e, "obj", obj)
    _set_field(e, "spec_hash", spec_hash)
    _set_field(e, "owner_key", owner_key)
    _set_field(e, "pod_spec_hash", pod_spec_hash)
    _set_field(e, "pod_start_ms", pod_start_ms)
    _set_field(e, "pod_end_ms", pod_end_ms)
    _set_field(e, "gap_from_rv", gap_from_rv)
    _set_field(e, "gap_to_rv", gap_to_rv)
    _set_field(e, "gap_reason", gap_reason)
    problem = _problem(e)
    if problem is not None:
        raise FormatError(f"invalid {event_type.value} event for {key!r} at {ts_ms!r}: {problem}")
    return e


_FROM_EVENT: Any = object()
"""Default of :func:`_problem`'s ``obj``: take the object from the event itself."""


def _is_int(value: object) -> bool:
    return type(value) is int  # bools are ints to isinstance, but never valid here


def _is_opt_str(value: object) -> bool:
    return value is None or type(value) is str


_RV_RULE = f"must be empty or at most {RV_MAX_DIGITS} ASCII digits"


def _is_rv(rv: str) -> bool:
    """A non-empty resourceVersion that later stages can order as an integer (see the module docstring)."""
    return len(rv) <= RV_MAX_DIGITS and rv.isascii() and rv.isdigit()


def _problem(e: Event | EventHead, obj: object = _FROM_EVENT) -> str | None:
    """What is wrong with ``e``, or None. Runs on every construction, so the common case is kept fast.

    ``obj`` stands in for ``e.obj`` when ``e`` is an :class:`EventHead` (whose body is not decoded):
    a dict of the identity fields for a map (see :func:`_identity`), None for nil, the type byte for
    anything else."""
    # fields are re-typed as object: decoded input is checked here, so the annotations are not trusted yet
    if obj is _FROM_EVENT:
        obj = e.obj
    event_type: object = e.type
    ts: object = e.ts_ms
    key: object = e.key
    spec_hash: object = e.spec_hash
    if type(ts) is not int or not 0 <= ts <= TS_MAX_MS:
        return f"ts_ms must be a non-negative int of milliseconds up to {TS_MAX_MS} (year 9999), got {ts!r}"
    if type(key) is not str or not is_object_key(key):
        return f"key {key_problem(key)}"
    rv: object = e.resource_version
    if type(e.uid) is not str or type(rv) is not str:
        return "uid and resource_version must be strings"
    if rv and not _is_rv(rv):
        return f"resource_version {_RV_RULE}, got {rv!r}"
    if type(spec_hash) is not int or not 0 <= spec_hash <= U64_MAX:
        return f"spec_hash must be an unsigned 64-bit int, got {spec_hash!r}"
    if event_type is EventType.APPLIED or event_type is EventType.DELETED:
        if type(obj) is not dict:
            return "obj must be the (sanitized) object body"
        if e.owner_key is not None or e.pod_start_ms is not None or e.gap_reason is not None:
            return "lifecycle or gap fields set on an object event"
        return None
    if not isinstance(event_type, EventType):
        return f"type must be an EventType, got {event_type!r}"
    if obj is not None:
        return "obj must be None"
    if event_type is EventType.POD_LIFECYCLE:
        return _lifecycle_problem(e)
    if not isinstance(e.gap_reason, str) or not _is_opt_str(e.gap_from_rv) or not _is_opt_str(e.gap_to_rv):
        return "gap_reason must be a string and gap_from_rv/gap_to_rv strings or None"
    for name, value in (("gap_from_rv", e.gap_from_rv), ("gap_to_rv", e.gap_to_rv)):
        if value and not _is_rv(value):
            return f"{name} {_RV_RULE}, got {value!r}"
    if e.owner_key is not None or e.pod_start_ms is not None:
        return "lifecycle fields set on a gap event"
    return None


def _lifecycle_problem(e: Event | EventHead) -> str | None:
    owner: object = e.owner_key
    pod_hash: object = e.pod_spec_hash
    start: object = e.pod_start_ms
    end: object = e.pod_end_ms
    if type(owner) is not str or not is_object_key(owner):
        return f"owner_key {key_problem(owner)}"
    if type(pod_hash) is not int or not 0 <= pod_hash <= U64_MAX:
        return f"pod_spec_hash must be an unsigned 64-bit int, got {pod_hash!r}"
    if type(start) is not int or not 0 <= start <= TS_MAX_MS:
        return f"pod_start_ms must be a non-negative int up to {TS_MAX_MS} (year 9999), got {start!r}"
    if end is not None and (type(end) is not int or not start <= end <= TS_MAX_MS):
        return f"pod_end_ms must be None or an int from pod_start_ms up to {TS_MAX_MS}, got {end!r}"
    if e.gap_reason is not None or e.gap_from_rv is not None or e.gap_to_rv is not None:
        return "gap fields set on a lifecycle event"
    return None


def object_problem(key: str, obj: Any) -> str | None:
    """Why ``obj``, the body of an applied or deleted event, is not the Kubernetes object ``key`` names
    (see the module docstring), or None. Looked at: the keys of the body and of its metadata (strings,
    as JSON has them) and the fields :func:`~pipeline.model.keys.key_of` reads: ``apiVersion``,
    ``kind``, ``metadata.name``, ``metadata.namespace``."""
    if type(obj) is not dict:
        return "obj must be the (sanitized) object body"
    meta = obj.get("metadata")
    if any(type(k) is not str for k in obj) or (type(meta) is dict and any(type(k) is not str for k in meta)):
        return "obj's keys and its metadata's keys must be strings, as in a Kubernetes object"
    try:
        named = key_of(obj)
    except FormatError as exc:
        return f"obj is not a Kubernetes object ({exc})"
    if named != key:
        return f"obj is the object {named!r}, not the one its key names"
    return None


def event_to_wire(e: Event) -> list[Any]:
    """The event as the plain list that :func:`encode_event` packs (also used inside segments)."""
    head = [WIRE_VERSION, _WIRE_CODE[e.type], e.ts_ms, e.key, e.uid, e.resource_version, e.obj, e.spec_hash]
    if e.type is EventType.POD_LIFECYCLE:
        head += [e.owner_key, e.pod_spec_hash, e.pod_start_ms, e.pod_end_ms]
    elif e.type is EventType.GAP:
        head += [e.gap_from_rv, e.gap_to_rv, e.gap_reason]
    return head


def event_from_wire(value: Any, where: str = "event") -> Event:
    """Rebuild an event from :func:`event_to_wire`'s list; raises FormatError naming ``where``."""
    if type(value) is not list or len(value) < 8:
        raise FormatError(f"{where}: not a kubetape event (expected a list of at least 8 fields)")
    version, code = value[0], value[1]
    if version != WIRE_VERSION or type(version) is not int:
        if _is_int(version):
            raise UnknownVersionError(
                f"{where}: event wire version {version} is not supported (this build reads version "
                f"{WIRE_VERSION}); upgrade kubetape to read it"
            )
        raise FormatError(f"{where}: not a kubetape event (first field {version!r} is not a version)")
    event_type = _TYPE_OF_CODE.get(code) if type(code) is int else None
    if event_type is None:
        raise FormatError(f"{where}: unknown event type code {code!r}")
    if len(value) != _WIRE_LENGTH[code]:
        raise FormatError(
            f"{where}: a {event_type.value} event has {_WIRE_LENGTH[code]} fields, got {len(value)}"
        )
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


# ---- the ingest path: structural checks without building the object body ---------------------------
class EventHead(NamedTuple):
    """An event checked by :class:`WireProbe`: every field but the object body, plus its wire bytes.

    The sink only needs the small fields to deduplicate and order events, and stores ``wire`` as is,
    so the body (most of the bytes) is never turned into Python objects on the way to a segment.
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
        return cls(
            e.type,
            e.ts_ms,
            e.key,
            e.uid,
            e.resource_version,
            e.spec_hash,
            e.owner_key,
            e.pod_spec_hash,
            e.pod_start_ms,
            e.pod_end_ms,
            e.gap_from_rv,
            e.gap_to_rv,
            e.gap_reason,
            encode_event(e),
        )


_make_head = tuple.__new__
_TYPE_BY_CODE: tuple[EventType | None, ...] = (None, *(_TYPE_OF_CODE[c] for c in (1, 2, 3, 4)))
_MAP_BYTES = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))
_NIL_BYTE = 0xC0


class WireProbe:
    """Checks event wire bytes as :func:`decode_event` does, without building the object body.

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
        """The head of ``data``; raises UnknownVersionError or FormatError as :func:`decode_event`."""
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
        if (  # the common case, an applied or deleted object, checked inline (_problem's rules)
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
            and (not rv or (len(rv) <= RV_MAX_DIGITS and rv.isascii() and rv.isdigit()))
            and type(spec_hash) is int
            and 0 <= spec_hash <= U64_MAX
            and identity is not None
            and object_problem(key, identity) is None
        ):
            fields = (
                _TYPE_BY_CODE[code],
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
    if version != WIRE_VERSION or type(version) is not int:
        if _is_int(version):
            raise UnknownVersionError(
                f"{where}: event wire version {version} is not supported (this build reads version "
                f"{WIRE_VERSION}); upgrade kubetape to read it"
            )
        raise FormatError(f"{where}: not a kubetape event (first field {version!r} is not a version)")
    event_type = _TYPE_BY_CODE[code] if type(code) is int and 1 <= code <= 4 else None
    if event_type is None:
        raise FormatError(f"{where}: unknown event type code {code!r}")
    length = 8 + len(rest)
    if length != _WIRE_LENGTH[code]:  # type: ignore[index]  # code is an int in 1..4 here
        raise FormatError(
            f"{where}: a {event_type.value} event has {_WIRE_LENGTH[code]} fields, got {length}"  # type: ignore[index]
        )
    if length == 8:  # an object event
        fields = (event_type, ts_ms, key, uid, rv, spec_hash, None, 0, None, None, None, None, None, data)
    elif length == 12:  # a lifecycle: owner, pod hash, start, end
        fields = (event_type, ts_ms, key, uid, rv, spec_hash, *rest, None, None, None, data)
    else:  # a gap: from, to, reason
        fields = (event_type, ts_ms, key, uid, rv, spec_hash, None, 0, None, None, *rest, data)
    head: EventHead = _make_head(EventHead, fields)
    problem = _problem(head, body)  # body: the identity fields of a map, None for nil, else its type byte
    if problem is None and length == 8:
        problem = object_problem(key, body)
    if problem is not None:
        raise FormatError(f"{where}: invalid {event_type.value} event for {key!r} at {ts_ms!r}: {problem}")
    return head
