"""How long an HPA takes to act on a change of load, in trace time: the window a replay's autoscaled
owners are judged over (:mod:`pipeline.replay.report.fidelity`). Pure logic, no I/O.

From a change of a pod's usage to the HPA's decision: metrics-server sees it at its next scrape and
serves a CPU rate over two scrapes (a new pod has none before its second), so up to two resolutions;
the controller reads it at its next sync, up to one sync period. The behavior's stabilization windows
and policy periods come after that for both HPAs alike (the replay divides them by the speed), so they
delay both decisions equally and are not part of the difference.

The recorded HPA ran with the process timers as given (Kubernetes' and metrics-server's defaults: the
recording does not say otherwise), so it acted up to ``2 x 15 + 15 = 45`` s after a change. The
simulated one runs with the timers applied (divided by the speed, metrics-server no lower than the
local stack's 1 s floor; as deployed when the replay restarts nothing), which in trace time take
``speed`` times as long. Either may act first, so the reaction time is the longer of the two: on the
local stack the same 45 s up to x15, where every timer scales exactly.
"""

from __future__ import annotations

from pipeline.replay.hpa.timing import HpaProcessTimers


def wall_reaction_s(timers: HpaProcessTimers) -> float:
    """Seconds from a change of usage until an HPA running with ``timers`` can have acted on it."""
    return 2 * timers.metric_resolution_s + timers.sync_period_s


def reaction_time_ms(
    speed: float, applied: HpaProcessTimers, recorded: HpaProcessTimers | None = None
) -> float:
    """Trace ms either HPA may take to act on a change: the recorded one's (timers ``recorded``,
    default Kubernetes') or the simulated one's at ``speed`` (timers ``applied``), the longer."""
    recorded_s = wall_reaction_s(recorded or HpaProcessTimers())
    return max(recorded_s, wall_reaction_s(applied) * speed) * 1000.0
