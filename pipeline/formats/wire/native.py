"""The C ingest scan (``_wirescan.c``), with the Python probe as the fallback.

:mod:`pipeline.formats.wire._wirescan` (compiled from ``_wirescan.c`` when kubetape is installed) does,
per batch, what :class:`~pipeline.formats.wire.probe.WireProbe` does per event, for the common cases
only: anything it cannot decide is left to the probe (``scan`` answers None). So results never differ,
only speed (tests/unit/test_wire_native.py, tests/unit/test_wire_validity.py). The same extension holds
the sink's state fold (:mod:`pipeline.sink.native_fold`): both read the heads defined here, and one
build keeps them in step.

Without a C compiler at install time the extension is skipped (it is optional in setup.py) and
:data:`NATIVE` is False: callers then run the Python rules alone, several times slower. The sink logs
which path it runs.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from pipeline.formats.wire.probe import EventHead
from pipeline.formats.wire.skeleton import BodySkeleton
from pipeline.model.events import RV_MAX_DIGITS, TS_MAX_MS, Event, EventType

try:
    from pipeline.formats.wire import _wirescan  # type: ignore[attr-defined]  # a C extension, no stubs
except ImportError:  # pragma: no cover - only without a compiler at install time
    _wirescan = None

INGEST_RULES = 2
"""The version of the ingest rules (:mod:`pipeline.formats.wire.rules`) that ``_wirescan.c`` must
implement: raise both together whenever a rule changes."""
_LIMITS = {"TS_MAX_MS": TS_MAX_MS, "RV_MAX_DIGITS": RV_MAX_DIGITS, "INGEST_RULES": INGEST_RULES}
_STALE = _wirescan is not None and any(getattr(_wirescan, k, None) != v for k, v in _LIMITS.items())
if _STALE:  # pragma: no cover - a build whose rules differ from the definition must not be used
    warnings.warn(
        "pipeline.formats.wire._wirescan was built from another version of _wirescan.c (its rules or "
        "limits differ from pipeline.model.events); using the Python rules. Reinstall kubetape to "
        "rebuild it.",
        RuntimeWarning,
        stacklevel=1,
    )
    _wirescan = None

EXTENSION: Any = _wirescan
"""The loaded extension, or None (absent or stale): :mod:`pipeline.sink.native_fold` calls its fold."""
NATIVE: bool = _wirescan is not None
"""Whether the C extension is available."""

if _wirescan is not None:
    _wirescan.configure(
        EventHead, EventType.APPLIED, EventType.DELETED, EventType.POD_LIFECYCLE, EventType.GAP
    )
_light = getattr(_wirescan, "light", None)  # a build from before it has none: bodies are decoded
if _light is not None:
    _wirescan.configure_light(Event, tuple(f.name for f in dataclasses.fields(Event)), BodySkeleton)
LIGHT: bool = _light is not None
"""Whether :func:`light` can build events without their bodies."""


def scan(values: list[bytes | None]) -> tuple[list[EventHead | None], list[int]]:
    """Each value's head where the C scanner accepts it outright, else None; and the indexes of those
    Nones, for the probe to decide (it accepts them or raises naming the problem)."""
    if _wirescan is None:
        return [None] * len(values), list(range(len(values)))
    result: tuple[list[EventHead | None], list[int]] = _wirescan.scan(values)
    return result


def light(blob: bytes, count: int, labels: bool) -> tuple[list[Event | None], list[bytes], list[int]] | None:
    """The ``count`` events of a segment's event list without their bodies: for each the Event with a
    :class:`~.skeleton.BodySkeleton` (with the labels if ``labels``) where the C scan accepts it and
    its bytes are in msgpack's own form, else None (decode it whole); each event's bytes; the indexes
    of the Nones. None overall when the list is not ``count`` well-formed values, or without the C
    extension."""
    if _light is None:
        return None
    result: tuple[list[Event | None], list[bytes], list[int]] | None = _light(blob, count, labels)
    return result
