"""Turning observed objects into the events worth publishing (SimKube's tracer semantics, in ms).

The :class:`Shaper` holds what was already published — the latest sanitized object per key (mirrors
``kubetape.state``) and the latest lifecycle per pod (mirrors the ``lifecycle/`` records of
``kubetape.watch-resume``) — and compares every observation against it:

* tracked objects: an ``APPLIED`` event when an object appears or its spec hash changes; a ``DELETED``
  event (SimKube's stub) when it goes away or stops passing the filters. Status-, label- and
  annotation-only changes are not republished (SimKube records spec changes only). Observations older
  than what was published (same key, lower resourceVersion, as when a restarted watcher replays a
  watch from its last resume point) are ignored, so a restart does not duplicate changes.
* pods: the lifecycle from container statuses, published whenever it strictly advances (SimKube's
  partial order), keyed by the first tracked owner with ``trackLifecycle`` on the pod's owner chain and
  by the pod-spec hash. A pod with no such owner (its owner is not tracked: a custom controller's pods)
  that is itself published as an object (Pods tracked with ``trackLifecycle``, without ``skipOwned``) is
  its own owner, as a bare pod is: it replays as a bare pod with its recorded lifetime. A pod deleted
  before it finished is finished at deletion time, as SimKube does.
  The owner may not be published yet (the pod stream's list or watch ran ahead of the owner kind's
  stream): the pod then waits for it, with what was observed of its lifecycle, and that lifecycle is
  published together with the owner — also when the pod was deleted meanwhile (it is finished at its
  deletion time). Which stream comes first never decides whether lifecycles are recorded.

Event time is when the watcher observed the change, unless the watcher saw it late and the object
carries better evidence: the rules are :mod:`.event_time`'s. What is kept per live pod is
:mod:`.pod_track`'s :class:`~.pod_track.PodTrack`.

Each method returns a :class:`Shaped`: the events and every record (events, state, resume) to publish as
one unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.formats.wire.codec import decode_event, encode_event
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.settings import EVENTS_TOPIC, RESUME_TOPIC, STATE_TOPIC
from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.hashing import object_spec_hash, pod_spec_hash
from pipeline.model.keys import GroupVersionKind, ObjectKey, key_of, parse_object_key
from pipeline.model.lifecycle import PodLifecycle, derive_lifecycle, finish_on_delete
from pipeline.model.sanitize import deletion_stub, sanitize
from pipeline.model.tracer_config import TracerConfig
from pipeline.watch import pod_track  # two of its steps are called through it: see its docstring
from pipeline.watch.event_time import TIME_SOURCE_ANNOTATION, change_evidence, event_time
from pipeline.watch.owners import Owner, OwnerResolver
from pipeline.watch.pod_track import PodTrack, _keep_first_start
from pipeline.watch.ports import Cluster

POD_GVK = GroupVersionKind("", "v1", "Pod")
LIFECYCLE_PREFIX = "lifecycle/"
"""Resume-topic key prefix of a pod's last published lifecycle (value: the encoded event)."""


@dataclass(slots=True)
class Published:
    """What ``kubetape.state`` holds for one key."""

    uid: str
    resource_version: str
    spec_hash: int
    obj: dict[str, Any]
    ts_ms: int = 0  # the event time of the last event published for the key
    # the object's own evidence of its last change when the watcher last saw it (None once restored):
    # evidence that has not moved since is not of a later change (see observe_object)
    evidence: tuple[int, str] | None = None


@dataclass(slots=True)
class Shaped:
    """The outcome of one observation: events (for metrics and logs) and the records to publish."""

    events: list[Event] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)

    def extend(self, other: Shaped) -> None:
        self.events += other.events
        self.records += other.records


def rv_older(candidate: str, published: str) -> bool:
    """Whether ``candidate`` precedes ``published``. resourceVersions are opaque, but every API server
    backed by etcd uses its revision; when either is not a plain integer nothing is considered older."""
    if candidate.isdigit() and published.isdigit():
        return int(candidate) < int(published)
    return False


def _evidence_of_this_change(
    evidence: tuple[int, str] | None, prev: Published | None
) -> tuple[int, str] | None:
    """The evidence, unless the watcher already saw it on the previous version: then it was written
    before that version and says nothing of this change. Without this, an update seen in time, long
    after an object first seen at its creation (an HPA scaling a Deployment whose latest evidence is its
    creation), was dated back to that first event. After a restart the previous version's evidence is
    not known, and the rules of :func:`event_time` alone apply."""
    if prev is None or evidence is None or evidence != prev.evidence:
        return evidence
    return None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise FormatError(f"object without metadata: kind={obj.get('kind')!r}")
    return meta


MAX_GONE_WAITING = 10_000
"""Deleted pods kept while their owner is not published yet; beyond this the oldest are dropped."""


def _decoded(records: Iterable[tuple[str, bytes]], topic: str) -> Iterator[Event | None]:
    """Each record of ``topic`` decoded, None for one that does not decode: a restart counts and skips
    those rather than refuse to start."""
    for key, value in records:
        try:
            yield decode_event(value, f"{topic} key {key}")
        except FormatError:
            yield None


class Shaper:
    """The watcher's de-duplicating memory; see the module docstring."""

    def __init__(self, config: TracerConfig, cluster: Cluster) -> None:
        self.config = config
        self.index: dict[ObjectKey, Published] = {}
        self.pods: dict[ObjectKey, PodTrack] = {}
        self.owners = OwnerResolver(cluster, self._known_obj, config.is_object_allowed)
        self.waiting: dict[ObjectKey, set[ObjectKey]] = {}  # owner key → pods waiting for it
        self.gone_waiting: dict[ObjectKey, PodTrack] = {}  # pods deleted while waiting (oldest first)

    def _known_obj(self, key: ObjectKey) -> Mapping[str, Any] | None:
        entry = self.index.get(key)
        return entry.obj if entry is not None else None

    # ---- restart ---------------------------------------------------------------------------------
    def restore(self, state: Mapping[str, bytes], resume: Mapping[str, bytes]) -> int:
        """Load what earlier runs published; returns how many undecodable records were skipped."""
        skipped = 0
        for event in _decoded(state.items(), STATE_TOPIC):
            if event is None:
                skipped += 1
            elif event.type is EventType.APPLIED and event.obj is not None:
                self.index[event.key] = Published(
                    event.uid, event.resource_version, event.spec_hash, event.obj, event.ts_ms
                )
        lifecycles = ((key, value) for key, value in resume.items() if key.startswith(LIFECYCLE_PREFIX))
        for event in _decoded(lifecycles, RESUME_TOPIC):
            if event is None:
                skipped += 1
            elif event.type is EventType.POD_LIFECYCLE and event.pod_start_ms is not None:
                self.pods[event.key] = PodTrack(
                    event.uid,
                    None,
                    event.owner_key,
                    event.pod_spec_hash,
                    PodLifecycle(event.pod_start_ms, event.pod_end_ms),
                )
        return skipped

    # ---- tracked objects -------------------------------------------------------------------------
    def observe_object(self, event_type: str, obj: dict[str, Any], ts_ms: int) -> Shaped:
        """An ADDED/MODIFIED/DELETED observation of a tracked-kind object."""
        meta = _meta(obj)
        key = key_of(obj)
        uid, rv = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
        prev = self.index.get(key)
        if prev is not None and rv and rv_older(rv, prev.resource_version):
            return Shaped()  # replayed from an older resume point: already published
        if event_type == "DELETED" or not self.config.is_object_allowed(obj):
            if prev is None or (uid and prev.uid and uid != prev.uid):
                return Shaped()
            evidence = change_evidence(obj, deleted=True) if event_type == "DELETED" else None
            return self._delete(key, prev, ts_ms, rv, evidence)
        clean = sanitize(obj, self.config)
        spec_hash = object_spec_hash(clean)
        out = Shaped()
        if prev is not None and uid and prev.uid and prev.uid != uid:
            out.extend(self._delete(key, prev, ts_ms, prev.resource_version))  # replaced under the same name
            prev = None
        evidence = change_evidence(obj, deleted=False)
        if prev is not None and prev.spec_hash == spec_hash:
            prev.resource_version = rv or prev.resource_version
            prev.evidence = evidence
            return out  # status/metadata-only churn
        ts_ms, source = event_time(ts_ms, _evidence_of_this_change(evidence, prev), prev.ts_ms if prev else 0)
        if source is not None:
            clean["metadata"]["annotations"][TIME_SOURCE_ANNOTATION] = source  # sanitize made both dicts
        event = Event.applied(ts_ms, key, clean, spec_hash, uid=uid, resource_version=rv)
        self.index[key] = Published(uid, rv, spec_hash, clean, ts_ms, evidence)
        out.events.append(event)
        encoded = encode_event(event)
        out.records += [Record(EVENTS_TOPIC, key, encoded, ts_ms), Record(STATE_TOPIC, key, encoded, ts_ms)]
        if prev is None and key in self.waiting:
            out.extend(self._owner_published(key, ts_ms))
        return out

    def _delete(
        self, key: ObjectKey, prev: Published, ts_ms: int, rv: str, evidence: tuple[int, str] | None = None
    ) -> Shaped:
        del self.index[key]
        stub = deletion_stub(prev.obj)
        ts_ms, source = event_time(ts_ms, evidence, prev.ts_ms)
        if source is not None:
            stub["metadata"]["annotations"] = {TIME_SOURCE_ANNOTATION: source}
        event = Event.deleted(ts_ms, key, stub, prev.spec_hash, uid=prev.uid, resource_version=rv)
        return Shaped(
            [event],
            [Record(EVENTS_TOPIC, key, encode_event(event), ts_ms), Record(STATE_TOPIC, key, None, ts_ms)],
        )

    def vanished(self, group: str, kind: str, present: Iterable[ObjectKey], ts_ms: int) -> Shaped:
        """After a re-list of ``group``/``kind``: delete every published object the list no longer has."""
        still = set(present)
        out = Shaped()
        for key in [k for k in self.index if k not in still]:
            parsed = parse_object_key(key)
            if parsed.group == group and parsed.kind == kind:
                out.extend(self._delete(key, self.index[key], ts_ms, ""))
        return out

    # ---- pods and lifecycles ---------------------------------------------------------------------
    async def observe_pod(self, event_type: str, pod: dict[str, Any], ts_ms: int) -> Shaped:
        """An ADDED/MODIFIED/DELETED observation of any pod, for lifecycles."""
        meta = _meta(pod)
        key = key_of(pod)
        uid = str(meta.get("uid", ""))
        track = self.pods.get(key)
        if track is not None and uid and track.uid and track.uid != uid:
            out = self.pod_gone(key, ts_ms)  # a new pod under an old name: the old one is gone
            track = None
        else:
            out = Shaped()
        if event_type == "DELETED":
            out.extend(self.pod_gone(key, ts_ms))
            return out
        if not self._pod_allowed(pod, meta):
            return out
        if track is None:
            track = self.pods[key] = PodTrack(uid)
        track.template_hash = pod_track.template_hash_of(meta.get("labels"))
        chain = track.chain
        if chain is None and track.owner is None:
            namespace = meta.get("namespace")
            chain, complete = await self.owners.chain(pod, namespace if isinstance(namespace, str) else None)
            if not chain:  # a bare pod is its own owner (SimKube's self owner reference)
                chain = (Owner(key, POD_GVK),)
            elif complete:
                # Last resort: when no owner on the chain is tracked, a pod recorded as an object (Pods
                # tracked, not skipOwned) is its own owner, so it replays as a bare pod with its lifetime.
                chain = (*chain, Owner(key, POD_GVK, self.config.is_object_allowed(pod)))
            if complete:  # an incomplete chain is looked up again at the pod's next observation
                track.chain = chain
        rv = str(meta.get("resourceVersion", ""))
        if track.owner is None:
            spec = pod.get("spec")
            track.pod_spec_hash = pod_spec_hash(spec if isinstance(spec, Mapping) else {})
            owner, wait_for = self._lifecycle_owner(key, chain or ())
            self._unwait(key, track)
            if owner is None:
                if wait_for is not None and track.chain is not None:
                    # the owner exists but is not published yet: keep what is seen until it is
                    seen = _keep_first_start(derive_lifecycle(pod), track.seen)
                    if seen is not None and seen.supersedes(track.seen):  # never regresses, as published
                        track.seen, track.seen_rv = seen, rv
                    track.waiting_for = wait_for
                    self.waiting.setdefault(wait_for, set()).add(key)
                return out
            pod_track._choose_owner(track, owner)
        lifecycle = _keep_first_start(derive_lifecycle(pod), track.lifecycle or track.seen)
        track.seen = None
        if lifecycle is None or not lifecycle.supersedes(track.lifecycle):
            return out
        out.extend(self._lifecycle(key, track, lifecycle, ts_ms, rv))
        return out

    def _unwait(self, key: ObjectKey, track: PodTrack) -> None:
        if track.waiting_for is None:
            return
        pods = self.waiting.get(track.waiting_for)
        if pods is not None:
            pods.discard(key)
            if not pods:
                del self.waiting[track.waiting_for]
        track.waiting_for = None

    def _owner_published(self, owner_key: ObjectKey, ts_ms: int) -> Shaped:
        """``owner_key`` was just published: publish the lifecycles of the pods that waited for it."""
        out = Shaped()
        for key in sorted(self.waiting.pop(owner_key, ())):
            # a deleted pod and a new one under the same name (StatefulSets) may both wait: oldest first
            gone = self.gone_waiting.get(key)
            live = self.pods.get(key)
            for track in (gone, live):
                if track is None or track.waiting_for != owner_key or track.chain is None:
                    continue
                track.waiting_for = None
                owner, wait_for = self._lifecycle_owner(key, track.chain)
                if owner is None:
                    if wait_for is not None:  # still an owner to come (not expected: defensive)
                        track.waiting_for = wait_for
                        self.waiting.setdefault(wait_for, set()).add(key)
                    continue
                pod_track._choose_owner(track, owner)
                seen, track.seen = track.seen, None
                if seen is not None:
                    out.extend(self._lifecycle(key, track, seen, ts_ms, track.seen_rv))
                if track is gone:
                    del self.gone_waiting[key]
                    out.records.append(Record(RESUME_TOPIC, LIFECYCLE_PREFIX + key, None, ts_ms))
        return out

    def _pod_allowed(self, pod: Mapping[str, Any], meta: Mapping[str, Any]) -> bool:
        """Namespace, label and DaemonSet filters; not ``skipOwned``, which is about publishing pods as
        objects: owned pods are exactly the ones whose lifecycles belong to a tracked owner."""
        namespace, labels = meta.get("namespace"), meta.get("labels")
        if not self.config.is_namespace_allowed(namespace if isinstance(namespace, str) else None):
            return False
        if not self.config.is_labels_allowed(labels if isinstance(labels, Mapping) else {}):
            return False
        refs = meta.get("ownerReferences")
        return not (
            self.config.exclude_daemonset_owned
            and isinstance(refs, list)
            and any(isinstance(r, Mapping) and r.get("kind") == "DaemonSet" for r in refs)
        )

    def _lifecycle_owner(
        self, key: ObjectKey, chain: tuple[Owner, ...]
    ) -> tuple[ObjectKey | None, ObjectKey | None]:
        """The owner to publish lifecycles under, or (None, the owner to wait for) when the nearest
        owner whose lifecycles are tracked passes the filters but is not published yet. Another pod is
        passed over: Spark's driver pod owns its executors, whose lifecycles belong with the driver's,
        under the application (or, with no tracked owner above, under themselves)."""
        for owner in chain:
            if not self.config.track_lifecycle_for(owner.gvk) or (owner.gvk == POD_GVK and owner.key != key):
                continue
            if owner.key in self.index:
                return owner.key, None
            if owner.allowed:
                return None, owner.key
        return None, None

    def _lifecycle(self, key: ObjectKey, track: PodTrack, lc: PodLifecycle, ts_ms: int, rv: str) -> Shaped:
        assert track.owner is not None  # callers choose the owner first
        track.lifecycle = lc
        event = Event.pod_lifecycle(
            ts_ms,
            key,
            owner_key=track.owner,
            pod_spec_hash=track.pod_spec_hash,
            start_ms=lc.start_ms,
            end_ms=lc.end_ms,
            uid=track.uid,
            resource_version=rv,
        )
        encoded = encode_event(event)
        return Shaped(
            [event],
            [
                Record(EVENTS_TOPIC, key, encoded, ts_ms),
                Record(RESUME_TOPIC, LIFECYCLE_PREFIX + key, encoded, ts_ms),
            ],
        )

    def pod_gone(self, key: ObjectKey, ts_ms: int) -> Shaped:
        """The pod was deleted (or vanished from a re-list): finish its lifecycle, then forget it."""
        track = self.pods.pop(key, None)
        if track is None:
            return Shaped()
        out = Shaped()
        if track.owner is None and track.waiting_for is not None:
            # deleted before its owner was published: finish it now, publish it with the owner
            track.seen = finish_on_delete(track.seen, ts_ms)
            track.seen_rv = ""
            if len(self.gone_waiting) >= MAX_GONE_WAITING:  # bounded memory: the oldest is dropped
                oldest = next(iter(self.gone_waiting))
                dropped = self.gone_waiting.pop(oldest)
                live = self.pods.get(oldest)
                if live is None or live.waiting_for != dropped.waiting_for:
                    self._unwait(oldest, dropped)
            previous = self.gone_waiting.pop(key, None)  # an older pod of this name that still waits
            if previous is not None and previous.waiting_for != track.waiting_for:
                self._unwait(key, previous)
            self.gone_waiting[key] = track
            return out
        finished = finish_on_delete(track.lifecycle, ts_ms)
        if track.owner is not None and finished is not None and finished != track.lifecycle:
            out = self._lifecycle(key, track, finished, ts_ms, "")
        if track.owner is not None:
            out.records.append(Record(RESUME_TOPIC, LIFECYCLE_PREFIX + key, None, ts_ms))
        return out

    def pods_vanished(self, present: Iterable[ObjectKey], ts_ms: int) -> Shaped:
        """After a re-list of pods: every known pod the list no longer has is gone."""
        still = set(present)
        out = Shaped()
        for key in [k for k in self.pods if k not in still]:
            out.extend(self.pod_gone(key, ts_ms))
        return out
