"""The recorded load of one window, self-contained as a trace's objects are: the state at its start folded in.

A trace of ``[start, end)`` holds every usage sample inside the window and, before them, each owner and
template hash's load at ``start``: its last sample before the window, moved to ``start`` (the time a
replay of the window begins with it). An owner whose last sample before the window says its load ended
(no pods, no gap) had no load then and is left out, as a deleted object is; a gap stays a gap (the
load was unknown at the start).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from pipeline.formats.segment.content import usage_order
from pipeline.model.usage import UsageSample


def usage_window(samples: Iterable[UsageSample], start_ms: int, end_ms: int) -> tuple[UsageSample, ...]:
    """The samples of ``[start_ms, end_ms)`` with the load at ``start_ms`` folded in, sorted as a
    segment holds them; one sample per owner, hash and time (a sample delivered twice counts once)."""
    before: dict[tuple[str, str], UsageSample] = {}
    inside: dict[tuple[int, str, str], UsageSample] = {}
    for sample in samples:
        if sample.ts_ms < start_ms:
            which = (sample.owner_key, sample.template_hash)
            last = before.get(which)
            if last is None or sample.ts_ms >= last.ts_ms:
                before[which] = sample
        elif sample.ts_ms < end_ms:
            inside[usage_order(sample)] = sample
    for sample in before.values():
        if sample.pods == 0 and not sample.gap:
            continue  # its load had ended
        at_start = dataclasses.replace(sample, ts_ms=start_ms)
        # a sample recorded at the start itself is the newer word on that owner
        inside.setdefault(usage_order(at_start), at_start)
    return tuple(inside[k] for k in sorted(inside))
