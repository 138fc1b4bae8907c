"""Indexing a store once: the segments that sinks of older releases wrote carry no index markers.

A store that keeps an index (:mod:`pipeline.store.segment_index`) is trusted by readers only once its
``ready`` marker exists. The first sink of this release that gets a partition of such a store writes
the markers of everything already there and then ``ready``; from then on every writer indexes what it
writes, before writing it. Sinks racing to do it write the same markers (idempotent). A sink of an
older release started *after* that would write unindexed segments: upgrade every replica at once.
"""

from __future__ import annotations

import logging

from pipeline.store import segment_index
from pipeline.store.catalog import SegmentCatalog, keyframe_times
from pipeline.store.segment_index import MarkerStore, SegmentFacts, index_segment, layout_of

log = logging.getLogger("kubetape.sink")


def ensure_index(catalog: SegmentCatalog) -> int:
    """Index every segment of the store unless it is indexed already; returns how many were indexed.
    Call it after ``catalog.refresh()`` (the catalog's listing is what gets indexed)."""
    store = catalog.store
    if layout_of(store) is None:
        return 0
    assert isinstance(store, MarkerStore)
    if segment_index.is_ready(store):
        return 0
    indexed = 0
    entries = catalog.entries()  # by partition, then offset
    for partition in sorted({e.partition for e in entries}):
        chain = [e for e in entries if e.partition == partition]  # gap markers too
        with_events = [e for e in chain if not e.is_gap]
        times = dict(zip([e.name for e in with_events], keyframe_times(with_events), strict=True))
        # an upper bound of the partition's latest event time after each segment: its header's end
        # bounds its events, and a high water taken too high only lists more segments as late
        high_water = -1
        for entry in chain:
            if not entry.is_gap:
                high_water = max(high_water, entry.header.end_ms - 1)
            facts = SegmentFacts(
                entry.name, partition, entry.first_offset, entry.header, high_water, times.get(entry.name)
            )
            index_segment(store, facts)
            indexed += 1
    store.put_marker(segment_index.READY)
    log.info("segment store indexed", extra={"ctx": {"segments": indexed}})
    return indexed
