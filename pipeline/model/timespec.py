"""The one grammar of times and durations that users write, on the command line and in a Simulation.

A **duration** is one or more ``<number><unit>`` parts without spaces, units ``ms``, ``s``, ``m``, ``h``
and ``d``: ``90s``, ``10m``, ``1h30m``, ``1.5s``, ``250ms``, ``7d``. A bare number is refused: seconds
or milliseconds is exactly the mistake a unit prevents. Values handed to a Go program (Karpenter's
NodePool timers) use :func:`parse_go_duration`, the same grammar without days, as Go has none.

A **time** is ``now``, a duration before now (``-30m``, ``-1h30m``), epoch milliseconds
(``1763700000000``) or ISO-8601 with a timezone (``2026-11-21T10:00:00Z``); a time without a timezone
is refused rather than guessed.

Arithmetic is exact (decimal parts, integer milliseconds), so what :func:`format_duration` and
:func:`format_time` write reads back to the same value. Bad input raises :class:`ConfigError` naming
where it was given and how to write it.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pipeline.model.errors import ConfigError

DURATION_UNITS_S: dict[str, int] = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
"""Seconds per unit (``ms`` is the thousandth of ``s``)."""
DURATION_PATTERN = r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+"
"""A duration as a regular expression, for parsers that must tell ``-30m`` from an option (argparse)."""
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_DIGITS = re.compile(r"[0-9]+")  # str.isdigit() also takes '²' and other digits int() refuses
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
_DURATION_HELP = "write it like 90s, 10m or 1h30m (units ms, s, m, h, d)"
_GO_HELP = "use Go duration syntax such as 30s, 5m or 1h30m (units ms, s, m, h; no days)"
_TIME_HELP = (
    "use now, a relative time like -30m or -2h, epoch milliseconds, or ISO-8601 such as 2026-11-21T10:00:00Z"
)


def parse_duration(text: str, where: str = "duration") -> float:
    """Seconds of a duration (``90s``, ``1h30m``, ``250ms``, ``7d``); ConfigError naming ``where``."""
    return float(_duration_s(text, where, _DURATION_HELP, days=True))


def parse_go_duration(text: str, where: str) -> float:
    """Seconds of a duration Go's ``time.ParseDuration`` reads too (no days); ConfigError otherwise."""
    return float(_duration_s(text, where, _GO_HELP, days=False))


def format_duration(seconds: float) -> str:
    """The shortest form of ``seconds`` (to the millisecond) this grammar reads back: ``1h30m``, ``250ms``,
    ``0s``. Days are written as hours, which Go reads as well."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration is a finite number of seconds, at least 0; got {seconds!r}")
    ms = round(seconds * 1000)
    parts = []
    for unit, unit_ms in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, unit_ms)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def parse_time(text: str, now_ms: int | None = None, *, where: str = "time") -> int:
    """Milliseconds since the epoch of ``now``, ``-30m`` (before ``now_ms``, the clock's now by default),
    epoch milliseconds or ISO-8601 with a timezone; ConfigError naming ``where`` otherwise."""
    value = text.strip()
    if value == "now":
        return _now_ms() if now_ms is None else now_ms
    if value.startswith("-"):
        try:
            before_ms = round(_duration_s(value[1:], where, _DURATION_HELP, days=True) * 1000)
        except ConfigError:
            raise ConfigError(f"cannot read {where} {text!r} as a time: {_TIME_HELP}") from None
        return (_now_ms() if now_ms is None else now_ms) - before_ms
    if _DIGITS.fullmatch(value):
        return int(value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"cannot read {where} {text!r} as a time: {_TIME_HELP}") from None
    if parsed.tzinfo is None:
        raise ConfigError(f"{where} {text!r} has no timezone; add Z or +00:00")
    return (parsed - _EPOCH) // _ONE_MS  # exact: float seconds times 1000 can land one below


def check_time(text: str, where: str = "time") -> str:
    """``text``, stripped, once it reads as a time; for a spec that is resolved later, when ``now`` is
    the time the reading starts."""
    parse_time(text, 0, where=where)
    return text.strip()


def format_time(epoch_ms: int) -> str:
    """ISO-8601 in UTC to the millisecond (``2026-11-21T10:00:00.000Z``), as :func:`parse_time` reads it."""
    moment = _EPOCH + timedelta(milliseconds=epoch_ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _duration_s(text: str, where: str, help_text: str, *, days: bool) -> Decimal:
    value = text.strip()
    total = Decimal(0)
    position = 0
    for match in _PART.finditer(value):
        number, unit = match.groups()
        if match.start() != position or (unit == "d" and not days):
            break
        total += Decimal(number) / 1000 if unit == "ms" else Decimal(number) * DURATION_UNITS_S[unit]
        position = match.end()
    if not value or position != len(value):
        raise ConfigError(f"{_prefix(where)}{text!r} is not a duration; {help_text}")
    if not math.isfinite(float(total)):
        raise ConfigError(f"{_prefix(where)}{text!r} is too long a duration to count in seconds")
    return total


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


def _now_ms() -> int:
    return (datetime.now(UTC) - _EPOCH) // _ONE_MS
