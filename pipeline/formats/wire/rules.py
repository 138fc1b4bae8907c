"""The one written definition of which event messages the sink admits: :func:`admitted_event`.

A message is admitted when it decodes as an event (:func:`~pipeline.formats.wire.codec.decode_event`:
the wire envelope, then every field by :func:`pipeline.model.events.event_problem`, the rules every
Event obeys) and, for an applied or deleted event, its body is the Kubernetes object its key names
(:func:`object_problem`). Exports, their filters and SimKube's format read those fields of every object;
events built in code are not held to that last rule (tools and tests build events with partial bodies).

Whatever this lets in, every later stage can handle. The probe (:mod:`.probe`) and the C scan
(``_wirescan.c``) reach the same answer faster; tests/unit/test_wire_validity.py holds them to it.
"""

from __future__ import annotations

from typing import Any

from pipeline.formats.wire.codec import decode_event
from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import key_of


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


def admitted_event(data: bytes, where: str = "event") -> Event:
    """The event in ``data`` if the sink admits it (see the module docstring); otherwise raises
    UnknownVersionError or FormatError naming the problem, as the probe does."""
    event = decode_event(data, where)
    if event.type is EventType.APPLIED or event.type is EventType.DELETED:
        problem = object_problem(event.key, event.obj)
        if problem is not None:
            raise FormatError(
                f"{where}: invalid {event.type.value} event for {event.key!r} at {event.ts_ms!r}: {problem}"
            )
    return event
