"""Retention: remove segments older than a configured age without breaking later ranges.

A segment can only go if a later keyframe of its partition still reconstructs the state it contributed
to: per partition, everything before the latest keyframe segment that starts at or before the cutoff
(and ends before it) is removed; that keyframe segment and everything after it stay.
"""

from __future__ import annotations

from pipeline.io.segment_store import SegmentName
from pipeline.sink.catalog import SegmentCatalog


def expired_segments(catalog: SegmentCatalog, cutoff_ms: int) -> list[SegmentName]:
    """Names of segments that can be deleted: all their events are before ``cutoff_ms`` and a later
    keyframe of the same partition, also at or before the cutoff, makes them unnecessary."""
    catalog.refresh()
    expired: list[SegmentName] = []
    for partition in catalog.partitions():
        chain = catalog.of_partition(partition)
        anchor = None
        for i, e in enumerate(chain):
            kf = e.header.keyframe_at_ms
            if kf is not None and e.header.start_ms <= cutoff_ms:
                anchor = i
        if anchor is None:
            continue
        expired += [e.name for e in chain[:anchor] if e.header.end_ms <= cutoff_ms]
    return expired


def apply_retention(catalog: SegmentCatalog, cutoff_ms: int) -> list[SegmentName]:
    """Delete the expired segments; returns their names."""
    names = expired_segments(catalog, cutoff_ms)
    for name in names:
        catalog.store.delete(name)
    catalog.refresh()
    return names
