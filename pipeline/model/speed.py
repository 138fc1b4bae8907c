"""The rules of a replay's speed, checked in one place for every way a replay is asked for.

A replay runs at a fixed speed (trace seconds per wall second), or at ``max``: as fast as the simulated
cluster keeps up, which only the convergence governor measures (so it needs a maximum lag). An
autoscaler's timers are divided by one fixed speed, so an autoscaled replay needs one; a replay that
follows the live topic runs at speed 1. The command line and a Simulation's spec state these in their
own words (``--max-lag`` or ``spec.maxLag``), so each passes its :class:`SpeedWords`; the rules are the
same. The model layer holds them because both the replay stage and the controller check them, and
neither may import the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.model.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SpeedWords:
    """How one front end words each broken rule (``{speed}`` and ``{max_lag}`` are the values given)."""

    not_positive: str
    max_without_lag: str
    lag_not_positive: str
    autoscaled_at_max: str
    follow_not_at_one: str
    error: type[ConfigError] = ConfigError


FLAG_WORDS = SpeedWords(
    not_positive="--speed must be positive (or 'max'), got {speed}",
    max_without_lag="--speed max runs as fast as the simulated cluster keeps up, which the convergence "
    "governor measures: add --max-lag SECONDS (e.g. --max-lag 5)",
    lag_not_positive="--max-lag must be positive, got {max_lag}",
    autoscaled_at_max="--autoscaler divides Karpenter's timers by one fixed speed, which --speed max does "
    "not have: give --speed a number (e.g. 10)",
    follow_not_at_one="--follow shadows the live topic at speed 1; drop --speed",
)
"""The words of ``kubetape replay`` and ``kubetape sweep`` (and of the replay stage's own settings)."""


def check_speed(
    speed: float,
    *,
    max_speed: bool = False,
    max_lag_s: float | None = None,
    autoscaled: bool = False,
    follow: bool = False,
    words: SpeedWords = FLAG_WORDS,
) -> None:
    """Raise ``words.error`` naming the first rule the replay's speed breaks. At ``max_speed``,
    ``speed`` is where the clock starts."""
    if not math.isfinite(speed) or speed <= 0:
        raise words.error(words.not_positive.format(speed=speed, max_lag=max_lag_s))
    if max_lag_s is not None and not max_lag_s > 0:
        raise words.error(words.lag_not_positive.format(speed=speed, max_lag=max_lag_s))
    if max_speed and max_lag_s is None:
        raise words.error(words.max_without_lag.format(speed=speed, max_lag=max_lag_s))
    if max_speed and autoscaled:
        raise words.error(words.autoscaled_at_max.format(speed=speed, max_lag=max_lag_s))
    if follow and (max_speed or speed != 1.0):
        raise words.error(words.follow_not_at_one.format(speed=speed, max_lag=max_lag_s))
