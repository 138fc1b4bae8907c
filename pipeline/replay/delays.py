"""Lifecycle delays (:class:`~pipeline.model.lifecycle_delays.LifecycleDelays`) as the annotations the
stack's KWOK stages read (``pipeline/stack/resources/kwok-stages.yaml``).

The replayer puts them on every pod template and bare pod it applies, already divided by the replay's
speed, so KWOK waits wall time: at ×10 a 10 s pod-startup delay is ``1s``. Two stages use them:

* ``pod-pull-images`` takes a scheduled pod annotated :data:`IMAGE_PULL_DELAY` to "containers creating"
  after that delay;
* ``pod-ready`` then takes it to Running and Ready after :data:`STARTUP_DELAY` (a pod without that
  annotation, every pod of a replay without delays, at once).

A jitter is written as the longest delay (``…-max``: the delay plus the jitter) because KWOK draws the
delay uniformly between ``durationFrom`` and ``jitterDurationFrom``, and takes the latter alone when it is
not above the former. Zero values are not written at all (an absent annotation is no wait), so a replay
without delays annotates nothing and its pods take KWOK's shortest path.

At ``--speed max`` the delays are divided by the speed the clock starts at, as the pods' recorded
lifetimes are: an annotation is written once, when the object is applied, and cannot follow a speed that
changes afterwards.
"""

from __future__ import annotations

from pipeline.model.lifecycle_delays import LifecycleDelays

IMAGE_PULL_DELAY = "kubetape.dev/image-pull-delay"
IMAGE_PULL_DELAY_MAX = "kubetape.dev/image-pull-delay-max"
STARTUP_DELAY = "kubetape.dev/startup-delay"
STARTUP_DELAY_MAX = "kubetape.dev/startup-delay-max"
DELAY_ANNOTATIONS = (IMAGE_PULL_DELAY, IMAGE_PULL_DELAY_MAX, STARTUP_DELAY, STARTUP_DELAY_MAX)
"""Every annotation of this module: the replayer removes recorded ones it does not set itself."""


def format_wall_duration(seconds: float) -> str:
    """A Go duration (KWOK parses it with ``time.ParseDuration``) to the microsecond: ``1000ms``,
    ``0.5ms``; never an exponent, which Go would refuse."""
    micros = round(seconds * 1_000_000)
    whole, part = divmod(micros, 1000)
    return f"{whole}.{part:03d}".rstrip("0").rstrip(".") + "ms"


def delay_annotations(delays: LifecycleDelays, speed: float) -> dict[str, str]:
    """The annotations that make KWOK wait ``delays`` (trace time) at ``speed``, in wall time."""
    out: dict[str, str] = {}
    for delay_key, max_key, delay_s, jitter_s in (
        (IMAGE_PULL_DELAY, IMAGE_PULL_DELAY_MAX, delays.image_pull_s, delays.image_pull_jitter_s),
        (STARTUP_DELAY, STARTUP_DELAY_MAX, delays.startup_s, delays.startup_jitter_s),
    ):
        if delay_s <= 0 and jitter_s <= 0:
            continue
        out[delay_key] = format_wall_duration(delay_s / speed)
        if jitter_s > 0:
            out[max_key] = format_wall_duration((delay_s + jitter_s) / speed)
    return out
