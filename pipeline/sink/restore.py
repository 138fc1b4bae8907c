"""Restoring a partition's compactor from the store: the sink continues where its segments end.

The fold is the one an export's window rebuild uses (:mod:`pipeline.store.history`): start at the
latest readable keyframe and fold every later segment through :class:`ObjectState`, settled at each
segment boundary exactly as the sink settled it, so the restored state equals the state the sink had.
"""

from __future__ import annotations

import logging

from pipeline.model.errors import FormatError
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.store.catalog import CatalogEntry, SegmentCatalog, keyframe_times
from pipeline.store.history import load_segment
from pipeline.store.state import ObjectState

log = logging.getLogger("kubetape.sink")


def restore_partition(
    catalog: SegmentCatalog,
    partition: int,
    settings: CompactionSettings,
    *,
    source: str | None = None,
    epoch: int | None = None,
) -> PartitionCompactor:
    """A compactor that continues ``partition`` where its stored segments end: the state after the
    store's last offset, folded from the latest readable keyframe through every later segment, settled
    at each segment boundary exactly as the sink settled it (so it equals the state the sink had).

    An unreadable keyframe segment is never replaced by an empty state: the restore starts again from
    the keyframe before it (or from the first segment). An unreadable segment without a keyframe is
    logged as an error (its events are missing from the state; exports name it too)."""
    chain = catalog.of_partition(partition)
    times = keyframe_times(chain)
    candidates = [i for i, e in enumerate(chain) if e.header.keyframe_at_ms is not None]
    while True:
        begin = candidates.pop() if candidates else None
        restored = _fold_chain(catalog, partition, chain, times, begin, settings=settings)
        if restored is not None:
            break
    state, max_ts = restored
    since = None if begin is None else len(chain) - begin - 1
    return PartitionCompactor(
        partition,
        settings,
        state=state,
        next_offset=catalog.next_offset(partition),
        segments_since_keyframe=since,
        max_ts=max_ts,
        source=source,
        epoch=epoch,
    )


def _fold_chain(
    catalog: SegmentCatalog,
    partition: int,
    chain: list[CatalogEntry],
    times: list[int | None],
    begin: int | None,
    *,
    settings: CompactionSettings,
) -> tuple[ObjectState, int] | None:
    """The state and latest event time after folding ``chain[begin:]`` (None if ``chain[begin]``, the
    keyframe to start from, cannot be read)."""
    state = ObjectState()
    max_ts = -1
    start = 0 if begin is None else begin
    for index in range(start, len(chain)):
        entry = chain[index]
        try:
            segment = load_segment(catalog.store, entry, with_keyframe=index == begin)
        except FormatError as exc:
            if index == begin:
                log.error(
                    "keyframe segment unreadable while restoring partition %d; restoring from an earlier "
                    "keyframe instead: %s",
                    partition,
                    exc,
                )
                return None
            log.error(
                "segment unreadable while restoring partition %d: offsets %d..%d are missing from the "
                "restored state (exports name this file too): %s",
                partition,
                entry.first_offset,
                entry.last_offset,
                exc,
            )
            continue
        if segment.keyframe is not None:
            state = ObjectState.from_keyframe(segment.keyframe)
            kf_time = times[index]
            max_ts = -1 if kf_time is None else kf_time - 1
        for event in segment.events:
            state.offer(event)
        if segment.events:
            max_ts = max(max_ts, segment.events[-1].ts_ms)
        state.settle(max_ts + 1, settings.tombstone_horizon_ms)
    return state, max_ts
