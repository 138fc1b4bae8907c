"""The recorded load at rest: the usage sink's segments in the ``usage/`` sub-store beside a cluster's
segments, and the samples an export of a window needs from them.

The sub-store is a segment store of its own (so the event catalog, retention and the fleet's listing of
clusters never meet its files); its segments hold usage samples and no events. An export reads every
usage segment that starts before the window's end: the window's samples, and the last one of each owner
before its start, which :func:`pipeline.formats.usage_window.usage_window` folds in. Samples are small
and few (one per owner every 15 s), so no index is kept yet.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.header import decode_segment_header
from pipeline.model.errors import FormatError
from pipeline.model.usage import UsageSample
from pipeline.store.segment_store import SegmentStore
from pipeline.store.store_url import (
    LocalLocation,
    S3Location,
    StoreLocation,
    open_segment_store,
    parse_store_url,
)

USAGE_DIR = "usage"
HEADER_READ_BYTES = 64 * 1024


def usage_store_location(location: StoreLocation) -> StoreLocation:
    """Where the recorded load of the (cluster) store at ``location`` lives."""
    if isinstance(location, LocalLocation):
        return LocalLocation(location.path / USAGE_DIR)
    return S3Location(location.bucket, "/".join(p for p in (location.prefix, USAGE_DIR) if p))


def open_usage_store(
    location: StoreLocation | str | Path, *, for_reading: bool = False
) -> SegmentStore | None:
    """The usage sub-store of the store at ``location``; for reading, None when a directory store has
    none (nothing was recorded)."""
    if not isinstance(location, LocalLocation | S3Location):
        location = parse_store_url(location)
    usage = usage_store_location(location)
    if for_reading and isinstance(usage, LocalLocation) and not usage.path.is_dir():
        return None
    return open_segment_store(usage)


def stored_usage(
    store: SegmentStore, end_ms: int, warn: Callable[[str], None] | None = None
) -> list[UsageSample]:
    """Every stored sample of the segments that start before ``end_ms``; a segment that does not read
    is skipped with a warning naming it (as the event catalog does)."""
    samples: list[UsageSample] = []
    for entry in store.list():
        where = store.describe(entry.name)
        try:
            header = decode_segment_header(store.head(entry.name, HEADER_READ_BYTES), where)
            if header.start_ms >= end_ms or not header.usage_samples:
                continue
            samples.extend(decode_segment(store.get(entry.name), where).usage)
        except FormatError as exc:
            if warn is not None:
                warn(f"usage segment skipped: {exc}")
    return samples
