"""An index of a segment store, kept as empty marker objects, so that a window's export lists a few
prefixes instead of every segment key.

Why it is needed: an export of ``[A, B)`` folds, per partition, the latest keyframe whose time T is at
or before A and then *every later segment starting before B* (:meth:`SegmentCatalog.plan`). A later
segment (by offset) can hold late events from long before A, so without an index the catalog lists
every key of the store and reads every header it has not seen: a month of 6 partitions at 60 s windows
is 260 listing requests and, for a cold reader such as ``kubetape export``, 260k header reads.

**The markers** (under ``index/``; keys sort in the order a reader needs them):

* ``partitions/pNNNN``: the partition has segments;
* ``keyframes/pNNNN/<T>-<first offset>``: a segment with a keyframe of time T (15 digits each);
* ``start/<bucket>/<segment>``: every segment, by the bucket (``bucket_ms``, an hour) of its first
  event time (its header's ``start_ms``);
* ``late/pNNNN/<segment>``: a segment whose first event is more than ``late_slack_ms`` before the latest
  event its partition had when it was closed (its writer's *high water*);
* ``gaps/<segment>``: a gap marker (lost offsets; every export before its end reports it);
* ``ready/v1``: every segment of the store is indexed (written once by the first sink of this version,
  after it indexed what older sinks wrote, see :func:`pipeline.store.index_backfill.ensure_index`).

**Why this finds everything a plan needs.** Let K be the chosen keyframe segment. A segment S after K
(by offset) that is not late starts at or after ``high_water(S) - late_slack_ms``; its writer had folded
K's events before S, so ``high_water(S)`` is at least K's keyframe time minus one and at least K's first
event time. S's start bucket is therefore between ``bucket(max(K.start, T_K - 1) - late_slack_ms)``
and ``bucket(B - 1)``: a handful of ``start/`` buckets. The late ones are listed per partition after K's
name. Late segments are rare (an event more than the slack late), so that listing stays short.

**Consistency.** Markers are written *before* the segment they describe, so a segment never exists
without its markers. A marker without its segment (the write after it failed, was fenced out, or
retention deleted the segment first) is skipped by readers and removed by retention. A segment rewritten
under the same name by another writer got that writer's markers too: markers only name candidates,
readers take every fact from the segment's own header.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pipeline.formats.segment.header import SegmentHeader
from pipeline.store.segment_store import IndexLayout, SegmentName, parse_segment_name, segment_name

READY = "index/ready/v1"
_MAX_TIME = 10**15 - 1  # the largest 15-digit time
_PARTITIONS = "index/partitions/"
_KEYFRAMES = "index/keyframes/"
_START = "index/start/"
_LATE = "index/late/"
_GAPS = "index/gaps/"


@runtime_checkable
class MarkerStore(Protocol):
    """The optional part of a :class:`~pipeline.store.segment_store.SegmentStore` that keeps an index."""

    index_layout: IndexLayout | None

    def put_marker(self, key: str) -> None: ...

    def list_markers(
        self, prefix: str, *, after: str | None = None, through: str | None = None, limit: int | None = None
    ) -> list[str]:
        """Marker keys under ``prefix`` in key order: after ``after`` (excluded), up to ``through``
        (included), at most ``limit`` (None: no bound). Reading stops at the bound. ``prefix`` is a
        directory (ends with ``/``): object stores list by path, not by any string prefix."""
        ...

    def delete_marker(self, key: str) -> None: ...


def layout_of(store: object) -> IndexLayout | None:
    """The store's index layout, or None for a store that keeps no index (a local directory)."""
    layout = getattr(store, "index_layout", None)
    return layout if isinstance(layout, IndexLayout) else None


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """What the markers of one segment are made from."""

    name: SegmentName
    partition: int
    first_offset: int
    header: SegmentHeader
    high_water_ms: int
    """The latest event time of the partition when the segment was closed (its own events included)."""
    keyframe_time: int | None


def markers_for(facts: SegmentFacts, layout: IndexLayout) -> list[str]:
    """Every marker key of one segment (the partition's marker first)."""
    keys = [f"{_PARTITIONS}p{facts.partition:04d}"]
    if facts.header.is_gap:
        return [*keys, f"{_GAPS}{facts.name}"]
    keys.append(f"{_START}{layout.bucket(facts.header.start_ms):010d}/{facts.name}")
    if facts.header.start_ms < facts.high_water_ms - layout.late_slack_ms:
        keys.append(_late_key(facts.name))
    if facts.keyframe_time is not None:
        keys.append(_keyframe_key(facts.partition, facts.keyframe_time, facts.first_offset))
    return keys


def remove_index_markers(store: object, deleted: Mapping[SegmentName, SegmentHeader]) -> None:
    """Remove the markers of segments deleted from the store (retention), by their last headers."""
    layout = layout_of(store)
    if layout is None or not deleted:
        return
    assert isinstance(store, MarkerStore)
    for name, header in deleted.items():
        if header.is_gap:
            store.delete_marker(f"{_GAPS}{name}")
        else:
            store.delete_marker(f"{_START}{layout.bucket(header.start_ms):010d}/{name}")
            store.delete_marker(_late_key(name))
    # a keyframe marker's key holds the time its writer gave it: find them by name
    for partition in sorted({p for name in deleted if (p := _partition_of(name)) is not None}):
        for marker in keyframes_through(store, partition, _MAX_TIME):
            if marker.name in deleted:
                store.delete_marker(marker.key)


def _partition_of(name: SegmentName) -> int | None:
    parsed = parse_segment_name(name)
    return None if parsed is None else parsed[0]


def _keyframe_key(partition: int, keyframe_time: int, first_offset: int) -> str:
    return f"{_KEYFRAMES}p{partition:04d}/{max(keyframe_time, 0):015d}-{first_offset:015d}"


@dataclass(frozen=True, slots=True)
class KeyframeMarker:
    key: str
    keyframe_time: int
    name: SegmentName


def partitions(store: MarkerStore) -> list[int]:
    return sorted(int(key[len(_PARTITIONS) + 1 :]) for key in store.list_markers(_PARTITIONS))


def keyframes_through(
    store: MarkerStore, partition: int, through_ms: int, *, since_ms: int = 0
) -> list[KeyframeMarker]:
    """The keyframe markers of ``partition`` with ``since_ms <= T <= through_ms``, in T order (which is
    offset order: a partition's keyframe times never decrease)."""
    prefix = f"{_KEYFRAMES}p{partition:04d}/"
    after = f"{prefix}{since_ms - 1:015d}-~" if since_ms > 0 else None
    through = f"{prefix}{through_ms:015d}-~"  # '~' sorts after every digit: any offset at T
    return [
        _keyframe_marker(prefix, partition, key)
        for key in store.list_markers(prefix, after=after, through=through)
    ]


def _keyframe_marker(prefix: str, partition: int, key: str) -> KeyframeMarker:
    time_text, _, offset_text = key[len(prefix) :].partition("-")
    return KeyframeMarker(key, int(time_text), segment_name(partition, int(offset_text)))


def keyframes_after(store: MarkerStore, partition: int, after_ms: int, *, limit: int) -> list[KeyframeMarker]:
    """The first ``limit`` keyframe markers of ``partition`` with a time after ``after_ms``."""
    prefix = f"{_KEYFRAMES}p{partition:04d}/"
    keys = store.list_markers(prefix, after=f"{prefix}{after_ms:015d}-~", limit=limit)
    return [_keyframe_marker(prefix, partition, key) for key in keys]


def late_after(store: MarkerStore, name: SegmentName) -> list[SegmentName]:
    """The late segments of ``name``'s partition after it."""
    parsed = parse_segment_name(name)
    assert parsed is not None
    keys = store.list_markers(f"{_LATE}p{parsed[0]:04d}/", after=_late_key(name))
    return [SegmentName(key.rsplit("/", 1)[1]) for key in keys]


def _late_key(name: SegmentName) -> str:
    return f"{_LATE}{name[:5]}/{name}"  # per partition: object stores list by directory


def started_in(store: MarkerStore, first_bucket: int, last_bucket: int) -> list[SegmentName]:
    """Segments (every partition) whose first event lies in buckets ``first_bucket..last_bucket``."""
    keys = store.list_markers(
        _START,
        after=f"{_START}{first_bucket - 1:010d}/~" if first_bucket > 0 else None,
        through=f"{_START}{last_bucket:010d}/~",
    )
    return [SegmentName(key.rsplit("/", 1)[1]) for key in keys]


def gaps(store: MarkerStore) -> list[SegmentName]:
    return [SegmentName(key[len(_GAPS) :]) for key in store.list_markers(_GAPS)]


def is_ready(store: MarkerStore) -> bool:
    return READY in store.list_markers("index/ready/")


def index_segment(store: object, facts: SegmentFacts) -> None:
    """Write the markers of a segment about to be stored (nothing for a store without an index)."""
    layout = layout_of(store)
    if layout is None:
        return
    assert isinstance(store, MarkerStore)
    for key in markers_for(facts, layout):
        store.put_marker(key)
