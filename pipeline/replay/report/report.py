"""The fidelity report of one replay: what was applied, how late, and the replay's pods beside the
recording's (in total and per recorded owner, see :mod:`pipeline.replay.report.fidelity`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.replay.clock.schedule import percentile, rounded_percentile
from pipeline.replay.report.fidelity import (
    BOUND_PODS,
    FidelityVerdict,
    OwnerFidelity,
    OwnerSample,
    Timeline,
    compare_owners,
    judge,
    stretched_settles,
    trace_instants,
)
from pipeline.replay.report.settle import longest_stretch_ms, settle_warning

MAX_SAMPLES = 20_000
"""Samples of the replay's pods kept (thinned beyond, see :meth:`ReplayReport.add_sample`)."""


@dataclass(frozen=True, slots=True)
class ReplayFailure:
    key: str
    ts_ms: int
    reason: str


@dataclass(slots=True)
class ReplayReport:
    """The fidelity report: what was applied, how late, and the replay's pods beside the recording's."""

    replay_name: str
    source: str
    speed: float
    steps: int = 0
    applied: int = 0
    deleted: int = 0
    deletes_missed: int = 0
    failed: int = 0
    retries: int = 0
    skipped_after_duration: int = 0
    not_started: int = 0
    gaps: int = 0
    failures: list[ReplayFailure] = field(default_factory=list)
    cluster_scoped: list[str] = field(default_factory=list)
    lateness_ms: list[float] = field(default_factory=list)
    """Every step's lateness, or a uniform sample of them on a long run (see ScheduleStats)."""
    lateness_count: int = 0
    lateness_max_ms: float | None = None
    replay_timeline: list[tuple[float, int, int]] = field(default_factory=list)
    """(trace offset ms, pods running, nodes used) sampled during the replay."""
    recorded_timeline: list[tuple[int, int]] = field(default_factory=list)
    recorded_by_owner: dict[str, Timeline] = field(default_factory=dict)
    """Pods running per recorded owner (its object key), from the recorded lifecycles."""
    owner_samples: list[OwnerSample] = field(default_factory=list)
    """Pods running per recorded owner, sampled during the replay."""
    settle_ms: float = 3000.0
    """Trace time a sample may trail the recording by (see :mod:`pipeline.replay.report.fidelity`)."""
    settle_from: str = "default"
    """Where the settle comes from (``--settle``, ``--max-lag``, or the default at the speed)."""
    resolution_wall_s: float = 1.0
    """Wall time the writes may run late and the samples be apart before the machine counts as behind."""
    desired_owners: frozenset[str] = frozenset()
    """Owners judged by the pods they asked for (``spec.replicas``), not by recorded lifecycles."""
    hpa_reactions: dict[str, float] = field(default_factory=dict)
    """Owners the simulated HPA decides, with its reaction time (trace ms): the window they are
    judged over, from that time on (see :mod:`pipeline.replay.report.fidelity`)."""
    wall_seconds: float = 0.0
    """From start to the last step's end (setup included, cleanup not)."""
    setup_seconds: float = 0.0
    """Creating the root, the virtual nodes and the namespaces, before trace time starts."""
    trace_span_ms: int = 0
    """Trace time the replay ran for: to :attr:`trace_end`, past its last event if that came earlier."""
    trace_end: str = "the trace's end"
    """Where the run's trace time ended: ``the trace's end`` (of the range exported or read),
    ``--duration``, or ``the live topic's end`` (following it, until stopped)."""
    last_event_ms: int | None = None
    """The last step's trace offset (None: no step, or following a live topic)."""
    stopped_early: bool = False
    largest_sample_gap_s: float = 0.0
    """The longest wall time between two samples of the replay's pods (a busy machine stretches it)."""
    convergence: dict[str, Any] | None = None
    """What convergence-aware time scaling did (None when it was off): see
    ``pipeline.replay.clock.governor``."""
    cleanup: str = "not run"
    speed_mode: str = "fixed"
    """``max`` at ``--speed max``: ``speed`` is then the speed the run achieved."""
    clock_path: list[tuple[float, float]] | None = None
    """At ``--speed max``, the trace clock's path: (wall s, trace ms) at each sample."""
    cluster_profile: dict[str, Any] | None = None
    """The simulated cluster's stated profile (``kubetape stack up --profile``); None: none stated."""
    autoscale: dict[str, Any] | None = None
    """An autoscaled replay's settings (given and applied) and figures (see ``autoscale_figures``)."""
    autoscale_summary: list[str] = field(default_factory=list)
    pod_autoscaling: dict[str, Any] | None = None
    hpa_writes_left_out: int = 0
    """Without ``--autoscaler hpa``: recorded HPA writes not applied (the recorded replicas are)."""
    """A replay with the simulated HPA deciding: the load model, the autoscaled owners, the HPA's
    settings as given and applied, the usage written (see pipeline.replay.hpa.replay)."""
    hooks: list[dict[str, Any]] = field(default_factory=list)
    """The run's hooks as they ran (``pipeline.replay.hooks.HookResult.to_json``), in order."""

    def add_sample(self, at_ms: float, running: int, nodes: int, by_owner: dict[str, int]) -> None:
        """One sample of the replay's pods. Past :data:`MAX_SAMPLES`, every other sample is dropped
        (half the resolution over the whole run), so a replay following a live topic stays bounded."""
        self.replay_timeline.append((at_ms, running, nodes))
        self.owner_samples.append(OwnerSample(at_ms, by_owner))
        if len(self.owner_samples) > MAX_SAMPLES:
            # the last sample stays: it is the replay's final state
            self.replay_timeline = [*self.replay_timeline[:-1:2], self.replay_timeline[-1]]
            self.owner_samples = [*self.owner_samples[:-1:2], self.owner_samples[-1]]

    def owner_fidelity(self, *, per_instant: bool = True) -> list[OwnerFidelity]:
        """Per owner, over the instants of trace time the replay was sampled at (see
        :func:`~pipeline.replay.report.fidelity.trace_instants`); ``per_instant=False``: over every sample,
        the clock's waits included (a benchmark's comparison)."""
        return compare_owners(
            self.recorded_by_owner,
            trace_instants(self.owner_samples) if per_instant else self.owner_samples,
            self.settle_ms,
            self.hpa_reactions,
        )

    def verdict(self) -> FidelityVerdict:
        """Held, degraded (the machine did not keep up), failed or unmeasured: see ``judge``."""
        return judge(
            self.recorded_by_owner,
            trace_instants(self.owner_samples),
            self.settle_ms,
            resolution_wall_s=self.resolution_wall_s,
            lateness_p99_ms=percentile(self.lateness_ms, 0.99),
            largest_sample_gap_s=self.largest_sample_gap_s,
            hpa_reactions=self.hpa_reactions,
            longest_settle_ms=longest_stretch_ms(self.settle_ms, self._bounding_span_ms()),
        )

    def _bounding_span_ms(self) -> float:
        """The trace's span, to bound the settle's stretch and warning by; 0 (unknown) when following
        a live topic, whose end is not known while it is judged."""
        return 0.0 if self.trace_end == "the live topic's end" else float(self.trace_span_ms)

    def settle_warning(self) -> str | None:
        """A sentence when the settle covers a large part of the trace (see
        :func:`~pipeline.replay.report.settle.settle_warning`)."""
        return settle_warning(self.settle_ms, self._bounding_span_ms())

    def to_json(self) -> dict[str, Any]:
        owners = self.owner_fidelity()
        verdict = self.verdict()
        lateness_max = (
            rounded_percentile(self.lateness_ms, 1.0)
            if self.lateness_max_ms is None
            else round(self.lateness_max_ms, 3)
        )

        # summary figures first, the long lists last: a reader that keeps only the first few KiB (a
        # Job pod's termination message is cut at 4 KiB) still gets every figure
        return {
            "replay_name": self.replay_name,
            "source": self.source,
            "speed": self.speed,
            "speed_mode": self.speed_mode,
            "cluster_profile": self.cluster_profile,
            "events": {
                "steps": self.steps,
                "applied": self.applied,
                "deleted": self.deleted,
                "deletes_missed": self.deletes_missed,
                "failed": self.failed,
                "retries": self.retries,
                "skipped_after_duration": self.skipped_after_duration,
                "not_started": self.not_started,
                "gaps_in_trace": self.gaps,
                "hpa_writes_left_out": self.hpa_writes_left_out,
            },
            "lateness_ms": {
                "p50": rounded_percentile(self.lateness_ms, 0.5),
                "p99": rounded_percentile(self.lateness_ms, 0.99),
                "max": lateness_max,
                "count": max(self.lateness_count, len(self.lateness_ms)),
            },
            "wall_seconds": round(self.wall_seconds, 3),
            "setup_seconds": round(self.setup_seconds, 3),
            "trace_span_ms": self.trace_span_ms,
            "trace_end": self.trace_end,
            "last_event_ms": self.last_event_ms,
            "stopped_early": self.stopped_early,
            "largest_sample_gap_seconds": round(self.largest_sample_gap_s, 3),
            "convergence": self.convergence,
            "cleanup": self.cleanup,
            "autoscale": self.autoscale,
            "pod_autoscaling": self.pod_autoscaling,
            "hooks": self.hooks,
            "failures": [{"key": f.key, "ts_ms": f.ts_ms, "reason": f.reason} for f in self.failures],
            "cluster_scoped_objects": self.cluster_scoped,
            "owner_fidelity": {
                "verdict": verdict.verdict,
                "reasons": list(verdict.reasons),
                "bound_pods": BOUND_PODS,
                "settle_ms": self.settle_ms,
                "settle_from": self.settle_from,
                "settle_warning": self.settle_warning(),
                "longest_settle_tried_ms": stretched_settles(
                    self.settle_ms, longest_stretch_ms(self.settle_ms, self._bounding_span_ms())
                )[-1],
                "settle_needed_ms": verdict.settle_needed_ms,
                "resolution_wall_s": self.resolution_wall_s,
                "owner_instants": sum(o.samples for o in owners),
                "owner_instants_within_bound": sum(o.within_one for o in owners),
                "wall_samples": len(self.owner_samples),
                "trace_instants": len(trace_instants(self.owner_samples)),
                "max_error": max((o.max_error for o in owners), default=0),
                "owners": [
                    {
                        **o.to_json(),
                        "truth": _truth(o.owner, self.desired_owners, self.hpa_reactions),
                    }
                    for o in owners
                ],
            },
            "timeline": {
                "replay": [
                    {"trace_ms": round(t), "pods_running": p, "nodes_used": n}
                    for t, p, n in self.replay_timeline
                ],
                "recorded": [{"trace_ms": t, "pods_running": p} for t, p in self.recorded_timeline],
                "trace_clock": None
                if self.clock_path is None
                else [{"wall_s": round(w, 3), "trace_ms": round(t)} for w, t in self.clock_path],
                "recorded_by_owner": {
                    owner: [{"trace_ms": t, "pods_running": p} for t, p in timeline]
                    for owner, timeline in sorted(self.recorded_by_owner.items())
                },
                "replay_by_owner": [
                    {"trace_ms": round(s.trace_ms), "pods_running": dict(sorted(s.running.items()))}
                    for s in self.owner_samples
                ],
            },
        }

    def summary(self) -> str:
        """A few readable lines for people, the fidelity verdict first."""
        lateness = self.to_json()["lateness_ms"]
        speed = f"speed {self.speed:g}" + (
            " (max: as fast as the cluster kept up)" if self.speed_mode == "max" else ""
        )
        lines = [
            f"replay {self.replay_name} of {self.source} at {speed}: "
            f"{self.wall_seconds:.1f} s wall for {self.trace_span_ms / 1000:.1f} s of trace"
            + (" (stopped early)" if self.stopped_early else self._end_words()),
            *self._profile_lines(),
            *self._fidelity_lines(),
            *self._convergence_lines(),
            *self._autoscale_lines(),
            *self._pod_autoscaling_lines(),
            f"  events: {self.applied} applied, {self.deleted} deleted, {self.failed} failed, "
            f"{self.deletes_missed} deletes of nothing, {self.skipped_after_duration + self.not_started} "
            f"not replayed, {self.retries} retries",
            f"  lateness ms: p50 {lateness['p50']}  p99 {lateness['p99']}  max {lateness['max']}",
            f"  virtual nodes used (peak): {max((n for _, _, n in self.replay_timeline), default=0)}",
            f"  cleanup: {self.cleanup}",
        ]
        for hook in self.hooks:
            if not hook["ok"]:
                lines.append(f"  HOOK FAILED {hook['point']} {' '.join(hook['command'])}: {hook['problem']}")
        if self.cluster_scoped:
            lines.append(f"  cluster-scoped objects applied as named: {', '.join(self.cluster_scoped[:10])}")
        for failure in self.failures[:20]:
            lines.append(f"  FAILED {failure.key} (trace ms {failure.ts_ms}): {failure.reason}")
        if len(self.failures) > 20:
            lines.append(f"  … and {len(self.failures) - 20} more failures (see the JSON report)")
        return "\n".join(lines)

    def _end_words(self) -> str:
        """Where trace time ended, when that was not at the last event."""
        if self.last_event_ms is None or self.last_event_ms >= self.trace_span_ms:
            return ""
        return f" (to {self.trace_end}; last event at {self.last_event_ms / 1000:.1f} s)"

    def _profile_lines(self) -> list[str]:
        if self.cluster_profile is None:
            return []
        line = f"  simulated cluster profile: {self.cluster_profile.get('profile')}"
        changes = self.cluster_profile.get("changes_scheduling") or []
        if changes:
            line += f"; settings that can change where pods land: {', '.join(map(str, changes))}"
        return [line]

    def _autoscale_lines(self) -> list[str]:
        if self.autoscale is None:
            return []
        lines = list(self.autoscale_summary)
        for setting in self.autoscale["settings"]:
            note = f" ({setting['note']})" if setting["note"] else ""
            lines.append(f"    {setting['name']}: {setting['given']} → {setting['applied']}{note}")
        return lines

    def _pod_autoscaling_lines(self) -> list[str]:
        hpa = self.pod_autoscaling
        if hpa is None:
            if not self.hpa_writes_left_out:
                return []
            return [
                f"  recorded HPAs not applied ({self.hpa_writes_left_out} write(s)): the replicas they chose "
                "are replayed as recorded; --autoscaler hpa lets the simulated HPA decide instead"
            ]
        owners = [o["owner"] for o in hpa["owners"]]
        lines = [
            f"  pod autoscaling: the simulated HPA decides {len(owners)} owner(s) "
            f"({', '.join(owners) or 'none: the trace holds no HPA'}); load model {hpa['load_model']}; "
            f"{hpa['usage_writes']} usage write(s), {hpa['usage_write_failures']} failed"
        ]
        for owner in hpa["owners"]:
            if not owner.get("readings"):
                lines.append(f"    {owner['owner']}: no recorded load; its pods use KWOK's default usage")
            if owner.get("gaps_held") or owner.get("gaps_before_any_load"):
                lines.append(
                    f"    {owner['owner']}: {owner.get('gaps_held', 0)} gap(s) in the recorded load held "
                    f"the last load; {owner.get('gaps_before_any_load', 0)} before any load was known"
                )
        pressure = (hpa.get("pressure") or {}).get("owners") or {}
        for owner, figures in pressure.items():
            target = figures["target_utilization_percent"]
            lines.append(
                f"    {owner}: {figures['pod_hours']:.4f} pod-hours; "
                + (f"{figures['above_target_seconds']:g} s above its {target:g} % target, " if target else "")
                + f"{figures['overload_seconds']:g} s above its requests, {figures['pending_pod_seconds']:g} "
                "pending-pod seconds (trace time)"
            )
        for setting in hpa["settings"]:
            note = f" ({setting['note']})" if setting["note"] else ""
            lines.append(f"    {setting['name']}: {setting['given']} → {setting['applied']}{note}")
        return lines

    def _convergence_lines(self) -> list[str]:
        if self.convergence is None:
            return []
        c = self.convergence
        achieved = c["achieved_speed"]["overall"]
        requested = c["achieved_speed"]["requested"]
        requested = requested if isinstance(requested, str) else format(requested, "g")
        line = (
            f"  time scaling: speed {requested} requested, "
            + ("achieved unknown" if achieved is None else f"{achieved:g} achieved")
            + f"; the trace clock waited for the cluster {c['holds']} time(s), {c['held_seconds']:g} s in all"
        )
        if c["bottleneck_share"]:
            shares = ", ".join(f"{k} {100 * v:.0f}%" for k, v in c["bottleneck_share"].items())
            line += f" (behind in: {shares})"
        lines = [line]
        lag = c["largest_lag"]
        if lag["owner"] is not None:
            behind = "off every count recorded" if lag["lag_ms"] is None else f"{lag['lag_ms'] / 1000:g} s"
            lines.append(
                f"    largest lag while the clock moved: {behind} ({lag['owner']} at trace "
                f"{lag['trace_ms'] / 1000:g} s) for --max-lag {c['max_lag_ms'] / 1000:g} s; the clock "
                f"covered at most {c['clock_period_ms'] / 1000:g} s of trace between two looks at the cluster"
            )
        if c["given_up_owners"]:
            lines.append(f"    never caught up: {', '.join(list(c['given_up_owners'])[:10])}")
        return lines

    def _fidelity_lines(self) -> list[str]:
        """The headline: per-owner fidelity and what it means.

        Totals over all owners are left out on purpose: the recording counts a pod until it is gone,
        the replay until it is terminating, so two totals taken at one instant differ during every
        rollout even when each owner is exactly right."""
        owners = self.owner_fidelity()
        verdict = self.verdict()
        if not owners:
            return [f"  fidelity: {verdict.verdict.upper()}: {'; '.join(verdict.reasons)}"]
        samples = sum(o.samples for o in owners)
        within = sum(o.within_one for o in owners)
        worst = max(owners, key=lambda o: o.max_error)
        truth = "recorded lifecycles"
        if self.desired_owners:
            truth = (
                f"recorded lifecycles, or for {len(self.desired_owners)} owner(s) without them the pods "
                "they asked for (spec.replicas)"
            )
        lines = [
            f"  fidelity: {verdict.verdict.upper()}: {len(owners)} recorded owner(s), "
            f"{within}/{samples} samples within {BOUND_PODS} pod ({100 * within / max(samples, 1):.2f}%), "
            f"largest error {worst.max_error} pod(s) ({worst.owner})",
            f"    (a sample compares an owner's Running pods in the replay with its recorded count over "
            f"the preceding {self.settle_ms / 1000:g} s of trace time (the settle, from {self.settle_from}), "
            "once per instant of trace time: while the trace clock stood still, the state the cluster "
            f"reached when it went on; recorded counts: {truth})",
        ]
        if self.hpa_reactions:
            reaction = max(self.hpa_reactions.values()) / 1000
            lines.append(
                f"    ({len(self.hpa_reactions)} owner(s) the simulated HPA decides: judged from "
                f"{reaction:g} s of trace time on (the HPA's reaction time), within {BOUND_PODS} pod "
                f"of the recorded replicas over {reaction:g} s either side)"
            )
        lines += [f"    {reason}" for reason in verdict.reasons]
        warning = self.settle_warning()
        if warning is not None:
            lines.append(f"    WARNING: {warning}")
        return lines


def _truth(owner: str, desired: frozenset[str], hpa_reactions: dict[str, float]) -> str:
    """What an owner's replay counts were compared with (the report's per-owner ``truth``)."""
    recorded = "desired pods" if owner in desired else "lifecycles"
    if owner in hpa_reactions:
        return f"{recorded}, as the recorded HPA chose them; judged after its reaction time"
    return recorded


@dataclass(frozen=True, slots=True)
class ReplayProgress:
    """A snapshot for progress output."""

    steps_done: int
    steps_total: int
    trace_ms: float
    wall_s: float
    failed: int
    pods_running: int
