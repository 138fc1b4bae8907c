"""The event model: what happened to one object, and the rules every event obeys.

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
(:func:`event_problem`) when decoded and when the sink checks a message at ingest; whatever those rules let
in, every later stage can handle. Beyond the types, they bound what later stages compute with:

* times (``ts_ms``, ``pod_start_ms``, ``pod_end_ms``) lie in ``0..``:data:`TS_MAX_MS`, the last
  millisecond of year 9999: a segment window end or a datetime stays in range for any accepted time;
* a resourceVersion (``resource_version``, ``gap_from_rv``, ``gap_to_rv``) is empty or at most
  :data:`RV_MAX_DIGITS` ASCII digits, which is what etcd-backed apiservers issue (an int64 revision),
  so ordering versions as integers never fails (``"²"`` is a digit to ``str.isdigit`` but not to
  ``int``);
* keys (``key``, ``owner_key``) follow :func:`pipeline.model.keys.is_object_key`, the rule that
  exports and every other reader of keys apply.

The wire encoding of events, the one definition of which messages the sink admits (one more rule on
object bodies), and the sink's fast ingest probe live in :mod:`pipeline.formats.wire`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline.model.errors import FormatError
from pipeline.model.keys import ObjectKey, is_object_key, key_problem

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
        problem = event_problem(self)
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
    e = prechecked_event(
        event_type,
        ts_ms,
        key,
        uid,
        resource_version,
        obj,
        spec_hash,
        owner_key,
        pod_spec_hash,
        pod_start_ms,
        pod_end_ms,
        gap_from_rv,
        gap_to_rv,
        gap_reason,
    )
    problem = event_problem(e)
    if problem is not None:
        raise FormatError(f"invalid {event_type.value} event for {key!r} at {ts_ms!r}: {problem}")
    return e


def prechecked_event(  # noqa: PLR0917 - positional on purpose, as decoded_event
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
    """:func:`decoded_event` without :func:`event_problem`, for fields whose wire bytes a check at least
    as strict has just accepted: the C scan of :mod:`pipeline.formats.wire.native`, which never accepts
    what these rules refuse (tests/unit/test_wire_validity.py). Anything else uses :func:`decoded_event`."""
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
    return e


_FROM_EVENT: Any = object()
"""Default of :func:`event_problem`'s ``obj``: take the object from the event itself."""


class EventFields(Protocol):
    """The fields :func:`event_problem` reads: an :class:`Event`, or a head of one whose body was not
    decoded (:class:`pipeline.formats.wire.probe.EventHead`). A protocol, so that the rules stay here
    with the type they define while the model imports nothing from the layers above it."""

    @property
    def type(self) -> EventType: ...
    @property
    def ts_ms(self) -> int: ...
    @property
    def key(self) -> ObjectKey: ...
    @property
    def uid(self) -> str: ...
    @property
    def resource_version(self) -> str: ...
    @property
    def obj(self) -> dict[str, Any] | None: ...
    @property
    def spec_hash(self) -> int: ...
    @property
    def owner_key(self) -> ObjectKey | None: ...
    @property
    def pod_spec_hash(self) -> int: ...
    @property
    def pod_start_ms(self) -> int | None: ...
    @property
    def pod_end_ms(self) -> int | None: ...
    @property
    def gap_from_rv(self) -> str | None: ...
    @property
    def gap_to_rv(self) -> str | None: ...
    @property
    def gap_reason(self) -> str | None: ...


def _is_opt_str(value: object) -> bool:
    return value is None or type(value) is str


_RV_RULE = f"must be empty or at most {RV_MAX_DIGITS} ASCII digits"


def is_resource_version(rv: str) -> bool:
    """A non-empty resourceVersion that later stages can order as an integer (see the module docstring)."""
    return len(rv) <= RV_MAX_DIGITS and rv.isascii() and rv.isdigit()


def event_problem(e: EventFields, obj: object = _FROM_EVENT) -> str | None:
    """What is wrong with ``e``, or None. Runs on every construction, so the common case is kept fast.

    ``obj`` stands in for ``e.obj`` when ``e`` is a head whose body is not decoded (the wire probe
    passes a dict of the body's identity fields for a map, None for nil, the type byte for anything
    else)."""
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
    if rv and not is_resource_version(rv):
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
        if value and not is_resource_version(value):
            return f"{name} {_RV_RULE}, got {value!r}"
    if e.owner_key is not None or e.pod_start_ms is not None:
        return "lifecycle fields set on a gap event"
    return None


def _lifecycle_problem(e: EventFields) -> str | None:
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
