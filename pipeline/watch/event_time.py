"""When a change happened: the event time of an observation, from the observation or from the object's
own evidence (:func:`change_evidence`, :func:`event_time`).

Event time is when the watcher observed the change, unless the watcher saw it late (after a restart, a
broker outage, a re-list) and the object carries better evidence: for an applied object the latest of
``metadata.creationTimestamp`` and the ``metadata.managedFields[].time`` of writes other than to the
status subresource, for a deleted one its ``deletionTimestamp`` — used when it is at least
:data:`LATE_AFTER_MS` before the observation (Kubernetes times have 1 s resolution, so a timely
observation is never that far behind) and not before the key's previous event. Evidence up to one
second (its resolution) before the previous event may still be of a later change: such an event takes the
previous event's time, the earliest the change can have happened. Evidence that cannot be of a change
after the key's previous event is not used: evidence the watcher already saw on the previous
version (its creation, or a managedFields time that has not moved since). The event then says so:
its object carries the annotation :data:`TIME_SOURCE_ANNOTATION` naming the source (``managedFields``,
``creationTimestamp`` or ``deletionTimestamp``); without it the time is the observation's.

Apart from :mod:`.shaper`, which decides *whether* an observation is published, because dating it is
a rule of its own on one object's metadata, with its own constants and tests. Whether the evidence was
already seen on the previous version needs the shaper's memory: that check stays in :mod:`.shaper`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.model.lifecycle import parse_k8s_time

TIME_SOURCE_ANNOTATION = "kubetape.dev/time-source"
"""Set on a published object whose event time comes from the object's own evidence, not observation."""
LATE_AFTER_MS = 1500
"""An observation this much after the object's evidence of the change is late (evidence has 1 s
resolution, so a timely observation is up to 1 s after it, plus clock skew)."""
EVIDENCE_RESOLUTION_MS = 1000
"""Kubernetes times are truncated to the second: evidence ``at`` means the change happened in
``[at, at + 1 s)``."""


def _time_ms(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        ms = parse_k8s_time(value)
    except (ValueError, OverflowError):
        return None
    return ms if ms >= 0 else None


def change_evidence(obj: Mapping[str, Any], *, deleted: bool) -> tuple[int, str] | None:
    """The object's own evidence of when its last change happened, and its source, or None."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    if deleted:
        at = _time_ms(meta.get("deletionTimestamp"))
        return None if at is None else (at, "deletionTimestamp")
    best: tuple[int, str] | None = None
    created = _time_ms(meta.get("creationTimestamp"))
    if created is not None:
        best = (created, "creationTimestamp")
    entries = meta.get("managedFields")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping) or entry.get("subresource") == "status":
            continue  # a status write is not a change of the object (writes through /scale are)
        at = _time_ms(entry.get("time"))
        if at is not None and (best is None or at > best[0]):
            best = (at, "managedFields")
    return best


def event_time(
    observed_ms: int, evidence: tuple[int, str] | None, not_before_ms: int
) -> tuple[int, str | None]:
    """The event time (and the evidence's source, None for the observation) of a change observed at
    ``observed_ms``; see the module docstring."""
    if evidence is None:
        return observed_ms, None
    at, source = evidence
    if observed_ms - at < LATE_AFTER_MS or at + EVIDENCE_RESOLUTION_MS <= not_before_ms:
        return observed_ms, None
    # a change written in the same second as the key's previous event: the truncated time reads as before
    # that event, but the change came after it
    return max(at, not_before_ms), source
