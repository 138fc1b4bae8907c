"""What a segment store holds, for ``kubetape list`` and ``kubetape describe``: per cluster and
partition, the segments, their bytes, the time range they cover, keyframes, gap markers (offsets the
sink found lost) and the topic they were recorded from.

Read from headers only, through the store's public read API (:meth:`SegmentStore.list` for sizes,
:class:`~pipeline.store.catalog.SegmentCatalog` for headers): describing an hour-long or a year-long
recording reads the same few kilobytes per segment, and a segment whose header does not decode is
counted as unreadable with its reason instead of failing the summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.keys import ClusterId
from pipeline.store.catalog import CatalogEntry, SegmentCatalog
from pipeline.store.segment_store import SegmentStore
from pipeline.store.store_url import (
    StoreLocation,
    cluster_store_location,
    open_segment_store,
    parse_store_url,
    stored_clusters,
)


@dataclass(frozen=True, slots=True)
class GapSummary:
    """Offsets ``first_offset``..``last_offset`` of a partition were lost before the sink got them."""

    partition: int
    first_offset: int
    last_offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """One partition's chain of segments (gap markers counted apart)."""

    partition: int
    segments: int
    bytes: int
    events: int
    start_ms: int | None
    end_ms: int | None
    first_offset: int
    last_offset: int
    keyframe_times: tuple[int, ...]
    gaps: tuple[GapSummary, ...]


@dataclass(frozen=True, slots=True)
class StoreSummary:
    """One cluster's sub-store."""

    cluster: ClusterId
    location: str
    partitions: tuple[PartitionSummary, ...]
    topics: tuple[str, ...]
    sources: tuple[str, ...]
    """The identities the segments were written from (topic, and ``#cluster=ID`` in a fleet)."""
    unreadable: dict[str, str]
    """Segment name → why its header does not decode."""

    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    @property
    def events(self) -> int:
        return sum(p.events for p in self.partitions)

    @property
    def start_ms(self) -> int | None:
        return min((p.start_ms for p in self.partitions if p.start_ms is not None), default=None)

    @property
    def end_ms(self) -> int | None:
        return max((p.end_ms for p in self.partitions if p.end_ms is not None), default=None)

    @property
    def keyframes(self) -> int:
        return sum(len(p.keyframe_times) for p in self.partitions)

    @property
    def gaps(self) -> tuple[GapSummary, ...]:
        return tuple(g for p in self.partitions for g in p.gaps)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "location": self.location,
            "segments": self.segments,
            "bytes": self.bytes,
            "events": self.events,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "keyframes": self.keyframes,
            "gaps": len(self.gaps),
            "topics": list(self.topics),
            "sources": list(self.sources),
            "unreadable": dict(self.unreadable),
            "partitions": [
                {
                    "partition": p.partition,
                    "segments": p.segments,
                    "bytes": p.bytes,
                    "events": p.events,
                    "start_ms": p.start_ms,
                    "end_ms": p.end_ms,
                    "first_offset": p.first_offset,
                    "last_offset": p.last_offset,
                    "keyframe_times_ms": list(p.keyframe_times),
                    "gaps": [
                        {"first_offset": g.first_offset, "last_offset": g.last_offset, "reason": g.reason}
                        for g in p.gaps
                    ],
                }
                for p in self.partitions
            ],
        }


def summarize_store(store: SegmentStore, cluster: ClusterId, location: str) -> StoreSummary:
    """The summary of one cluster's store (one listing, then the headers not read before)."""
    catalog = SegmentCatalog(store)
    catalog.refresh()
    sizes = {s.name: s.size for s in store.list()}
    entries = catalog.entries()
    partitions = tuple(
        _partition(p, [e for e in entries if e.partition == p], sizes) for p in catalog.partitions()
    )
    return StoreSummary(
        cluster=cluster,
        location=location,
        partitions=partitions,
        topics=tuple(sorted({r.topic for e in entries for r in e.header.partitions})),
        sources=tuple(sorted({e.header.source for e in entries if e.header.source})),
        unreadable={str(name): why for name, why in sorted(catalog.corrupt.items())},
    )


def _partition(partition: int, chain: list[CatalogEntry], sizes: dict[Any, int]) -> PartitionSummary:
    held = [e for e in chain if not e.is_gap]
    return PartitionSummary(
        partition=partition,
        segments=len(held),
        bytes=sum(sizes.get(e.name, 0) for e in chain),
        events=sum(e.header.counts.total for e in held),
        start_ms=min((e.header.start_ms for e in held), default=None),
        end_ms=max((e.header.end_ms for e in held), default=None),
        first_offset=min(e.first_offset for e in chain),
        last_offset=max(e.last_offset for e in chain),
        keyframe_times=tuple(
            e.header.keyframe_time if e.header.keyframe_time is not None else e.header.keyframe_at_ms
            for e in held
            if e.header.keyframe_at_ms is not None
        ),
        gaps=tuple(
            GapSummary(partition, e.first_offset, e.last_offset, e.header.gap_reason or "")
            for e in chain
            if e.is_gap
        ),
    )


def summarize_fleet(url: str | Path, cluster: str | None = None) -> list[StoreSummary]:
    """Every cluster the store at ``url`` holds (or only ``cluster``), each summarized."""
    location = parse_store_url(url, what="STORE")
    clusters = stored_clusters(location)
    if cluster is not None:
        if cluster not in clusters:
            held = ", ".join(clusters) or "none"
            raise ConfigError(f"{location}: holds no cluster {cluster!r} (it holds: {held})")
        clusters = [ClusterId(cluster)]
    return [_summarize(cluster_store_location(location, c), c) for c in clusters]


def _summarize(location: StoreLocation, cluster: ClusterId) -> StoreSummary:
    return summarize_store(open_segment_store(location, must_exist=True), cluster, str(location))
