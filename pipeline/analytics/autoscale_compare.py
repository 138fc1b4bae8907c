"""An autoscaled run beside a fixed-pool run of the same trace: what each cost and how well it served.

``kubetape compare`` adds this table whenever one of its runs was autoscaled (its report has an
``autoscale`` section). Per run: node-hours (from the run's timeline, the same measure for both kinds),
cost, pending→running p50/p99 (from the run's pod times, trace seconds, the same measure for both) and
the fidelity figures of :mod:`pipeline.analytics.compare`. An autoscaled run's cost is the replay's own
(its instance types' prices); a fixed pool's is its node-hours × ``node_price`` when one is given.
Runs of different traces are not comparable this way and are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.analytics.compare import Comparison, scheduling_delays
from pipeline.analytics.runs import Run
from pipeline.analytics.stats import percentile
from pipeline.model.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ProvisioningFigures:
    run: str
    provisioning: str
    """``karpenter (consolidation=…)`` or ``fixed node-skeleton:2``."""
    node_hours: float
    cost: float | None
    pending_to_running_p50_s: float | None
    pending_to_running_p99_s: float | None
    owner_error_max: float
    verdict: str

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "provisioning": self.provisioning,
            "node_hours": round(self.node_hours, 6),
            "cost": None if self.cost is None else round(self.cost, 6),
            "pending_to_running_p50_s": self.pending_to_running_p50_s,
            "pending_to_running_p99_s": self.pending_to_running_p99_s,
            "owner_error_max": self.owner_error_max,
            "verdict": self.verdict,
        }


def is_autoscaled(run: Run) -> bool:
    return run.report.get("autoscale") is not None


def _provisioning(run: Run) -> str:
    if is_autoscaled(run):
        settings = ", ".join(f"{k}={v}" for k, v in sorted(run.info.labels.items()) if k != "autoscaler")
        return f"karpenter ({settings})" if settings else "karpenter"
    pools = "+".join(f"{p.skeleton}:{p.count}" for p in run.info.node_pools)
    return f"fixed {pools}" if pools else "no nodes"


def provisioning_side_by_side(
    runs: Sequence[Run], comparison: Comparison, node_price: float | None = None
) -> list[ProvisioningFigures]:
    """One row per run; ConfigError when the runs replayed different traces."""
    traces = sorted({Path(run.info.trace).name for run in runs})
    if len(traces) > 1:
        raise ConfigError(
            f"an autoscaled run is compared with fixed-pool runs of the same trace, got runs of "
            f"{', '.join(traces)}: compare the runs of one trace at a time"
        )
    rows = []
    for run in runs:
        name = run.info.name
        metrics = comparison.per_run[name]
        if is_autoscaled(run):
            cost = run.report["autoscale"].get("cost")
        else:
            cost = None if node_price is None else metrics["node_hours"] * node_price
        delays = scheduling_delays(run.pods)
        rows.append(
            ProvisioningFigures(
                name,
                _provisioning(run),
                metrics["node_hours"],
                None if cost is None else float(cost),
                percentile(delays, 0.5),
                percentile(delays, 0.99),
                metrics["owner_error_max"],
                str(comparison.verdicts[name]["verdict"]),
            )
        )
    return rows


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render_side_by_side(rows: Sequence[ProvisioningFigures]) -> str:
    lines = [
        "autoscaler vs fixed pools (node-hours and pending->running in trace time; cost in $):",
        f"  {'run':<22} {'node-h':>8} {'cost':>8} {'p50 s':>6} {'p99 s':>6} {'err':>4} verdict  provisioning",
    ]
    for row in rows:
        cost = "-" if row.cost is None else f"{row.cost:.4f}"
        lines.append(
            f"  {row.run:<22} {row.node_hours:>8.4f} {cost:>8} {_seconds(row.pending_to_running_p50_s):>6} "
            f"{_seconds(row.pending_to_running_p99_s):>6} {row.owner_error_max:>4g} {row.verdict:<8} "
            f"{row.provisioning}"
        )
    return "\n".join(lines)
