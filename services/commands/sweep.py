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
from pipeline.replay.hpa.load import LoadModel
from pipeline.replay.hpa.overrides import SETTINGS as HPA_SETTINGS
from pipeline.replay.hpa.overrides import hpa_variants, parse_axis_value
from pipeline.replay.inputs import load_prices, read_node_pools
from services.settings import from_flags
from services.sweep import (
    DEFAULT_COST,
    DEFAULT_RELIABILITY,
    HPA_COST,
    HPA_RELIABILITY,
    AutoscalerSweep,
    PodAutoscalerSweep,
    check_metric,
    parse_node_option,
    render_sweep_text,
    run_sweep,
    write_sweep_outputs,
)

HPA = "hpa"
"""``--autoscaler hpa``: the simulated HPA decides, under the HPA axes' values."""


@dataclass(frozen=True, slots=True)
class SweepSettings:
    trace: Path
    kubeconfig: Path
    out: Path
    context: str | None = None
    speed: list[float] | None = None
    nodes: list[str] = field(default_factory=list)
    autoscaler: list[str] = field(default_factory=list)
    load_model: str | None = None
    hpa_target: list[str] = field(default_factory=list)
    hpa_min_replicas: list[str] = field(default_factory=list)
    hpa_max_replicas: list[str] = field(default_factory=list)
    hpa_scale_up_window: list[str] = field(default_factory=list)
    hpa_scale_down_window: list[str] = field(default_factory=list)
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
    reliability: str | None = None
    cost: str | None = None
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
    autoscaler.add_argument(
        "--autoscaler",
        action="append",
        default=[],
        choices=[*sorted(PROVIDERS), HPA],
        help="karpenter: Karpenter provisions the nodes (its axes below); hpa: the simulated HPA decides "
        "the recorded HPAs' replicas from the recorded load (the HPA axes); both may be given",
    )
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
        help="the local stack whose Karpenter (and, with --autoscaler hpa, whose cluster's HPA "
        "processes) run beside --kubeconfig, restarted with scaled timers",
    )
    pods = parser.add_argument_group(
        "HPA axes",
        "with --autoscaler hpa, every combination of the values below is a configuration, crossed with "
        "the fixed pools or Karpenter's variants. Each value is [OWNER=]N: for the HPA scaling OWNER "
        "(apps/Deployment/NS/NAME, NS/NAME or NAME) or, without one, for every recorded HPA. Windows are "
        "trace seconds, divided by the speed like the recorded ones",
    )
    pods.add_argument(
        "--load-model",
        choices=[m.value for m in LoadModel],
        default=None,
        help="how the recorded load becomes each simulated pod's usage (as `kubetape replay`)",
    )
    hpa_help = {
        "target_utilization": "the CPU target utilization, percent of the pods' request",
        "min_replicas": "spec.minReplicas",
        "max_replicas": "spec.maxReplicas",
        "scale_up_window_s": "spec.behavior.scaleUp.stabilizationWindowSeconds",
        "scale_down_window_s": "spec.behavior.scaleDown.stabilizationWindowSeconds",
    }
    for setting, (flag, _, _) in HPA_SETTINGS.items():
        pods.add_argument(flag, action="append", default=[], metavar="[OWNER=]N", help=hpa_help[setting])
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
        default=None,
        help=f"the run metric traded against the cost (default {DEFAULT_RELIABILITY}; with --autoscaler "
        f"hpa, {HPA_RELIABILITY})",
    )
    parser.add_argument(
        "--cost",
        default=None,
        help=f"the run metric that is the cost (default {DEFAULT_COST}; with --autoscaler hpa on fixed "
        f"pools, {HPA_COST})",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of text")
    parser.set_defaults(settings=from_flags(SweepSettings), func=_run)


def _run(args: SweepSettings) -> int:
    from pipeline.analytics.report_html import render_report
    from pipeline.model.speed import check_speed

    speeds = args.speed or [10.0]
    for speed in speeds:  # every configuration's speed, before any replay runs
        check_speed(speed, max_lag_s=args.max_lag)
    if args.repetitions < 1:
        raise ConfigError(f"--repetitions must be at least 1, got {args.repetitions}")
    options = [parse_node_option(text) for text in args.nodes]
    autoscaler = _autoscaler_sweep(args)
    pod_autoscaler = _pod_autoscaler_sweep(args)
    if not options and autoscaler is None:
        raise ConfigError("give the grid a fixed pool (--nodes SKELETON.yaml:N) or --autoscaler karpenter")
    hpa_on_fixed_pools = pod_autoscaler is not None and autoscaler is None
    reliability = args.reliability or (HPA_RELIABILITY if pod_autoscaler else DEFAULT_RELIABILITY)
    cost = args.cost or (HPA_COST if hpa_on_fixed_pools else DEFAULT_COST)
    check_metric("--reliability", reliability)  # before any replay runs, not after all of them
    check_metric("--cost", cost)
    result = asyncio.run(
        run_sweep(
            args.kubeconfig,
            args.trace,
            args.out,
            speeds=speeds,
            nodes=options,
            repetitions=args.repetitions,
            autoscaler=autoscaler,
            pod_autoscaler=pod_autoscaler,
            max_lag_s=args.max_lag,
            reliability=reliability,
            cost=cost,
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
    providers = [a for a in args.autoscaler if a != HPA]
    if len(providers) > 1:
        raise ConfigError(f"--autoscaler: one node autoscaler at a time, got {', '.join(providers)}")
    if not providers:
        varied = (args.consolidation_policy, args.consolidate_after, args.instance_families, args.limit_cpu)
        if args.nodepool is not None or args.instance_types is not None or any(varied):
            raise ConfigError(
                "--nodepool, --instance-types and the autoscaler axes vary Karpenter: "
                "add --autoscaler karpenter"
            )
        return None
    if args.nodepool is None:
        raise ConfigError(f"--autoscaler {providers[0]} needs --nodepool POOL.yaml, the NodePools to vary")
    variants = autoscaler_variants(read_node_pools(args.nodepool), axes)
    prices = load_prices(args.prices) if args.prices is not None else None
    return AutoscalerSweep(variants, args.stack_dir, prices, args.instance_types)


def _pod_autoscaler_sweep(args: SweepSettings) -> PodAutoscalerSweep | None:
    given = {
        "target_utilization": args.hpa_target,
        "min_replicas": args.hpa_min_replicas,
        "max_replicas": args.hpa_max_replicas,
        "scale_up_window_s": args.hpa_scale_up_window,
        "scale_down_window_s": args.hpa_scale_down_window,
    }
    values = [parse_axis_value(setting, text) for setting, texts in given.items() for text in texts]
    if HPA not in args.autoscaler:
        if values or args.load_model is not None:
            raise ConfigError("--load-model and the HPA axes (--hpa-*) vary the HPA: add --autoscaler hpa")
        return None
    model = LoadModel.parse(args.load_model or LoadModel.CONSERVE.value)
    return PodAutoscalerSweep(hpa_variants(values), model, stack_dir=args.stack_dir)
