"""Retention: remove segments older than a configured age without breaking later ranges.

A segment can only go if a later keyframe of its partition still reconstructs the state it contributed
to. Per partition, the anchor is the latest keyframe segment starting at or before the cutoff whose
keyframe time T is at or before it too (so every window starting at or after the cutoff can start
from it, see :mod:`pipeline.sink.compactor`) and that reads back whole. Everything before the anchor
that ends by the cutoff is removed; the anchor and everything after it stay. A keyframe that does not
decode is never an anchor: the history before it is what an export or a restore falls back to
(:mod:`pipeline.store.history`). Gap markers before the anchor go with the segments around them.
"""

from __future__ import annotations

import logging

from pipeline.model.errors import FormatError
from pipeline.store.catalog import CatalogEntry, SegmentCatalog, keyframe_times
from pipeline.store.history import load_segment
from pipeline.store.segment_index import remove_index_markers
from pipeline.store.segment_store import SegmentName

log = logging.getLogger("kubetape.sink")


def expired_segments(catalog: SegmentCatalog, cutoff_ms: int) -> list[SegmentName]:
    """Names of segments that can be deleted: all their events are before ``cutoff_ms`` and a later,
    readable keyframe of the same partition, with its time at or before the cutoff, makes them
    unnecessary."""
    catalog.refresh()
    expired: list[SegmentName] = []
    for partition in catalog.partitions():
        chain = catalog.of_partition(partition)
        times = keyframe_times(chain)
        candidates = [
            i
            for i, t in enumerate(times)
            if t is not None and t <= cutoff_ms and chain[i].header.start_ms <= cutoff_ms
        ]
        anchor = next((i for i in reversed(candidates) if _readable(catalog, chain[i])), None)
        if anchor is None:
            continue
        first_kept = chain[anchor].first_offset
        expired += [e.name for e in chain[:anchor] if e.header.end_ms <= cutoff_ms]
        expired += [
            g.name
            for g in catalog.gaps(partition)
            if g.last_offset < first_kept and g.header.end_ms <= cutoff_ms
        ]
    return sorted(expired)


def _readable(catalog: SegmentCatalog, entry: CatalogEntry) -> bool:
    """Whether the keyframe segment decodes whole (remembered per version of the file)."""
    version = catalog.version(entry.name)
    if version is not None and catalog.verified.get(entry.name) == version:
        return True
    try:
        load_segment(catalog.store, entry)
    except FormatError as exc:
        log.error("retention keeps the history before an unreadable keyframe segment: %s", exc)
        return False
    if version is not None:
        catalog.verified[entry.name] = version
    return True


def apply_retention(catalog: SegmentCatalog, cutoff_ms: int) -> list[SegmentName]:
    """Delete the expired segments; returns their names."""
    names = expired_segments(catalog, cutoff_ms)
    expired = set(names)
    headers = {e.name: e.header for e in catalog.entries() if e.name in expired}
    for name in names:
        catalog.store.delete(name)
    remove_index_markers(catalog.store, headers)  # after the segments: a marker alone is skipped
    catalog.refresh()
    return names
