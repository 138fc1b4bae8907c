"""Applying a transform to a whole trace, then recomputing what depends on object contents.

After the objects change, the trace's ``index`` (spec hash of every object) is recomputed, and the
``pod_lifecycles`` are re-keyed: an owner renamed by the transform keeps its lifecycles under its new
name, and a changed pod template keeps them under its new pod-spec hash (SimKube copies both unchanged,
which leaves replayed pods without their recorded lifecycles). Owners the transform drops lose theirs.

:func:`apply_transform` is pure (the input trace is not modified), so the sink's export can call it
before a trace leaves (redaction, name obfuscation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.formats.simkube import SimkubeEvent, SimkubeLifecycle, SimkubeOwner, SimkubeTrace
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.hashing import object_spec_hash, pod_spec_hash
from pipeline.model.keys import GroupVersionKind
from pipeline.model.pointer import resolve
from pipeline.model.sanitize import copy_json
from pipeline.validate.podspec import PodSpecLocator
from pipeline.validate.transform import TraceEdit

Identity = tuple[str, str]
"""(GVK string, ``namespace/name``): how SimKube's index and lifecycles name an object."""


@dataclass(frozen=True, slots=True)
class TransformStats:
    """What a transform did, for ``kubetape transform`` to print."""

    objects_seen: int
    objects_modified: int
    objects_dropped: int
    objects_created: int
    events_dropped: int
    usage_kept: int = 0
    """Usage samples (the recorded load) in the result: a kubetape trace's; a SimKube trace has none."""
    usage_dropped: int = 0
    """Usage samples dropped with the owner they belong to."""


def identity(obj: dict[str, Any]) -> Identity:
    """The index/lifecycle identity of an object."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    gvk = GroupVersionKind.from_api_version(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    ns, name = meta.get("namespace"), str(meta.get("name", ""))
    return gvk.format(), f"{ns}/{name}" if ns else name


class _Tracker:
    """Remembers how each original object was renamed and how its pod-spec hashes changed."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.locator = PodSpecLocator(config)
        self.renames: dict[Identity, Identity | None] = {}
        self.pod_hashes: dict[Identity, dict[int, int]] = {}
        self.seen_ids: set[Identity] = set()
        self.kept_ids: set[Identity] = set()  # left in some event under their own identity
        self.modified = self.dropped = self.seen = 0

    def record(self, old: dict[str, Any], new: dict[str, Any] | None, changed: bool) -> None:
        self.seen += 1
        self.modified += changed and new is not None
        self.dropped += new is None
        try:
            old_id = identity(old)
            new_id = identity(new) if new is not None else None
        except FormatError:
            return
        self.seen_ids.add(old_id)
        if new_id == old_id:
            self.kept_ids.add(old_id)
        elif new_id is not None or old_id not in self.renames:  # a rename wins over a drop elsewhere
            self.renames[old_id] = new_id
        if new is None or not changed:
            return
        for pointer in self.locator.pod_spec_pointers(old):
            before, after = resolve(old, pointer), resolve(new, pointer)
            if before and after and isinstance(before[0], dict) and isinstance(after[0], dict):
                old_hash, new_hash = pod_spec_hash(before[0]), pod_spec_hash(after[0])
                if old_hash != new_hash:
                    self.pod_hashes.setdefault(old_id, {})[old_hash] = new_hash


def apply_transform(trace: SimkubeTrace, transform: TraceEdit) -> tuple[SimkubeTrace, TransformStats]:
    """``trace`` with ``transform`` applied, its index and lifecycle keys recomputed."""
    tracker = _Tracker(trace.config)
    start = trace.events[0].ts if trace.events else 0
    created = []
    for obj in transform.creates:
        new, _changed = transform.edit(copy_json(obj), start, start)
        if new is not None:
            created.append(new)
    if created and not trace.events:
        raise ConfigError(f"{transform.source}: cannot create objects in a trace without events")
    events: list[SimkubeEvent] = []
    events_dropped = 0
    for i, event in enumerate(trace.events):
        applied = list(created) if i == 0 else []
        deleted: list[dict[str, Any]] = []
        for source, target in ((event.applied_objs, applied), (event.deleted_objs, deleted)):
            for obj in source:
                new, changed = transform.edit(obj, event.ts, start)
                tracker.record(obj, new, changed)
                if new is not None:
                    target.append(new)
        was_empty = not event.applied_objs and not event.deleted_objs
        if applied or deleted or was_empty:
            events.append(SimkubeEvent(event.ts, applied, deleted))
        else:
            events_dropped += 1
    renames = _all_renames(trace.index, transform, tracker, start)
    result = SimkubeTrace(
        trace.version,
        copy_json(trace.config),
        events,
        _rebuild_index(trace.index, events, renames),
        _rekey_lifecycles(trace.pod_lifecycles, renames, tracker.pod_hashes),
    )
    stats = TransformStats(tracker.seen, tracker.modified, tracker.dropped, len(created), events_dropped)
    return result, stats


def _all_renames(
    old: dict[str, dict[str, int]], transform: TraceEdit, tracker: _Tracker, start: int
) -> dict[Identity, Identity | None]:
    """Renames seen in events, plus those of objects only the index names (finished before the trace's
    window), found by transforming their stubs (a stub has no labels, so label selectors miss it).
    An object dropped from some events only (a SKEL ``delete`` with a time test) is not dropped."""
    renames = {
        old_id: new_id
        for old_id, new_id in tracker.renames.items()
        if new_id is not None or old_id not in tracker.kept_ids
    }
    for gvk_text, entries in old.items():
        try:
            gvk = GroupVersionKind.parse(gvk_text)
        except FormatError:
            continue
        for name in entries:
            if (gvk_text, name) in tracker.seen_ids:
                continue
            namespace, _slash, short = name.rpartition("/")
            meta = {"name": short, "namespace": namespace} if namespace else {"name": short}
            stub = {"apiVersion": gvk.api_version, "kind": gvk.kind, "metadata": meta}
            new, _changed = transform.edit(stub, start, start)
            new_id = identity(new) if new is not None else None
            if new_id != (gvk_text, name):
                renames[(gvk_text, name)] = new_id
    return renames


def _rebuild_index(
    old: dict[str, dict[str, int]], events: list[SimkubeEvent], renames: dict[Identity, Identity | None]
) -> dict[str, dict[str, int]]:
    index: dict[str, dict[str, int]] = {}
    # Objects not in the events (finished before the window) keep their entries unless renamed/dropped.
    for gvk, entries in old.items():
        for name, spec_hash in entries.items():
            if (gvk, name) not in renames:
                index.setdefault(gvk, {})[name] = spec_hash
    for (gvk, name), target in renames.items():
        if target is not None and name in old.get(gvk, {}):
            index.setdefault(target[0], {})[target[1]] = old[gvk][name]
    for event in events:
        for obj in event.applied_objs:
            try:
                gvk, name = identity(obj)
            except FormatError:
                continue
            index.setdefault(gvk, {})[name] = object_spec_hash(obj)
    return {gvk: entries for gvk, entries in index.items() if entries}


def _rekey_lifecycles(
    old: dict[SimkubeOwner, dict[int, list[SimkubeLifecycle]]],
    renames: dict[Identity, Identity | None],
    pod_hashes: dict[Identity, dict[int, int]],
) -> dict[SimkubeOwner, dict[int, list[SimkubeLifecycle]]]:
    out: dict[SimkubeOwner, dict[int, list[SimkubeLifecycle]]] = {}
    for owner, by_hash in old.items():
        target = renames.get(owner, owner)
        if target is None:
            continue
        hash_map = pod_hashes.get(owner, {})
        # SimKube hashes the running pod (with the apiserver's defaults), so a recorded hash may match
        # no template: when the owner's template changed in exactly one way, its lifecycles follow it.
        only = next(iter(set(hash_map.values()))) if len(set(hash_map.values())) == 1 else None
        for pod_hash, lifecycles in by_hash.items():
            new_hash = hash_map.get(pod_hash, pod_hash if only is None else only)
            merged = out.setdefault(target, {}).setdefault(new_hash, [])
            merged.extend(lifecycles)
    for by_hash in out.values():
        for lifecycles in by_hash.values():
            lifecycles.sort(key=lambda lc: (lc.start is None, lc.start or 0))
    return out
