"""Replay-time pod lifecycle delays as SimKube 2.7 names them: an image-pull delay and a pod-startup delay,
each with a jitter, read from ``kubetape replay``/``kubetape sim run`` flags and a Simulation's
``spec.lifecycleParams``. Applied by :mod:`pipeline.replay.delays`; here so the controller reads a
Simulation's delays with the same rules.

Values are **trace time** (time as the recorded cluster lived it): the replay divides them by its speed, as
it does everything else. A value is a duration (``2s``, ``500ms``, :mod:`pipeline.model.timespec`) or, as
SimKube's flags and spec take it, a bare whole number of **milliseconds** (``--pod-startup-delay 1000``):
these four are the only places kubetape reads a bare number as a duration, so that a SimKube user's command
lines and Simulation specs work unchanged.

A jitter adds an amount drawn uniformly from ``[0, jitter)``: the delay a pod gets lies in
``[delay, delay + jitter)``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.timespec import format_duration, parse_duration

SPEC_FIELDS = {
    "imagePullDelay": "image_pull_s",
    "imagePullJitter": "image_pull_jitter_s",
    "podStartupDelay": "startup_s",
    "podStartupJitter": "startup_jitter_s",
}
"""SimKube's ``spec.lifecycleParams`` keys and the :class:`LifecycleDelays` field each sets."""
FLAGS = {
    "--image-pull-delay": "image_pull_s",
    "--image-pull-jitter": "image_pull_jitter_s",
    "--pod-startup-delay": "startup_s",
    "--pod-startup-jitter": "startup_jitter_s",
}
"""SimKube's ``skctl run`` flags (also ``kubetape replay``'s and ``kubetape sim run``'s) and their fields."""
_WHOLE_MS = re.compile(r"[0-9]+")
_HELP = "write a duration such as 2s or 500ms, or whole milliseconds as SimKube takes them (e.g. 1000)"


@dataclass(frozen=True, slots=True)
class LifecycleDelays:
    """Trace seconds a replayed pod waits, after it is scheduled, before it runs: ``image_pull_s`` (plus up
    to ``image_pull_jitter_s``) as its images are pulled, then ``startup_s`` (plus up to
    ``startup_jitter_s``) as its containers start. All zero (the default): pods run at once."""

    image_pull_s: float = 0.0
    image_pull_jitter_s: float = 0.0
    startup_s: float = 0.0
    startup_jitter_s: float = 0.0

    def __post_init__(self) -> None:
        for flag, name in FLAGS.items():
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"{flag}: {value!r} must be a duration of 0 or more; {_HELP}")

    @property
    def any(self) -> bool:
        """Whether any pod waits at all."""
        return any(getattr(self, name) > 0 for name in FLAGS.values())


def parse_delay(value: Any, where: str) -> float:
    """Seconds of one delay: a duration (``2s``, ``500ms``) or whole milliseconds (``1000``, SimKube's
    unit), as a string or (in a spec) a number; ConfigError naming ``where`` otherwise."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {value!r} is not a duration; {_HELP}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{where}: {value} must not be negative; {_HELP}")
        return value / 1000.0
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {value!r} is not a duration; {_HELP}")
    text = value.strip()
    if _WHOLE_MS.fullmatch(text):
        return int(text) / 1000.0
    try:
        return parse_duration(text, where)
    except ConfigError:
        raise ConfigError(f"{where}: cannot read {value!r}; {_HELP}") from None


def parse_lifecycle_params(params: Any, where: str = "spec.lifecycleParams") -> LifecycleDelays:
    """A Simulation's ``spec.lifecycleParams`` (SimKube's shape: ``imagePullDelay``, ``imagePullJitter``,
    ``podStartupDelay``, ``podStartupJitter``); None: no delays."""
    if params is None:
        return LifecycleDelays()
    if not isinstance(params, Mapping):
        raise ConfigError(f"{where}: must be an object with {', '.join(SPEC_FIELDS)}")
    unknown = sorted(str(key) for key in params if key not in SPEC_FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown {', '.join(unknown)}; the fields are {', '.join(SPEC_FIELDS)}")
    values = {
        SPEC_FIELDS[key]: parse_delay(value, f"{where}.{key}")
        for key, value in params.items()
        if value is not None
    }
    return LifecycleDelays(**values)


def lifecycle_fields(delays: LifecycleDelays) -> dict[str, str]:
    """The delays as a replay document (and ``spec.lifecycleParams``) writes them, by key: durations,
    none for zero delays."""
    return {
        key: format_duration(getattr(delays, name))
        for key, name in SPEC_FIELDS.items()
        if getattr(delays, name) > 0
    }
