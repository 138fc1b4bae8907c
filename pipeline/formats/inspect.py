"""``kubetape inspect FILE``: a summary of any trace or segment, with its hashes checked.

:func:`inspect_file` recognizes kubetape segments and traces, SimKube v2 traces (msgpack or JSON) and
SimKube v1 traces, and reports version, time span, counts per kind, objects, lifecycles and a
validation of the stored hashes against recomputed ones (object spec hashes; for bare pods also the
pod-spec hash keying their lifecycles). A file that cannot be read, is truncated or corrupt raises
:class:`~pipeline.model.errors.FormatError` naming the file and the problem; nothing else escapes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.formats.segment.content import Segment
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.header import ENCODINGS, is_segment
from pipeline.formats.simkube import SimkubeTrace, read_simkube_trace, simkube_compatibility_problems
from pipeline.formats.wire.codec import encode_event
from pipeline.model.errors import FormatError
from pipeline.model.events import EventType
from pipeline.model.hashing import object_spec_hash, pod_spec_hash
from pipeline.model.keys import GroupVersionKind, parse_object_key
from pipeline.model.usage import UsageSample


@dataclass(frozen=True, slots=True)
class HashCheck:
    """Stored hashes compared with recomputed ones. ``unchecked``: stored hashes of what the trace does
    not hold (nothing to recompute them from), ``why_unchecked`` says why in a user's words."""

    checked: int = 0
    mismatched: tuple[str, ...] = ()
    unchecked: int = 0
    why_unchecked: str = "have nothing in the trace to compare with"
    explained: int = 0
    """Of ``mismatched``, those an edit after recording explains (a note says which)."""


@dataclass(frozen=True, slots=True)
class InspectReport:
    """What ``kubetape inspect`` prints; :meth:`to_json` for ``--json``, :meth:`render_text` otherwise."""

    path: str
    format: str
    version: int
    size_bytes: int
    start_ms: int | None
    end_ms: int | None
    events: int
    kinds: dict[str, dict[str, int]]
    objects: int
    lifecycle_owners: int
    lifecycles_running: int
    lifecycles_finished: int
    spec_hashes: HashCheck
    lifecycle_hashes: HashCheck
    details: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    """What may make a replay go wrong."""
    usage: dict[str, int] | None = None
    """The recorded load's summary (:func:`usage_summary`), None when the trace holds none."""
    notes: tuple[str, ...] = ()
    """What a reader may wonder about but that changes nothing for a replay (SimKube index hashes of
    objects edited after recording)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (stable keys, times in ms)."""
        return {
            "path": self.path,
            "format": self.format,
            "version": self.version,
            "size_bytes": self.size_bytes,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "span_ms": None if self.start_ms is None or self.end_ms is None else self.end_ms - self.start_ms,
            "events": self.events,
            "kinds": self.kinds,
            "objects": self.objects,
            "lifecycles": {
                "owners": self.lifecycle_owners,
                "running": self.lifecycles_running,
                "finished": self.lifecycles_finished,
            },
            "hashes": {
                "spec": _check_json(self.spec_hashes),
                "lifecycle": _check_json(self.lifecycle_hashes),
            },
            "details": self.details,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            **({} if self.usage is None else {"usage": self.usage}),
        }

    def render_text(self) -> str:
        """A human summary, one fact per line."""
        lines = [
            f"{self.path}: {self.format}, version {self.version}, {self.size_bytes} bytes",
            f"  span:       {format_span(self.start_ms, self.end_ms)}",
            f"  events:     {self.events}",
            f"  objects:    {self.objects}",
        ]
        for kind, counts in sorted(self.kinds.items()):
            lines.append(f"    {kind}: " + ", ".join(f"{n} {what}" for what, n in sorted(counts.items())))
        lines.append(
            f"  lifecycles: {self.lifecycles_running + self.lifecycles_finished} for {self.lifecycle_owners}"
            f" owner(s) ({self.lifecycles_finished} finished, {self.lifecycles_running} running)"
        )
        lines.append(f"  spec hashes:      {_check_text(self.spec_hashes)}")
        lines.append(f"  lifecycle keys:   {_check_text(self.lifecycle_hashes)}")
        if self.usage is not None:
            u = self.usage
            lines.append(
                f"  usage:      {u['samples']} sample(s) of {u['owners']} owner(s) ({u['gaps']} gap(s)) over "
                f"{u['span_ms'] / 1000:g}s, peak total CPU {u['peak_total_cpu_millicores']}m"
            )
        storage = _storage_text(self.details, self.size_bytes)
        lines.extend(f"  {key}: {value}" for key, value in self.details.items() if key not in _STORAGE_KEYS)
        if storage:
            lines.append(f"  stored as: {storage}")
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.extend(f"  warning: {w}" for w in self.warnings)
        return "\n".join(lines)


_STORAGE_KEYS = ("encoding", "event_bytes", "keyframe_bytes", "size_vs_events")
"""Details of how a segment stores its events: in ``--json`` as they are, in the text as one sentence."""
_ENCODING_TEXT = {
    "columns": "format 1, events split into columns",
    "wire rows": "format 2, each event as Kafka carried it",
    "delta": "format 3, each object's versions as changes to the one before",
}


def _storage_text(details: dict[str, Any], size: int) -> str:
    encoding = details.get("encoding")
    if encoding is None:
        return ""
    text = _ENCODING_TEXT.get(encoding, f"an unknown encoding ({encoding})")
    raw = int(details.get("event_bytes", 0)) + int(details.get("keyframe_bytes", 0))
    if raw:
        text += f", compressed to {size / raw:.0%} of the {raw} bytes its events take on Kafka"
    return text


def _check_json(check: HashCheck) -> dict[str, Any]:
    return {"checked": check.checked, "mismatched": list(check.mismatched), "unchecked": check.unchecked}


def _check_text(check: HashCheck) -> str:
    parts = []
    bad = len(check.mismatched)
    if check.checked and not bad:
        parts.append(f"{check.checked} checked, all match")
    elif check.checked:
        parts.append(f"{check.checked} checked, {check.checked - bad} match")
        if check.explained:
            parts[-1] += f", {check.explained} are of the object before an edit (see the note)"
        if bad > check.explained:
            shown = ", ".join(check.mismatched[:3]) + (" …" if bad > 3 else "")
            parts[-1] += f", {bad - check.explained} differ ({shown})"
    if check.unchecked:
        parts.append(f"{check.unchecked} not checked: they {check.why_unchecked}")
    return "; ".join(parts) or "none stored"


def format_span(start_ms: int | None, end_ms: int | None) -> str:
    if start_ms is None or end_ms is None:
        return "empty"

    def iso(ms: int) -> str:
        try:
            moment = datetime.fromtimestamp(ms / 1000, UTC)
        except (ValueError, OverflowError, OSError):  # beyond the calendar: say so, do not crash
            return f"{ms} ms (not a calendar date)"
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    return f"{iso(start_ms)} → {iso(end_ms)} ({(end_ms - start_ms) / 1000:.3f} s)"


def inspect_file(path: Path) -> InspectReport:
    """Summarize the trace or segment at ``path``; raises FormatError naming the file if it is unreadable."""
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise FormatError(
            f"{path}: is a directory, not a trace or segment file; for a segment store, "
            f"`kubetape describe {path}` shows its recording (`kubetape list {path}` one line per cluster)"
        ) from None
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return inspect_bytes(data, str(path))


def inspect_bytes(data: bytes, where: str) -> InspectReport:
    """Summarize a trace or segment already read from ``where`` (a path or URL, for messages)."""
    if not data:
        raise FormatError(f"{where}: empty file, not a trace or segment")
    try:
        if is_segment(data):
            return _inspect_segment(where, data, decode_segment(data, where))
        return _inspect_simkube(where, data, read_simkube_trace(data, where))
    except FormatError:
        raise
    except Exception as exc:  # the promise is "never a traceback": any surprise becomes a named error
        raise FormatError(f"{where}: cannot be inspected ({type(exc).__name__}: {exc})") from None


def _inspect_segment(where: str, data: bytes, seg: Segment) -> InspectReport:
    h = seg.header
    kinds: dict[str, Counter[str]] = {}
    objects = set()
    owners = set()
    running = finished = 0
    checked, unchecked, mismatched = 0, 0, []
    for e in seg.events:
        if e.type in (EventType.APPLIED, EventType.DELETED):
            assert e.obj is not None
            gvk = _gvk_text(e.obj, e.key)
            kinds.setdefault(gvk, Counter())[e.type.value] += 1
            objects.add(e.key)
            if e.type is EventType.APPLIED:
                checked += 1
                if e.spec_hash != object_spec_hash(e.obj):
                    mismatched.append(e.key)
        elif e.type is EventType.POD_LIFECYCLE:
            owners.add(e.owner_key)
            finished += e.pod_end_ms is not None
            running += e.pod_end_ms is None
        else:
            kinds.setdefault("(gap markers)", Counter())["gap"] += 1
    details: dict[str, Any] = {"kind": h.kind.value}
    if h.source is not None:  # the topic's identity, and the cluster of a fleet (``#cluster=<id>``)
        details["source"] = h.source
    if h.partitions:
        details["partitions"] = ", ".join(
            f"{p.topic}[{p.partition}] {p.first_offset}..{p.last_offset}" for p in h.partitions
        )
    if seg.keyframe is not None:
        details["keyframe"] = (
            f"at {h.keyframe_at_ms} ms, {h.keyframe_objects} objects, {h.keyframe_lifecycles} lifecycles"
        )
    details["encoding"] = ENCODINGS.get(h.format_version, "unknown")
    event_bytes = (
        h.event_bytes if h.event_bytes is not None else sum(len(encode_event(e)) for e in seg.events)
    )
    kf = seg.keyframe
    keyframe_bytes = (
        h.keyframe_bytes
        if h.keyframe_bytes is not None
        else 0
        if kf is None
        else sum(
            len(encode_event(e)) for part in (kf.objects, kf.lifecycles, kf.tombstones) for e in part.values()
        )
    )
    details["event_bytes"] = event_bytes
    details["keyframe_bytes"] = keyframe_bytes
    if event_bytes + keyframe_bytes:
        # what the file costs per byte of the events it holds (their wire bytes, as consumed)
        details["size_vs_events"] = round(len(data) / (event_bytes + keyframe_bytes), 4)
    if seg.config is not None:
        details["tracked"] = ", ".join(t.gvk.format() for t in seg.config.tracked)
    warnings = [f"{h.counts.gap} gap marker(s): changes were recovered by re-list"] if h.counts.gap else []
    if mismatched:
        warnings.append(
            f"{len(mismatched)} applied object(s) carry a spec hash that does not match the object"
        )
    return InspectReport(
        path=where,
        format=f"kubetape {h.kind.value}",
        version=h.format_version,
        size_bytes=len(data),
        start_ms=h.start_ms,
        end_ms=h.end_ms,
        events=h.counts.total,
        kinds={k: dict(v) for k, v in kinds.items()},
        objects=len(objects),
        lifecycle_owners=len(owners),
        lifecycles_running=running,
        lifecycles_finished=finished,
        spec_hashes=HashCheck(checked, tuple(mismatched), unchecked),
        lifecycle_hashes=HashCheck(
            unchecked=h.counts.pod_lifecycle,
            why_unchecked="belong to pods the trace does not hold, only their owners",
        ),
        details=details,
        warnings=tuple(warnings),
        usage=usage_summary(seg.usage) if seg.usage else None,
    )


def usage_summary(samples: tuple[UsageSample, ...]) -> dict[str, int]:
    """Owners, samples, gaps, the span from the first sample to the last, and the peak of all owners'
    CPU together (each owner and hash counted at its latest sample; a gap counts as nothing known)."""
    latest: dict[tuple[str, str], int] = {}
    peak = 0
    for i, sample in enumerate(samples):  # sorted by time (a segment's order)
        latest[(sample.owner_key, sample.template_hash)] = 0 if sample.gap else sample.cpu_millicores
        if i + 1 == len(samples) or samples[i + 1].ts_ms != sample.ts_ms:  # the moment is complete
            peak = max(peak, sum(latest.values()))
    return {
        "owners": len({s.owner_key for s in samples}),
        "samples": len(samples),
        "gaps": sum(s.gap for s in samples),
        "span_ms": samples[-1].ts_ms - samples[0].ts_ms if samples else 0,
        "peak_total_cpu_millicores": peak,
    }


def _gvk_text(obj: dict[str, Any], key: str) -> str:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if isinstance(api_version, str) and isinstance(kind, str):
        return GroupVersionKind.from_api_version(api_version, kind).format()
    parsed = parse_object_key(key)
    return f"{parsed.group or 'core'}/{parsed.kind}"


def _namespaced(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def _inspect_simkube(where: str, data: bytes, trace: SimkubeTrace) -> InspectReport:
    kinds: dict[str, Counter[str]] = {}
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    objects = set()
    for event in trace.events:
        for what, objs in (("applied", event.applied_objs), ("deleted", event.deleted_objs)):
            for obj in objs:
                gvk = GroupVersionKind.from_api_version(obj["apiVersion"], obj["kind"]).format()
                kinds.setdefault(gvk, Counter())[what] += 1
                objects.add((gvk, _namespaced(obj)))
                if what == "applied":
                    latest[(gvk, _namespaced(obj))] = obj
    entries = sum(len(v) for v in trace.index.values())
    if trace.read_from_version == 3:  # v3 stores no spec hashes (the reader recomputes them)
        spec_check = HashCheck(0, (), entries, "are not stored in version 3 (recomputed on reading)")
        edited: dict[str, str] = {}
    else:
        spec_check, edited = _check_index(trace, latest)
    lifecycle_check = _check_lifecycle_keys(trace, latest)
    all_lcs = [lc for by_hash in trace.pod_lifecycles.values() for lcs in by_hash.values() for lc in lcs]
    warnings = list(simkube_compatibility_problems(trace))
    notes = _index_notes(spec_check, edited)
    if lifecycle_check.mismatched:
        warnings.append(
            f"{len(lifecycle_check.mismatched)} lifecycle key(s) are not the hash of their pod's spec: "
            "a replay finds no recorded lifetime for those pods"
        )
    start = trace.events[0].ts * 1000 if trace.events else None
    end = trace.events[-1].ts * 1000 if trace.events else None
    is_json = data.lstrip()[:1] == b"{"
    fmt = "SimKube trace" + (" (JSON)" if is_json else "")
    if trace.read_from_version != trace.version:
        fmt += f" (version {trace.read_from_version}, upgraded on reading)"
    return InspectReport(
        path=where,
        format=fmt,
        version=trace.read_from_version,
        size_bytes=len(data),
        start_ms=start,
        end_ms=end,
        events=len(trace.events),
        kinds={k: dict(v) for k, v in kinds.items()},
        objects=len(objects),
        lifecycle_owners=len(trace.pod_lifecycles),
        lifecycles_running=sum(1 for lc in all_lcs if lc.start is not None and lc.end is None),
        lifecycles_finished=sum(1 for lc in all_lcs if lc.end is not None),
        spec_hashes=spec_check,
        lifecycle_hashes=lifecycle_check,
        details={
            "tracked": ", ".join(trace.config.get("trackedObjects", {})),
            ("tracked objects" if trace.read_from_version == 3 else "index entries"): entries,
        },
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def _check_index(
    trace: SimkubeTrace, latest: dict[tuple[str, str], dict[str, Any]]
) -> tuple[HashCheck, dict[str, str]]:
    """The index's hashes against SimKube's hash of each object's latest spec, and of the mismatches
    those an edit after recording explains (:func:`_edit_before_hash`), with the edit."""
    checked, unchecked, mismatched = 0, 0, []
    edited: dict[str, str] = {}
    for gvk, names in trace.index.items():
        for name, stored in names.items():
            obj = latest.get((gvk, name))
            if obj is None:
                unchecked += 1  # the object is not in the events (applied before the window, or deleted)
                continue
            checked += 1
            if object_spec_hash(obj) != stored:
                mismatched.append(f"{gvk} {name}")
                edit = _edit_before_hash(obj, stored)
                if edit is not None:
                    edited[f"{gvk} {name}"] = edit
    why = "name objects the events do not show (deleted, or applied before the trace)"
    return HashCheck(checked, tuple(mismatched), unchecked, why, len(edited)), edited


_SANITISED_FIELDS = ("serviceAccount", "serviceAccountName")
"""Pod spec fields SimKube's sanitising (``examples/sanitize.skel``) removes after recording, which its
tracer hashed with the ``default`` service account the API server fills in."""


def _edit_before_hash(obj: dict[str, Any], stored: int) -> str | None:
    """The edit that explains why ``stored`` is not SimKube's hash of the object's spec, if it is one
    kubetape knows: SimKube hashed the spec as recorded, then its service account fields were removed
    (SimKube's own ``bare-pods`` example is such a trace). None when no known edit explains it."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    template = spec.get("template")
    for where, pod_spec in (("spec", spec), ("spec.template.spec", (template or {}).get("spec"))):
        if not isinstance(pod_spec, dict) or any(f in pod_spec for f in _SANITISED_FIELDS):
            continue
        pod_spec.update(dict.fromkeys(_SANITISED_FIELDS, "default"))
        try:
            if object_spec_hash(obj) == stored:
                return f"{where}.serviceAccount and {where}.serviceAccountName were removed"
        finally:
            for f in _SANITISED_FIELDS:
                del pod_spec[f]
    return None


def _index_notes(check: HashCheck, edited: dict[str, str]) -> list[str]:
    """Mismatched index hashes, in words: SimKube keeps them to notice changes while it records; a
    replay (SimKube's or kubetape's) reads the objects and never these hashes, so they are notes, not
    warnings. ``kubetape transform`` rewrites the index when it edits a trace."""
    notes = []
    by_edit: dict[str, int] = {}
    for edit in edited.values():
        by_edit[edit] = by_edit.get(edit, 0) + 1
    for edit, count in sorted(by_edit.items()):
        notes.append(
            f"{count} index hash(es) are SimKube's hash of the object as recorded, before {edit} "
            "(edited after recording, as a sanitiser does); replays use the objects, not "
            "these hashes"
        )
    unexplained = len(check.mismatched) - len(edited)
    if unexplained:
        notes.append(
            f"{unexplained} index hash(es) are not SimKube's hash of their object's spec: the object was "
            "edited after it was hashed; replays use the objects, not these hashes"
        )
    return notes


def _check_lifecycle_keys(trace: SimkubeTrace, latest: dict[tuple[str, str], dict[str, Any]]) -> HashCheck:
    """A bare pod is its own lifecycle owner, so its lifecycle key must be its own pod-spec hash. Other
    owners' pods are not in the trace (only their templates), so their keys cannot be recomputed."""
    checked, unchecked, mismatched = 0, 0, []
    for (gvk, name), by_hash in trace.pod_lifecycles.items():
        pod = latest.get((gvk, name)) if gvk in ("v1.Pod", "/v1.Pod") else None
        spec = pod.get("spec") if pod is not None else None
        for pod_hash in by_hash:
            if not isinstance(spec, dict):
                unchecked += 1
                continue
            checked += 1
            if pod_spec_hash(spec) != pod_hash:
                mismatched.append(f"{gvk} {name}")
    why = "belong to owners whose pods the trace does not hold, only their pod template"
    return HashCheck(checked, tuple(mismatched), unchecked, why)
