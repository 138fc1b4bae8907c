"""What ``kubetape xray`` shows, computed from a trace: the events over time, an object's versions and the
diff between two, and an owner's pods over time.

Pure logic over a :class:`~pipeline.formats.segment.content.Segment` (a kubetape trace or segment, or a
SimKube trace read through :func:`pipeline.formats.trace.read_trace`); the terminal app in
``services/xray_app.py`` only lays these out, so everything it shows is tested here without a terminal."""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

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

    @property
    def namespaced_name(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def matches(self, query: str) -> bool:
        """Whether every word of ``query`` is in this row's kind, namespace/name or type (any case):
        ``deploy nginx`` finds the nginx Deployment's rows."""
        text = f"{self.kind} {self.namespaced_name} {self.type}".lower()
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


def browse(trace: Segment) -> Browse:
    """The rows, versions and pods of ``trace``, in time order (same-time events in recorded order)."""
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
        rows=tuple(rows),
        versions={key: tuple(vs) for key, vs in versions.items()},
        pods={owner: tuple(events) for owner, events in pods.items()},
    )


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


def format_time(ts_ms: int) -> str:
    """UTC time to the millisecond: ``2024-02-29 21:18:05.000``."""
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def format_offset(ts_ms: int, start_ms: int) -> str:
    """Seconds since the trace's start: ``+12.5s``."""
    return f"+{(ts_ms - start_ms) / 1000:.1f}s"
