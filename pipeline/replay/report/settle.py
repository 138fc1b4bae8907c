"""How long a replay's pods may trail the recording, when nobody said (the default settle), and how far
the verdict may stretch it before a miss is a failure: both bounded by the trace itself.

A settle or a stretched settle as long as the steps a trace holds forgives a step that never came: the
sample after a skipped scale-down lies within one pod of the count the recording had a settle earlier.
At speed 10 the old default, three wall seconds, was 30 trace seconds, longer than the demo's 27-second
recording, so every sample matched some count and a replay whose peak was 6 beside a recorded 10 was
called held (issue 46). So the default is a tenth of the trace, at most :data:`DEFAULT_SETTLE_WALL_S`
of wall time and at least :data:`SETTLE_FLOOR_WALL_S` (what a busy two-core machine needs to turn a
change into Running pods: 0.6–0.9 wall s after a scale-down at load 15); where that floor is a large
part of the trace, the report says so (:func:`settle_warning`) and ``--max-lag`` is the way to a short
settle the machine can meet: the trace clock then waits for the cluster.
"""

from __future__ import annotations

DEFAULT_SETTLE_WALL_S = 3.0
"""The settle on a long trace without ``--settle`` or ``--max-lag``, in wall seconds at the replay's
speed: a second for the replayer's write and the sample, two for a simulated controller, the scheduler
and KWOK to turn a change into Running pods (which a recorded lifecycle includes, and ``spec.replicas``
does not)."""
SETTLE_FLOOR_WALL_S = 1.0
"""The shortest default settle, in wall seconds at the replay's speed: what the machine can meet."""
SETTLE_SPAN_FRACTION = 0.1
"""The default settle is at most this part of the trace (above the floor)."""
LARGE_SETTLE_FRACTION = 0.1
"""A settle beyond this part of the trace is named in the report: steps closer together are not
judged one by one."""
STRETCH_SPAN_FRACTION = 0.25
"""The verdict's stretched settles (``SETTLE_FACTORS``) stop at this part of the trace: a window a
quarter of the trace long forgives a skipped step of most traces, so a miss it needs is a failure."""


def default_settle_ms(speed: float, span_ms: float) -> float:
    """The settle (trace ms) of a replay at ``speed`` of a trace ``span_ms`` long, nobody having stated
    one: a tenth of the trace, within [:data:`SETTLE_FLOOR_WALL_S`, :data:`DEFAULT_SETTLE_WALL_S`] of
    wall time at the speed."""
    floor = SETTLE_FLOOR_WALL_S * speed * 1000.0
    ceiling = DEFAULT_SETTLE_WALL_S * speed * 1000.0
    return max(floor, min(ceiling, span_ms * SETTLE_SPAN_FRACTION))


def default_settle_source(speed: float, span_ms: float) -> str:
    """Where :func:`default_settle_ms` came from, in the report's words."""
    return (
        f"the default at speed {speed:g} for a {span_ms / 1000:g} s trace: a tenth of it, within "
        f"{SETTLE_FLOOR_WALL_S:g}..{DEFAULT_SETTLE_WALL_S:g} wall s"
    )


def longest_stretch_ms(settle_ms: float, span_ms: float) -> float:
    """The longest settle the verdict tries before calling a miss a failure: a quarter of the trace,
    never less than the stated settle (a trace of unknown span: no bound)."""
    if span_ms <= 0:
        return float("inf")
    return max(settle_ms, span_ms * STRETCH_SPAN_FRACTION)


def settle_warning(settle_ms: float, span_ms: float) -> str | None:
    """A sentence for the report when the settle covers a large part of the trace; None otherwise."""
    if span_ms <= 0 or settle_ms <= span_ms * LARGE_SETTLE_FRACTION:
        return None
    return (
        f"the settle ({settle_ms / 1000:g} s) covers {100 * settle_ms / span_ms:.0f}% of the "
        f"{span_ms / 1000:g} s trace: a step the recording held for less than that is not judged on "
        "its own; replay with --max-lag (the trace clock waits for the cluster) and a shorter --settle"
    )
