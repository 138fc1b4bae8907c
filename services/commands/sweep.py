"""``kubetape sweep``: replay one trace under a grid of parameters, N repetitions each, into run
directories, and report the cost-vs-reliability Pareto frontier (JSON, text, and an HTML report).

The command turns flags into the grid and checks them before any replay runs; the sweep itself is
:mod:`services.sweep`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.model.errors import ConfigError
from pipeline.replay.autoscale.axes import (
    CONSOLIDATION_POLICIES,
    INSTANCE_FAMILY_LABEL,
    AutoscalerAxes,
    autoscaler_variants,
)
from pipeline.replay.autoscale.provider import PROVIDERS
from pipeline.replay.inputs import load_prices, read_node_pools
from services.settings import from_flags
from services.sweep import (
    DEFAULT_RELIABILITY,
    AutoscalerSweep,
    parse_node_option,
    render_sweep_text,
    run_sweep,
    write_sweep_outputs,
)


@dataclass(frozen=True, slots=True)
class SweepSettings:
    trace: Path
    kubeconfig: Path
    out: Path
    context: str | None = None
    speed: list[float] | None = None
    nodes: list[str] = field(default_factory=list)
    autoscaler: str | None = None
    nodepool: Path | None = None
    consolidation_policy: list[str] = field(default_factory=list)
    consolidate_after: list[str] = field(default_factory=list)
    instance_families: list[str] = field(default_factory=list)
    limit_cpu: list[str] = field(default_factory=list)
    prices: Path | None = None
    instance_types: Path | None = None
    stack_dir: Path | None = None
    max_lag: float | None = None
    repetitions: int = 3
    reliability: str = DEFAULT_RELIABILITY
    json: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", type=Path, required=True, help="trace to replay")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="kubeconfig of the simulated cluster")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--out", type=Path, required=True, help="directory for the run directories and reports"
    )
    parser.add_argument(
        "--speed",
        type=float,
        action="append",
        default=None,
        help="a speed of the grid (repeatable; default 10)",
    )
    parser.add_argument(
        "--nodes",
        action="append",
        default=[],
        metavar="SKELETON.yaml:N",
        help="a fixed node pool of the grid (repeatable), or 'none' for no virtual nodes",
    )
    autoscaler = parser.add_argument_group(
        "autoscaler axes",
        "with --autoscaler karpenter --nodepool POOL.yaml, every combination of the values below is a "
        "configuration beside the fixed pools (an axis without values keeps the file's setting)",
    )
    autoscaler.add_argument("--autoscaler", choices=sorted(PROVIDERS), default=None)
    autoscaler.add_argument(
        "--nodepool", type=Path, default=None, metavar="POOL.yaml", help="the Karpenter NodePools to vary"
    )
    autoscaler.add_argument(
        "--consolidation-policy", action="append", default=[], choices=list(CONSOLIDATION_POLICIES)
    )
    autoscaler.add_argument(
        "--consolidate-after", action="append", default=[], metavar="DURATION", help="e.g. 30s, 5m or Never"
    )
    autoscaler.add_argument(
        "--instance-families",
        action="append",
        default=[],
        metavar="F1,F2",
        help=f"families the NodePools may launch ({INSTANCE_FAMILY_LABEL} In F1,F2)",
    )
    autoscaler.add_argument("--limit-cpu", action="append", default=[], metavar="CPU", help="spec.limits.cpu")
    autoscaler.add_argument("--prices", type=Path, default=None, metavar="PRICES.yaml", help="$/hour by type")
    autoscaler.add_argument(
        "--instance-types",
        type=Path,
        default=None,
        metavar="TYPES.json",
        help="the instance types Karpenter offers (its KWOK provider's JSON); default: those of the Nodes "
        "the trace recorded (instance-type, zone, capacity labels), if any, as `kubetape replay` does",
    )
    autoscaler.add_argument(
        "--stack-dir",
        type=Path,
        default=None,
        help="the local stack whose Karpenter runs beside --kubeconfig (restarted with scaled timers)",
    )
    parser.add_argument(
        "--max-lag",
        type=float,
        default=None,
        metavar="SECONDS",
        help="hold the trace clock while the cluster is this far behind (as `kubetape replay --max-lag`; "
        "autoscaled sweeps want it: pods wait for Karpenter's nodes)",
    )
    parser.add_argument("--repetitions", type=int, default=3, help="replays per configuration (default 3)")
    parser.add_argument(
        "--reliability",
        default=DEFAULT_RELIABILITY,
        help=f"the run metric traded against node-hours (default {DEFAULT_RELIABILITY})",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of text")
    parser.set_defaults(settings=from_flags(SweepSettings), func=_run)


def _run(args: SweepSettings) -> int:
    from pipeline.analytics.compare import METRICS
    from pipeline.analytics.report_html import render_report
    from pipeline.model.speed import check_speed

    speeds = args.speed or [10.0]
    for speed in speeds:  # every configuration's speed, before any replay runs
        check_speed(speed, max_lag_s=args.max_lag)
    if args.repetitions < 1:
        raise ConfigError(f"--repetitions must be at least 1, got {args.repetitions}")
    if args.reliability not in METRICS:  # checked before any replay runs, not after all of them
        raise ConfigError(
            f"--reliability {args.reliability!r} is not a run metric; choose one of {', '.join(METRICS)}"
        )
    options = [parse_node_option(text) for text in args.nodes]
    autoscaler = _autoscaler_sweep(args)
    if not options and autoscaler is None:
        raise ConfigError("give the grid a fixed pool (--nodes SKELETON.yaml:N) or --autoscaler karpenter")
    result = asyncio.run(
        run_sweep(
            args.kubeconfig,
            args.trace,
            args.out,
            speeds=speeds,
            nodes=options,
            repetitions=args.repetitions,
            autoscaler=autoscaler,
            max_lag_s=args.max_lag,
            reliability=args.reliability,
            context=args.context,
        )
    )
    write_sweep_outputs(result, args.out, render_report)
    if args.json:
        print(json.dumps(result.document, indent=2))
    else:
        print(render_sweep_text(result))
        print(f"report: {args.out / 'report.html'}")
    return 0


def _autoscaler_sweep(args: SweepSettings) -> AutoscalerSweep | None:
    axes = AutoscalerAxes(
        consolidation_policies=args.consolidation_policy,
        consolidate_after=args.consolidate_after,
        instance_families=[text.split(",") for text in args.instance_families],
        cpu_limits=args.limit_cpu,
    )
    if args.autoscaler is None:
        varied = (args.consolidation_policy, args.consolidate_after, args.instance_families, args.limit_cpu)
        if args.nodepool is not None or args.instance_types is not None or any(varied):
            raise ConfigError(
                "--nodepool, --instance-types and the autoscaler axes vary Karpenter: "
                "add --autoscaler karpenter"
            )
        return None
    if args.nodepool is None:
        raise ConfigError("--autoscaler karpenter needs --nodepool POOL.yaml, the NodePools to vary")
    variants = autoscaler_variants(read_node_pools(args.nodepool), axes)
    prices = load_prices(args.prices) if args.prices is not None else None
    return AutoscalerSweep(variants, args.stack_dir, prices, args.instance_types)
