"""Column layout of a list of events inside a segment body (compresses better and decodes faster than
one list per event).

Fields are stored column by column; times as deltas (event time from the previous event, pod start
from the event time, pod end from the pod start), so they are small numbers that zstd packs well::

    {n, type: bytes (1 applied, 2 deleted, 3 pod lifecycle, 4 gap), ts: [Δ], key, uid, rv, hash: [u64],
     obj: [object of each applied/deleted event], owner, pod_hash, start: [Δ], end: [Δ | None]
     (one per lifecycle event), gap: [[from_rv, to_rv, reason]] (one per gap event)}

:func:`events_from_columns` validates shapes and builds validated :class:`~pipeline.model.events.Event`
values; anything malformed raises :class:`~pipeline.model.errors.FormatError` naming the event index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType, decoded_event

_CODE = {EventType.APPLIED: 1, EventType.DELETED: 2, EventType.POD_LIFECYCLE: 3, EventType.GAP: 4}
_TYPE = {code: t for t, code in _CODE.items()}
_PER_EVENT = ("ts", "key", "uid", "rv", "hash")


def events_to_columns(events: Sequence[Event], base_ms: int) -> dict[str, Any]:
    """The column form of ``events``; times are relative to ``base_ms``."""
    ts_deltas, objs, owners, pod_hashes, starts, ends, gaps = [], [], [], [], [], [], []
    previous = base_ms
    for e in events:
        ts_deltas.append(e.ts_ms - previous)
        previous = e.ts_ms
        if e.obj is not None:
            objs.append(e.obj)
        elif e.type is EventType.POD_LIFECYCLE:
            assert e.pod_start_ms is not None  # guaranteed by Event validation
            owners.append(e.owner_key)
            pod_hashes.append(e.pod_spec_hash)
            starts.append(e.pod_start_ms - e.ts_ms)
            ends.append(None if e.pod_end_ms is None else e.pod_end_ms - e.pod_start_ms)
        else:
            gaps.append([e.gap_from_rv, e.gap_to_rv, e.gap_reason])
    return {
        "n": len(events),
        "type": bytes(_CODE[e.type] for e in events),
        "ts": ts_deltas,
        "key": [e.key for e in events],
        "uid": [e.uid for e in events],
        "rv": [e.resource_version for e in events],
        "hash": [e.spec_hash for e in events],
        "obj": objs,
        "owner": owners,
        "pod_hash": pod_hashes,
        "start": starts,
        "end": ends,
        "gap": gaps,
    }


def _shape_problem(cols: Any) -> str | None:
    if not isinstance(cols, dict):
        return "event columns are not a map"
    n = cols.get("n")
    if type(n) is not int or not isinstance(cols.get("type"), bytes) or len(cols["type"]) != n:
        return "event count or type column is malformed"
    for name in (*_PER_EVENT, "obj", "owner", "pod_hash", "start", "end", "gap"):
        if not isinstance(cols.get(name), list):
            return f"column {name!r} is missing"
    for name in _PER_EVENT:
        if len(cols[name]) != n:
            return f"column {name!r} has {len(cols[name])} entries for {n} events"
    types = cols["type"]
    objects = types.count(1) + types.count(2)
    lifecycles, gaps = types.count(3), types.count(4)
    if objects + lifecycles + gaps != n:
        return "unknown event type code in the type column"
    if len(cols["obj"]) != objects:
        return f"{len(cols['obj'])} objects for {objects} applied/deleted events"
    if (
        not len(cols["owner"])
        == len(cols["pod_hash"])
        == len(cols["start"])
        == len(cols["end"])
        == lifecycles
    ):
        return "lifecycle columns do not match the lifecycle events"
    if len(cols["gap"]) != gaps:
        return "gap column does not match the gap events"
    return None


def events_from_columns(cols: Any, base_ms: int, what: str) -> list[Event]:
    """Rebuild the events of :func:`events_to_columns`; ``what`` (e.g. ``"seg.kts: event"``) names them."""
    problem = _shape_problem(cols)
    if problem:
        raise FormatError(f"{what}s: {problem}")
    objs, owners, pod_hashes = iter(cols["obj"]), iter(cols["owner"]), iter(cols["pod_hash"])
    starts, ends, gaps = iter(cols["start"]), iter(cols["end"]), iter(cols["gap"])
    out: list[Event] = []
    ts = base_ms
    try:
        for code, delta, key, uid, rv, spec_hash in zip(
            cols["type"], cols["ts"], cols["key"], cols["uid"], cols["rv"], cols["hash"], strict=True
        ):
            ts += delta
            if code <= 2:
                out.append(decoded_event(_TYPE[code], ts, key, uid, rv, next(objs), spec_hash))
            elif code == 3:
                start = ts + next(starts)
                end_delta = next(ends)
                end = None if end_delta is None else start + end_delta
                out.append(
                    decoded_event(
                        EventType.POD_LIFECYCLE,
                        ts,
                        key,
                        uid,
                        rv,
                        None,
                        spec_hash,
                        next(owners),
                        next(pod_hashes),
                        start,
                        end,
                    )
                )
            else:
                from_rv, to_rv, reason = next(gaps)
                out.append(
                    decoded_event(
                        EventType.GAP,
                        ts,
                        key,
                        uid,
                        rv,
                        None,
                        spec_hash,
                        gap_from_rv=from_rv,
                        gap_to_rv=to_rv,
                        gap_reason=reason,
                    )
                )
    except FormatError as exc:  # the failing event is the one after those already built
        raise FormatError(f"{what} #{len(out)}: {exc}") from None
    except (TypeError, ValueError) as exc:  # a delta or gap entry of the wrong shape
        raise FormatError(f"{what} #{len(out)}: malformed field ({exc})") from None
    return out
