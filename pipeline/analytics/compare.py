"""Comparing runs: each replay against its recording (fidelity), and configurations against each other.

Per run (:func:`run_metrics`), from its timelines in trace seconds:

* ``node_hours`` — nodes present, summed over trace seconds, in hours (the cost of a configuration);
* ``pod_hours`` — pods running, likewise (the cost of an HPA's decisions);
* ``pending_pod_seconds`` — pods pending, summed over trace seconds (unreliability);
* ``overload_seconds`` / ``above_target_seconds`` — with the simulated HPA deciding, the trace seconds
  each autoscaled owner's pods spent above 100 % of their CPU requests / above its HPA's target,
  summed over owners, from the replay's own measure of the load it drove (the report's
  ``pod_autoscaling.pressure``: :mod:`pipeline.replay.hpa.pressure`); 0 for a run without it;
* ``peak_running``, ``scheduling_delay_p50_s``/``p95_s`` — from the replay's pod times;
* ``owner_error_max`` / ``owner_error_mean`` — per-owner running-pod error against the recording: the
  replayer's own figures where its report has them (:func:`run_owner_errors`), else the timelines'
  (the recorded pods, or what each owner asked for where none of its pods were recorded:
  :func:`recorded_truth`).

The per-owner error at second ``t`` is the distance of the replay's count to the range the recording
took over ``[t − window, t + window]``: a replay trails the recording by the simulated controllers'
reaction time, which at speed S is S times longer in trace time, and leads it where the recording
shows a pod pending that the simulation starts at once; so the window defaults to S trace seconds
(one wall second) either way. A configuration is the set of runs sharing ``RunInfo.config``; a difference
between two configurations is called only when its Welch t-interval excludes zero.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.analytics.runs import Run
from pipeline.analytics.stats import Interval, difference_interval, mean_interval, percentile
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, PodTimes, TimelineRow

METRICS = (
    "node_hours",
    "pending_pod_seconds",
    "pod_hours",
    "overload_seconds",
    "above_target_seconds",
    "peak_running",
    "scheduling_delay_p50_s",
    "scheduling_delay_p95_s",
    "owner_error_max",
    "owner_error_mean",
)
"""Every per-run metric; all of them are better when lower except ``peak_running``."""


def series(rows: Sequence[TimelineRow], owner: str, column: str) -> dict[int, float]:
    """``column`` per second for ``owner`` (a second without a row for the owner is 0)."""
    return {row.second: float(getattr(row, column)) for row in rows if row.owner == owner}


def recorded_truth(rows: Sequence[TimelineRow], owner: str) -> dict[int, float]:
    """The pods ``owner`` ran per second of a recording: its recorded running pods, or the pods it
    asked for (``desired``) when none of its pods were recorded (lifecycles off; SimKube traces hold no
    pods at all). The replayer judges its own samples by the same rule."""
    mine = [row for row in rows if row.owner == owner]
    pods_recorded = any(row.pending or row.running or row.succeeded or row.failed for row in mine)
    if pods_recorded or all(row.desired is None for row in mine):
        return {row.second: float(row.running) for row in mine}
    return {row.second: float(row.desired or 0) for row in mine}


def owners_of(rows: Sequence[TimelineRow]) -> set[str]:
    return {row.owner for row in rows if row.owner != CLUSTER_OWNER}


@dataclass(frozen=True, slots=True)
class OwnerError:
    owner: str
    max_error: float
    mean_error: float
    seconds: int
    recorded_peak: float
    replay_peak: float

    def to_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "max_error": self.max_error,
            "mean_error": round(self.mean_error, 4),
            "seconds": self.seconds,
            "recorded_peak": self.recorded_peak,
            "replay_peak": self.replay_peak,
        }


def owner_errors(
    recorded: Sequence[TimelineRow], replay: Sequence[TimelineRow], window_s: int
) -> list[OwnerError]:
    """Per owner: the running-pod error of the replay against the recording (see the module doc)."""
    seconds = sorted({row.second for row in replay} | {row.second for row in recorded})
    if not seconds:
        return []
    out = []
    for owner in sorted(owners_of(recorded) | owners_of(replay)):
        rec, rep = recorded_truth(recorded, owner), series(replay, owner, "running")
        errors = []
        for t in range(seconds[0], seconds[-1] + 1):
            # before the trace nothing the replay creates existed (0 pods); after its end, unknown
            near = range(t - window_s, min(t + window_s, seconds[-1]) + 1)
            window = [rec.get(s, 0.0) for s in near]
            value = rep.get(t, 0.0)
            errors.append(max(min(window) - value, value - max(window), 0.0))
        out.append(
            OwnerError(
                owner,
                max(errors),
                sum(errors) / len(errors),
                len(errors),
                max(rec.values(), default=0.0),
                max(rep.values(), default=0.0),
            )
        )
    return out


def run_owner_errors(run: Run, window_s: int | None = None) -> list[OwnerError]:
    """A run's per-owner errors: the replayer's own, where its report has them, else the timelines'.

    The replayer samples its pods often and judges them against the recording (lifecycles, or the pods
    each owner asked for) with its verdict on whether the machine kept up; the run's timeline is
    observed beside the replay at a coarser grain. One replay must not get two different fidelity
    figures, so the replayer's measure wins; the timeline measure serves runs without one. An explicit
    ``window_s`` (``kubetape compare --window``) asks for the timeline measure at that window."""
    owners = (run.report.get("owner_fidelity") or {}).get("owners")
    if owners is None or window_s is not None:
        window = window_s if window_s is not None else max(round(run.info.speed), 1)
        return owner_errors(run.recorded, run.timeline, window)
    return [
        OwnerError(
            str(o["owner"]),
            float(o["max_error"]),
            float(o.get("mean_error", 0.0)),
            int(o.get("samples", 0)),
            float(o.get("recorded_peak", 0)),
            float(o.get("replay_peak", 0)),
        )
        for o in owners
    ]


def scheduling_delays(pods: Sequence[PodTimes]) -> list[float]:
    return [d for d in (p.scheduling_delay_s for p in pods) if d is not None]


def run_metrics(run: Run, window_s: int | None = None) -> dict[str, float]:
    """The per-run metrics named in :data:`METRICS` (delays are 0 when no pod ran)."""
    nodes = series(run.timeline, CLUSTER_OWNER, "nodes")
    pending = series(run.timeline, CLUSTER_OWNER, "pending")
    running = series(run.timeline, CLUSTER_OWNER, "running")
    delays = scheduling_delays(run.pods)
    errors = run_owner_errors(run, window_s)
    pressure = (run.report.get("pod_autoscaling") or {}).get("pressure") or {}
    return {
        "node_hours": sum(nodes.values()) / 3600,
        "pod_hours": sum(running.values()) / 3600,
        "pending_pod_seconds": sum(pending.values()),
        "overload_seconds": float(pressure.get("overload_seconds", 0.0)),
        "above_target_seconds": float(pressure.get("above_target_seconds", 0.0)),
        "peak_running": max(running.values(), default=0.0),
        "scheduling_delay_p50_s": percentile(delays, 0.5) or 0.0,
        "scheduling_delay_p95_s": percentile(delays, 0.95) or 0.0,
        "owner_error_max": max((e.max_error for e in errors), default=0.0),
        "owner_error_mean": sum(e.mean_error for e in errors) / len(errors) if errors else 0.0,
    }


@dataclass(frozen=True, slots=True)
class ConfigSummary:
    config: str
    runs: list[str]
    metrics: dict[str, Interval]

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "runs": self.runs,
            "metrics": {name: interval.to_json() for name, interval in self.metrics.items()},
        }


@dataclass(frozen=True, slots=True)
class Difference:
    baseline: str
    config: str
    metric: str
    interval: Interval

    @property
    def significant(self) -> bool:
        return self.interval.excludes_zero

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "config": self.config,
            "metric": self.metric,
            "difference": self.interval.to_json(),
            "significant": self.significant,
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything ``kubetape compare`` reports."""

    per_run: dict[str, dict[str, float]]
    fidelity: dict[str, list[OwnerError]]
    delays: dict[str, dict[str, float | None]]
    nodes: dict[str, dict[str, float]]
    configs: list[ConfigSummary]
    differences: list[Difference]
    confidence: float
    verdicts: dict[str, dict[str, Any]]
    """Per run, the replayer's own fidelity verdict (held, degraded, failed, unmeasured) and reasons."""

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "confidence": self.confidence,
            "runs": {name: {k: round(v, 4) for k, v in m.items()} for name, m in self.per_run.items()},
            "fidelity": {
                name: {
                    "owner_error_max": max((e.max_error for e in errors), default=0.0),
                    "replay_verdict": self.verdicts[name],
                    "owners": [e.to_json() for e in errors],
                    "scheduling_delay_s": self.delays[name],
                    "nodes": self.nodes[name],
                }
                for name, errors in self.fidelity.items()
            },
            "configs": [c.to_json() for c in self.configs],
            "differences": [d.to_json() for d in self.differences],
        }


def _delay_summary(pods: Sequence[PodTimes]) -> dict[str, float | None]:
    delays = scheduling_delays(pods)
    return {
        "count": float(len(delays)),
        "p50": percentile(delays, 0.5),
        "p90": percentile(delays, 0.9),
        "max": max(delays, default=None),
    }


def compare_runs(runs: Sequence[Run], confidence: float = 0.95, window_s: int | None = None) -> Comparison:
    """Fidelity of each run and the differences of every configuration against the first one."""
    per_run: dict[str, dict[str, float]] = {}
    fidelity: dict[str, list[OwnerError]] = {}
    delays: dict[str, dict[str, float | None]] = {}
    nodes: dict[str, dict[str, float]] = {}
    verdicts: dict[str, dict[str, Any]] = {}
    by_config: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        name = run.info.name
        per_run[name] = run_metrics(run, window_s)
        fidelity[name] = run_owner_errors(run, window_s)
        delays[name] = {
            **{f"replay_{k}": v for k, v in _delay_summary(run.pods).items()},
            **{f"recorded_{k}": v for k, v in _delay_summary(run.recorded_pods).items()},
        }
        replay_nodes = series(run.timeline, CLUSTER_OWNER, "nodes")
        recorded_nodes = series(run.recorded, CLUSTER_OWNER, "nodes")
        nodes[name] = {
            "replay_mean": sum(replay_nodes.values()) / len(replay_nodes) if replay_nodes else 0.0,
            "replay_max": max(replay_nodes.values(), default=0.0),
            "recorded_mean": sum(recorded_nodes.values()) / len(recorded_nodes) if recorded_nodes else 0.0,
            "recorded_max": max(recorded_nodes.values(), default=0.0),
        }
        verdicts[name] = replay_verdict(run.report)
        by_config[run.info.config].append(name)
    configs = [
        ConfigSummary(
            config,
            names,
            {m: mean_interval([per_run[n][m] for n in names], confidence) for m in METRICS},
        )
        for config, names in by_config.items()
    ]
    differences = []
    if configs:
        baseline = configs[0]
        for other in configs[1:]:
            for metric in METRICS:
                interval = difference_interval(
                    [per_run[n][metric] for n in baseline.runs],
                    [per_run[n][metric] for n in other.runs],
                    confidence,
                )
                differences.append(Difference(baseline.config, other.config, metric, interval))
    return Comparison(per_run, fidelity, delays, nodes, configs, differences, confidence, verdicts)


def replay_verdict(report: Mapping[str, Any]) -> dict[str, Any]:
    """The replayer's verdict from a run's report: whether the machine kept up is something only the
    replayer saw (its lateness, the cluster's convergence), so compare passes it on beside its own
    timeline figures rather than guessing it from them."""
    fidelity = report.get("owner_fidelity") or {}
    return {
        "verdict": fidelity.get("verdict", "unknown"),
        "reasons": list(fidelity.get("reasons") or ()),
        "settle_ms": fidelity.get("settle_ms"),
    }


def _fmt(interval: Interval) -> str:
    if interval.low is None or interval.high is None:
        return f"{interval.estimate:.3g} (n={interval.samples}, no interval)"
    return f"{interval.estimate:.3g} [{interval.low:.3g}, {interval.high:.3g}] (n={interval.samples})"


def render_text(comparison: Comparison) -> str:
    """The comparison for people: fidelity per run, then configurations and the real differences."""
    lines = ["fidelity (replay vs its recording):"]
    for name, errors in comparison.fidelity.items():
        worst = max(errors, key=lambda e: e.max_error, default=None)
        delay = comparison.delays[name]
        node = comparison.nodes[name]
        lines.append(
            f"  {name}: owner pod-count error max {worst.max_error:g} ({worst.owner})"
            if worst
            else f"  {name}: no pods in the recording or the replay"
        )
        replayer = comparison.verdicts[name]
        lines.append(f"    replayer's verdict: {replayer['verdict']}")
        lines += [f"      {reason}" for reason in replayer["reasons"]]
        p50, recorded_p50 = delay["replay_p50"], delay["recorded_p50"]
        lines.append(
            "    scheduling delay p50: replay "
            + ("-" if p50 is None else f"{p50:.2f} s")
            + ", recorded "
            + ("-" if recorded_p50 is None else f"{recorded_p50:.2f} s")
            + f"; nodes mean: replay {node['replay_mean']:.2f}, recorded {node['recorded_mean']:.2f}"
        )
    confidence = f"{comparison.confidence:.0%}"
    lines.append(f"configurations (mean [{confidence} t-interval]):")
    for summary in comparison.configs:
        lines.append(f"  {summary.config}: {len(summary.runs)} run(s)")
        for metric, interval in summary.metrics.items():
            lines.append(f"    {metric}: {_fmt(interval)}")
    if comparison.differences:
        lines.append(
            f"differences against {comparison.configs[0].config} (called when the interval excludes 0):"
        )
        for diff in comparison.differences:
            verdict = "REAL" if diff.significant else "not significant"
            lines.append(f"  {diff.config} {diff.metric}: {_fmt(diff.interval)} {verdict}")
    return "\n".join(lines)


def worst_owner_error(comparison: Comparison) -> Mapping[str, float]:
    """Per run, the largest per-owner error (what a fidelity threshold is checked against)."""
    return {
        name: max((e.max_error for e in errors), default=0.0) for name, errors in comparison.fidelity.items()
    }
