"""The sink's state fold in C: :class:`~pipeline.store.state.ObjectState`'s duplicate rules, in bulk.

The fold is compiled into the wire package's extension (``pipeline/formats/wire/_wirescan.c``) beside
the scan, because it reads the heads the scan builds; its rules are the sink's, so its Python side
lives here. It takes the common cases only and stops at any head whose duplicate test needs the Python
rules, so results never differ, only speed (tests/unit/test_wire_native.py). Without the extension
:func:`fold` takes nothing and the compactor folds every head in Python.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pipeline.formats.wire import native
from pipeline.formats.wire.probe import EventHead

FOLD_END = 0
"""``fold`` went through every head."""
FOLD_SEGMENT_FULL = 1
"""``fold`` stopped before a head outside the open segment's window, or past its room."""
FOLD_NEEDS_RULES = 2
"""``fold`` stopped before a head whose duplicate test needs the Python rules."""


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
    if native.EXTENSION is None:
        return Folded(start, 0, -1, last_ts, True, FOLD_NEEDS_RULES)
    return Folded(*native.EXTENSION.fold(heads, start, *state_dicts, window_end, room, kept, last_ts))
