"""What the watcher keeps per live pod (:class:`PodTrack`) and the steps on one pod's track that need
nothing else of the :class:`~.shaper.Shaper`: its template hash, its chosen owner, its first start kept.

Apart from :mod:`.shaper` because a pod's track is what the watcher's memory per pod is made of (see
docs/scale.md): its fields and the interning that keeps it small are one concern, the shaper's
decisions another. The shaper calls :func:`_choose_owner` and :func:`template_hash_of` through this
module (``pod_track.template_hash_of``), not by imported name, so that ``bench/watch_heap.py`` can swap
in their earlier versions here to measure what they save.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.model.keys import ObjectKey
from pipeline.model.lifecycle import PodLifecycle
from pipeline.watch.owners import Owner


@dataclass(slots=True)
class PodTrack:
    """What the watcher knows about one live pod."""

    uid: str
    # None until looked up (restored pods), and again once the owner is chosen: it is not needed then
    chain: tuple[Owner, ...] | None = None
    owner: ObjectKey | None = None  # the owner its lifecycles are published under, once chosen
    pod_spec_hash: int = 0
    lifecycle: PodLifecycle | None = None  # the last one published
    # while the owner is not published yet: the owner waited for, and the lifecycle seen meanwhile
    waiting_for: ObjectKey | None = None
    seen: PodLifecycle | None = None
    seen_rv: str = ""
    template_hash: str = ""  # its pod-template hash label, which its usage samples are split by


TEMPLATE_HASH_LABELS = ("pod-template-hash", "controller-revision-hash")
"""The labels naming the template a pod was made from: a ReplicaSet's (Deployments), a revision's
(StatefulSets, DaemonSets)."""


def template_hash_of(labels: object) -> str:
    """The pod-template hash in a pod's ``labels``, empty when it carries none; one string shared by
    every pod of the template (interned), not one kept per pod."""
    if isinstance(labels, Mapping):
        for name in TEMPLATE_HASH_LABELS:
            value = labels.get(name)
            if isinstance(value, str):
                return sys.intern(value[:253])
    return ""


def _choose_owner(track: PodTrack, owner: ObjectKey) -> None:
    """The pod's lifecycles go under ``owner`` from now on. Its owner chain is never looked at again,
    so it is dropped (its hops' keys and kinds were ~0.6 KiB a pod), and the owner's key is one string
    shared by all its pods (interned) rather than a copy per pod."""
    track.owner = ObjectKey(sys.intern(owner))
    track.chain = None


def _keep_first_start(new: PodLifecycle | None, old: PodLifecycle | None) -> PodLifecycle | None:
    """A pod seen running and now finished with another start time (a restarted container, or KWOK's
    completion stages, which stamp ``startedAt`` anew) finished at the new end but started at the first
    start. SimKube refuses such an update and only guesses an end at deletion; keeping the first start
    and the real end is what its partial order means, and pods that are never deleted still finish."""
    if new is None or old is None or old.finished or not new.finished or new.start_ms == old.start_ms:
        return new
    assert new.end_ms is not None
    return PodLifecycle(old.start_ms, max(new.end_ms, old.start_ms))
