"""Applying a transform to a kubetape trace or segment (:class:`~pipeline.formats.segment.content.Segment`).

Same semantics as :func:`pipeline.validate.apply.apply_transform` for SimKube traces: object events
(and keyframe objects) are transformed; keys and spec hashes are recomputed; pod-lifecycle events follow
their pod and owner when the transform renames or drops them (names only known from a key are
transformed as stubs: apiVersion, kind, metadata name/namespace) and their pod-spec hash follows the
owner's changed template. Created objects are applied at the segment start.

The recorded load (the segment's usage samples) follows its owner as the lifecycles do: a sample is kept,
renamed with its owner, and dropped only with it (the load of an owner the replay no longer has would
drive nothing). Its template hash stays: a replay sums an owner's load over every template
(:mod:`pipeline.replay.hpa.load`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pipeline.formats.segment.content import Keyframe, Segment, build_segment
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.hashing import object_spec_hash, pod_spec_hash
from pipeline.model.keys import ObjectKey, key_of, parse_object_key
from pipeline.model.pointer import resolve
from pipeline.model.sanitize import copy_json
from pipeline.model.usage import UsageSample
from pipeline.validate.apply import TransformStats
from pipeline.validate.podspec import PodSpecLocator
from pipeline.validate.transform import TraceEdit


class _SegmentRewriter:
    def __init__(self, segment: Segment, transform: TraceEdit) -> None:
        self.segment, self.transform = segment, transform
        self.start_s = segment.header.start_ms // 1000  # SKEL's @t compares Unix seconds, as SimKube's
        self.kept: set[ObjectKey] = set()  # keys left in some event (a time-bound delete keeps the rest)
        config = segment.config.to_simkube_mapping() if segment.config is not None else {}
        self.locator = PodSpecLocator(config)
        self.renames: dict[ObjectKey, ObjectKey | None] = {}
        self.pod_hashes: dict[ObjectKey, dict[int, int]] = {}
        self.api_versions: dict[ObjectKey, str] = {}
        self.seen = self.modified = self.dropped = 0

    def new_key(self, obj: dict[str, Any]) -> ObjectKey:
        try:
            return key_of(obj)
        except FormatError as exc:
            raise ConfigError(
                f"{self.transform.source}: the transform leaves an invalid object: {exc}"
            ) from None

    def object_event(self, e: Event) -> Event | None:
        assert e.obj is not None  # APPLIED and DELETED events always carry an object
        self.api_versions.setdefault(e.key, str(e.obj.get("apiVersion", "")))
        new, changed = self.transform.edit(e.obj, e.ts_ms // 1000, self.start_s)
        self.seen += 1
        if new is None:
            self.dropped += 1
            self.renames.setdefault(e.key, None)
            return None
        if not changed:
            self.kept.add(e.key)
            return e
        self.modified += 1
        key = self.new_key(new)
        if key != e.key:
            self.renames[e.key] = key
        else:
            self.kept.add(e.key)
        for pointer in self.locator.pod_spec_pointers(e.obj):
            before, after = resolve(e.obj, pointer), resolve(new, pointer)
            if before and after and isinstance(before[0], dict) and isinstance(after[0], dict):
                old_hash, new_hash = pod_spec_hash(before[0]), pod_spec_hash(after[0])
                if old_hash != new_hash:
                    self.pod_hashes.setdefault(e.key, {})[old_hash] = new_hash
        spec_hash = object_spec_hash(new) if e.type is EventType.APPLIED else e.spec_hash
        return dataclasses.replace(e, key=key, obj=new, spec_hash=spec_hash)

    def renamed(self, key: ObjectKey) -> ObjectKey | None:
        """The key after the transform; objects only known by key are transformed as stubs."""
        if key in self.renames and (self.renames[key] is not None or key not in self.kept):
            return self.renames[key]
        if key in self.kept:
            return key
        parsed = parse_object_key(key)
        api_version = self.api_versions.get(key) or self._api_version(parsed.group, parsed.kind)
        meta = {"name": parsed.name, **({"namespace": parsed.namespace} if parsed.namespace else {})}
        stub = {"apiVersion": api_version, "kind": parsed.kind, "metadata": meta}
        new, _changed = self.transform.edit(stub, self.start_s, self.start_s)
        self.renames[key] = None if new is None else self.new_key(new)
        return self.renames[key]

    def _api_version(self, group: str, kind: str) -> str:
        config = self.segment.config
        version = (config.version_of(group, kind) if config is not None else None) or "v1"
        return f"{group}/{version}" if group else version

    def usage_sample(self, sample: UsageSample) -> UsageSample | None:
        """``sample`` under its owner's new key; None when the transform dropped the owner."""
        owner = self.renamed(sample.owner_key)
        if owner is None:
            return None
        return sample if owner == sample.owner_key else dataclasses.replace(sample, owner_key=owner)

    def lifecycle_event(self, e: Event) -> Event | None:
        assert e.owner_key is not None  # POD_LIFECYCLE events always name their owner
        pod, owner = self.renamed(e.key), self.renamed(e.owner_key)
        if pod is None or owner is None:
            return None
        hash_map = self.pod_hashes.get(e.owner_key, {})
        targets = set(hash_map.values())
        fallback = next(iter(targets)) if len(targets) == 1 else e.pod_spec_hash
        pod_hash = hash_map.get(e.pod_spec_hash, fallback)
        if (pod, owner, pod_hash) == (e.key, e.owner_key, e.pod_spec_hash):
            return e
        return dataclasses.replace(e, key=pod, owner_key=owner, pod_spec_hash=pod_hash)


def apply_transform_to_segment(segment: Segment, transform: TraceEdit) -> tuple[Segment, TransformStats]:
    """``segment`` with ``transform`` applied (a new segment; the input is not modified)."""
    rw = _SegmentRewriter(segment, transform)
    start = segment.header.start_ms
    created = []
    for obj in transform.creates:
        new, _changed = transform.edit(copy_json(obj), rw.start_s, rw.start_s)
        if new is not None:
            created.append(Event.applied(start, rw.new_key(new), new, object_spec_hash(new)))
    if created and segment.header.end_ms <= start:
        raise ConfigError(f"{transform.source}: cannot create objects in an empty time range")
    keyframe = segment.keyframe
    kf_objects = {}
    for e in keyframe.objects.values() if keyframe else ():
        new_e = rw.object_event(e)
        if new_e is not None:
            kf_objects[new_e.key] = new_e
    events: list[Event] = list(created)
    lifecycles: list[Event] = []
    for e in segment.events:
        if e.type in (EventType.APPLIED, EventType.DELETED):
            new_e = rw.object_event(e)
            if new_e is not None:
                events.append(new_e)
        elif e.type is EventType.POD_LIFECYCLE:
            lifecycles.append(e)
        else:
            events.append(e)
    # Lifecycles last: they need every owner's renames and template hash changes.
    events.extend(lc for e in lifecycles if (lc := rw.lifecycle_event(e)) is not None)
    # After every object event too: a sample needs its owner's rename.
    usage = [kept for sample in segment.usage if (kept := rw.usage_sample(sample)) is not None]
    new_keyframe = None
    if keyframe is not None:
        kf_lifecycles = {lc.key: lc for e in keyframe.lifecycles.values() if (lc := rw.lifecycle_event(e))}
        new_keyframe = Keyframe(keyframe.at_ms, kf_objects, kf_lifecycles)
    result = build_segment(
        events,
        start_ms=start,
        end_ms=segment.header.end_ms,
        partitions=segment.header.partitions,
        keyframe=new_keyframe,
        config=segment.config,
        kind=segment.header.kind,
        usage=usage,
    )
    stats = TransformStats(
        rw.seen, rw.modified, rw.dropped, len(created), 0, len(usage), len(segment.usage) - len(usage)
    )
    return result, stats
