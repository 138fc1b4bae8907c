"""Retention of the recorded load: remove usage segments older than the cutoff without losing the load
at the cutoff.

An export of a window starting at or after the cutoff folds in each owner and template hash's last
sample before its start (:func:`pipeline.formats.usage_window.usage_window`). So of the segments that
end by the cutoff (the candidates), a segment stays while it holds, among the candidates' samples, the
last one of some owner and hash whose load had not ended (pods running, or a gap); and a segment
holding an ended load's last sample stays while a kept segment holds an older sample of that owner and
hash (else that older sample would read as the load at the window's start). Everything else goes.

The candidates are decoded at every pass; in a steady state they are the few kept segments and those
that expired since the last pass. The sink writes one partition's usage segments in time order (an
owner's samples stay in one partition, published in order), which is what makes the candidates' last
sample the last before the cutoff.
"""

from __future__ import annotations

import logging

from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.header import decode_segment_header
from pipeline.model.errors import FormatError
from pipeline.model.usage import UsageSample
from pipeline.store.segment_store import SegmentName, SegmentStore, parse_segment_name

log = logging.getLogger("kubetape.sink.usage")

HEADER_READ_BYTES = 64 * 1024


def expired_usage_segments(store: SegmentStore, cutoff_ms: int) -> list[SegmentName]:
    """Names of the usage segments that can be deleted at ``cutoff_ms`` (see the module docstring);
    a segment that does not read is kept (and logged), never judged."""
    samples: dict[SegmentName, tuple[UsageSample, ...]] = {}
    for entry in store.list():
        if parse_segment_name(entry.name) is None:
            continue
        where = store.describe(entry.name)
        try:
            header = decode_segment_header(store.head(entry.name, HEADER_READ_BYTES), where)
            if header.end_ms > cutoff_ms:
                continue
            samples[entry.name] = decode_segment(store.get(entry.name), where).usage
        except FormatError as exc:
            log.error("usage retention keeps a segment that does not read: %s", exc)
    kept = _needed(samples)
    return sorted(name for name in samples if name not in kept)


def _needed(samples: dict[SegmentName, tuple[UsageSample, ...]]) -> set[SegmentName]:
    last: dict[tuple[str, str], tuple[int, SegmentName, UsageSample]] = {}
    for name, held in samples.items():
        for sample in held:
            which = (sample.owner_key, sample.template_hash)
            found = last.get(which)
            # ties: the later segment (by name: the partition's offsets) is the newer word
            if found is None or (sample.ts_ms, name) >= (found[0], found[1]):
                last[which] = (sample.ts_ms, name, sample)
    kept = {name for _, name, s in last.values() if s.gap or s.pods}
    ended = {which: name for which, (_, name, s) in last.items() if not (s.gap or s.pods)}
    while True:  # an ended load's last word stays while an older word of it stays
        more = {
            name
            for which, name in ended.items()
            if name not in kept
            and any((s.owner_key, s.template_hash) == which for k in kept for s in samples[k])
        }
        if not more:
            return kept
        kept |= more


def apply_usage_retention(store: SegmentStore, cutoff_ms: int) -> list[SegmentName]:
    """Delete the expired usage segments; returns their names."""
    names = expired_usage_segments(store, cutoff_ms)
    for name in names:
        store.delete(name)
    return names
