"""What ``kubetape xray`` shows, computed from a trace: the events over time, an object's versions and the
diff between two, and an owner's pods over time.

Pure logic over a :class:`~pipeline.formats.segment.content.Segment` (a kubetape trace or segment, or a
SimKube trace read through :func:`pipeline.formats.trace.read_trace`); the terminal app in
``services/xray_app.py`` only lays these out, so everything it shows is tested here without a terminal.

Validation findings (``kubetape validate``'s) arrive as :class:`Mark` s: the command computes them, as
formats do not depend on :mod:`pipeline.validate`; each lands on the rows that applied its object in the
trace second it was found at, as SimKube's ``skctl xray`` marks the events with validation errors."""

from __future__ import annotations

import dataclasses
import difflib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from pipeline.formats.assemble import to_seconds
from pipeline.formats.segment.content import Segment
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey, parse_object_key

AT_START = "at start"
"""The type shown for an object live when the trace starts, not a change: one its keyframe holds, or one
first applied at its first millisecond (how exports and SimKube traces carry the state they start from; a
creation at that very millisecond looks the same)."""
CREATED = "created"
CHANGED = "changed"
DELETED = "deleted"
POD = "pod"
GAP = "gap"

ERROR_MARKER = "✗"
"""The marker of a row whose object has a validation error (it would stop the replay working)."""
WARNING_MARKER = "!"
"""The marker of a row whose object has validation warnings only (they degrade the replay)."""


@dataclass(frozen=True, slots=True)
class Mark:
    """One validation finding on one object, at the trace seconds it was found at (its first event and
    the repeats: validation reports an object's problem once, at its first event)."""

    kind: str
    namespace: str
    """``""`` for a cluster-scoped object, as :attr:`Row.namespace`."""
    name: str
    seconds: tuple[int, ...]
    """Unix seconds of the events it was found in (validation groups a trace's events by second)."""
    code: str
    severity: str
    """``error`` or ``warning``."""
    message: str

    def describe(self) -> str:
        """``KE0010 error: spec.selector is missing …``: one line of the expanded view."""
        return f"{self.code} {self.severity}: {self.message}"


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the events view."""

    ts_ms: int
    type: str
    """:data:`AT_START`, :data:`CREATED`, :data:`CHANGED`, :data:`DELETED`, :data:`POD` or :data:`GAP`."""
    kind: str
    namespace: str
    """``""`` for a cluster-scoped object."""
    name: str
    key: ObjectKey
    owner: ObjectKey | None = None
    """For a pod row, the owner whose pods it counts with."""
    version: int | None = None
    """For a row that recorded a state, its index in the object's :attr:`Browse.versions`."""
    detail: str = ""
    marks: tuple[Mark, ...] = ()
    """The validation findings on the object this row applied, at this row's second."""

    @property
    def marker(self) -> str:
        """:data:`ERROR_MARKER`, :data:`WARNING_MARKER` or ``""`` (no findings)."""
        if not self.marks:
            return ""
        return ERROR_MARKER if any(m.severity == "error" for m in self.marks) else WARNING_MARKER

    @property
    def codes(self) -> str:
        """The findings' codes, each once, in order: ``KE0010 W0000``."""
        return " ".join(dict.fromkeys(m.code for m in self.marks))

    @property
    def namespaced_name(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def matches(self, query: str) -> bool:
        """Whether every word of ``query`` is in this row's kind, namespace/name, type or finding codes
        (any case): ``deploy nginx`` finds the nginx Deployment's rows, ``KE0010`` those with that finding."""
        text = f"{self.kind} {self.namespaced_name} {self.type} {self.codes}".lower()
        return all(word in text for word in query.lower().split())


@dataclass(frozen=True, slots=True)
class Version:
    """One recorded state of an object: what an APPLIED event set, or its last state when DELETED."""

    ts_ms: int
    type: str
    obj: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Browse:
    """Everything the browser shows of one trace."""

    start_ms: int
    rows: tuple[Row, ...]
    versions: dict[ObjectKey, tuple[Version, ...]]
    pods: dict[ObjectKey, tuple[Event, ...]]
    """Pod lifecycles by owner."""

    def filtered(self, query: str) -> list[Row]:
        return [row for row in self.rows if row.matches(query)]

    def owners(self) -> list[ObjectKey]:
        return sorted(self.pods)

    def pod_counts(self, owner: ObjectKey) -> list[tuple[int, int]]:
        return pod_counts(self.pods.get(owner, ()))


def browse(trace: Segment, marks: Iterable[Mark] = ()) -> Browse:
    """The rows, versions and pods of ``trace``, in time order (same-time events in recorded order),
    each row that applied an object carrying that object's ``marks`` found at its second."""
    rows: list[Row] = []
    versions: dict[ObjectKey, list[Version]] = defaultdict(list)
    pods: dict[ObjectKey, list[Event]] = defaultdict(list)
    keyframe = trace.keyframe
    if keyframe is not None:
        for key in sorted(keyframe.objects):
            event = keyframe.objects[key]
            rows.append(_row(trace.header.start_ms, AT_START, key, version=len(versions[key])))
            versions[key].append(Version(trace.header.start_ms, AT_START, event.obj or {}))
    lifecycles = keyframe.lifecycles.values() if keyframe is not None else ()
    for event in sorted([*lifecycles, *trace.events], key=lambda e: e.ts_ms):
        if event.type is EventType.APPLIED:
            kind = _applied_type(versions.get(event.key), event.ts_ms, trace.header.start_ms)
            rows.append(_row(event.ts_ms, kind, event.key, version=len(versions[event.key])))
            versions[event.key].append(Version(event.ts_ms, kind, event.obj or {}))
        elif event.type is EventType.DELETED:
            rows.append(_row(event.ts_ms, DELETED, event.key, version=len(versions[event.key])))
            versions[event.key].append(Version(event.ts_ms, DELETED, event.obj or {}))
        elif event.type is EventType.POD_LIFECYCLE:
            assert event.owner_key is not None  # every lifecycle event names its owner (Event checks it)
            rows.append(_row(event.ts_ms, POD, event.key, owner=event.owner_key, detail=_lifecycle(event)))
            pods[event.owner_key].append(event)
        else:
            rows.append(_row(event.ts_ms, GAP, event.key, detail=event.gap_reason or ""))
    return Browse(
        start_ms=trace.header.start_ms,
        rows=tuple(_marked(rows, marks)),
        versions={key: tuple(vs) for key, vs in versions.items()},
        pods={owner: tuple(events) for owner, events in pods.items()},
    )


def _marked(rows: list[Row], marks: Iterable[Mark]) -> list[Row]:
    by_object: dict[tuple[str, str, str, int], list[Mark]] = defaultdict(list)
    for mark in marks:
        for second in mark.seconds:
            by_object[(mark.kind, mark.namespace, mark.name, second)].append(mark)
    if not by_object:
        return rows
    out = []
    for row in rows:
        # validation looks at applied objects only: a deletion or a pod row carries no findings
        applied = row.version is not None and row.type != DELETED
        found = by_object.get((row.kind, row.namespace, row.name, to_seconds(row.ts_ms))) if applied else None
        out.append(dataclasses.replace(row, marks=tuple(found)) if found else row)
    return out


def _applied_type(before: list[Version] | None, ts_ms: int, start_ms: int) -> str:
    if before and before[-1].type != DELETED:
        return CHANGED
    return AT_START if not before and ts_ms == start_ms else CREATED


def _row(
    ts_ms: int,
    type_: str,
    key: ObjectKey,
    *,
    owner: ObjectKey | None = None,
    version: int | None = None,
    detail: str = "",
) -> Row:
    parts = parse_object_key(key)
    return Row(ts_ms, type_, parts.kind, parts.namespace or "", parts.name, key, owner, version, detail)


def _lifecycle(event: Event) -> str:
    start = format_time(event.pod_start_ms or 0)
    return (
        f"running since {start}"
        if event.pod_end_ms is None
        else f"ran {start} → {format_time(event.pod_end_ms)}"
    )


def pod_counts(lifecycles: Iterable[Event]) -> list[tuple[int, int]]:
    """How many of these pods run over time: ``(time, count)`` at each time the count changes, from the
    first start. A pod's latest lifecycle event counts (a running pod's event is followed by its finish);
    a pod without an end is running at the end of the trace."""
    latest: dict[ObjectKey, Event] = {}
    for event in lifecycles:
        latest[event.key] = event
    deltas: dict[int, int] = defaultdict(int)
    for event in latest.values():
        if event.pod_start_ms is None:
            continue
        deltas[event.pod_start_ms] += 1
        if event.pod_end_ms is not None:
            deltas[event.pod_end_ms] -= 1
    counts: list[tuple[int, int]] = []
    running = 0
    for ts in sorted(deltas):
        running += deltas[ts]
        if not counts or counts[-1][1] != running:
            counts.append((ts, running))
    return counts


def render_object(obj: dict[str, Any]) -> str:
    """An object as YAML, keys sorted so two versions line up."""
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False, allow_unicode=True)


def version_diff(versions: Sequence[Version], index: int) -> str:
    """The unified diff of the YAML of version ``index`` against the one before it (against nothing for
    the first); a note instead of an empty diff when the two are the same."""
    if not 0 <= index < len(versions):
        raise IndexError(f"no version {index}: the object has {len(versions)}")
    new = versions[index]
    old = versions[index - 1] if index > 0 else None
    before = render_object(old.obj).splitlines(keepends=True) if old is not None else []
    after = render_object(new.obj).splitlines(keepends=True)
    diff = "".join(
        difflib.unified_diff(
            before,
            after,
            fromfile=f"{old.type} at {format_time(old.ts_ms)}" if old is not None else "(none)",
            tofile=f"{new.type} at {format_time(new.ts_ms)}",
        )
    )
    return diff or f"no difference: version {index + 1} equals version {index}\n"


def expanded_text(row: Row, start_ms: int) -> str:
    """The expanded view of one event (Space in the events): what, when, and the validation findings on
    its object, one line each (marker, code, severity, message)."""
    lines = [
        f"{row.type} {row.kind} {row.namespaced_name} at {format_time(row.ts_ms)} "
        f"({format_offset(row.ts_ms, start_ms)})" + (f": {row.detail}" if row.detail else "")
    ]
    if row.marks:
        lines.extend(f"  {row.marker} {mark.describe()}" for mark in row.marks)
    elif row.version is not None and row.type != DELETED:
        lines.append("  no validation findings")
    return "\n".join(lines)


def format_time(ts_ms: int) -> str:
    """UTC time to the millisecond: ``2024-02-29 21:18:05.000``."""
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def format_offset(ts_ms: int, start_ms: int) -> str:
    """Seconds since the trace's start: ``+12.5s``."""
    return f"+{(ts_ms - start_ms) / 1000:.1f}s"
