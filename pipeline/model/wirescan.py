"""The ingest hot path: event heads and state folding in C, with the Python rules as the fallback.

:mod:`pipeline.model._wirescan` (compiled from ``_wirescan.c`` when kubetape is installed) does, per
batch, what :class:`~pipeline.model.events.WireProbe` and :class:`~pipeline.sink.state.ObjectState` do
per event, for the common cases only: anything it cannot decide is left to the Python rules (``scan``
answers None, ``fold`` stops). So results never differ, only speed (tests/unit/test_wirescan.py).

Without a C compiler at install time the extension is skipped (it is optional in pyproject.toml) and
:data:`NATIVE` is False: callers then run the Python rules alone, several times slower. The sink logs
which path it runs.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

from pipeline.model.events import RV_MAX_DIGITS, TS_MAX_MS, EventHead, EventType

try:
    from pipeline.model import _wirescan  # type: ignore[attr-defined]  # a C extension, no stubs
except ImportError:  # pragma: no cover - only without a compiler at install time
    _wirescan = None

INGEST_RULES = 2
"""The version of the ingest rules (events.py's definition) that ``_wirescan.c`` must implement: raise
both together whenever a rule changes."""
_LIMITS = {"TS_MAX_MS": TS_MAX_MS, "RV_MAX_DIGITS": RV_MAX_DIGITS, "INGEST_RULES": INGEST_RULES}
_STALE = _wirescan is not None and any(getattr(_wirescan, k, None) != v for k, v in _LIMITS.items())
if _STALE:  # pragma: no cover - a build whose rules differ from the definition must not be used
    warnings.warn(
        "pipeline.model._wirescan was built from another version of _wirescan.c (its rules or limits "
        "differ from pipeline.model.events); using the Python rules. Reinstall kubetape to rebuild it.",
        RuntimeWarning,
        stacklevel=1,
    )
    _wirescan = None

NATIVE: bool = _wirescan is not None
"""Whether the C extension is available."""

if _wirescan is not None:
    _wirescan.configure(
        EventHead, EventType.APPLIED, EventType.DELETED, EventType.POD_LIFECYCLE, EventType.GAP
    )

FOLD_END = 0
"""``fold`` went through every head."""
FOLD_SEGMENT_FULL = 1
"""``fold`` stopped before a head outside the open segment's window, or past its room."""
FOLD_NEEDS_RULES = 2
"""``fold`` stopped before a head whose duplicate test needs the Python rules."""


def scan(values: list[bytes | None]) -> tuple[list[EventHead | None], list[int]]:
    """Each value's head where the C scanner accepts it outright, else None; and the indexes of those
    Nones, for the probe to decide (it accepts them or raises naming the problem)."""
    if _wirescan is None:
        return [None] * len(values), list(range(len(values)))
    result: tuple[list[EventHead | None], list[int]] = _wirescan.scan(values)
    return result


class Folded(NamedTuple):
    """What :func:`fold` did: ``heads[stop]`` is the first head not taken, for the reason ``why``
    (FOLD_END, FOLD_SEGMENT_FULL or FOLD_NEEDS_RULES); ``min_ts`` is the smallest event time kept (-1
    if none), ``last_ts`` the last one kept (the given one if none), ``ordered`` whether the kept heads
    continue the given ``last_ts`` in time order."""

    stop: int
    duplicates: int
    min_ts: int
    last_ts: int
    ordered: bool
    why: int


def fold(  # noqa: PLR0917 - mirrors the C signature, called once per batch and segment
    heads: list[EventHead | None],
    start: int,
    state_dicts: tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any]],
    window_end: int,
    room: int,
    kept: list[EventHead],
    last_ts: int,
) -> Folded:
    """Fold ``heads[start:]`` into the state (objects, tombstones, lifecycles, gaps) while they fit the
    open segment (before ``window_end``, at most ``room`` more), appending the new ones to ``kept``."""
    if _wirescan is None:
        return Folded(start, 0, -1, last_ts, True, FOLD_NEEDS_RULES)
    return Folded(*_wirescan.fold(heads, start, *state_dicts, window_end, room, kept, last_ts))
