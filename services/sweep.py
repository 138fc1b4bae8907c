"""The sweep behind ``kubetape sweep``: replay one trace under a grid of parameters, N repetitions each,
into run directories, and find the cost-vs-reliability Pareto frontier (JSON, text, and an HTML report).

Each replay becomes a run directory (:mod:`pipeline.analytics.runs`). The simulated cluster is observed
by listing the replay's pods, nodes and pod controllers (label ``kubetape.dev/replay=<run>``) every trace
second while the replayer runs; the listings are folded by the same timeline code that folds the
recording (:mod:`pipeline.analytics.snapshots`). Polling was chosen over running ``kubetape watch``
on the simulated cluster: it needs no Kafka round trip per run and sees pod phases (Pending, Running)
that the watcher publishes only as lifecycles. Replays run one after another: virtual nodes of
concurrent replays would share their pods.

Autoscaler settings are axes too (``--autoscaler karpenter --nodepool POOL.yaml`` with
``--consolidation-policy``, ``--consolidate-after``, ``--instance-families``, ``--limit-cpu``): each
combination of their values is a configuration beside the fixed pools, starting from no nodes, its
NodePools and the local Karpenter's timers scaled like ``kubetape replay`` does. Karpenter's nodes carry
the replay label, so the observer counts them like fixed ones and node-hours compare across both. A
run ends with the trace's last event: what happens after it (consolidation in a quiet tail) counts only
if the trace records something at its end.

The recorded HPAs' settings are axes too (``--autoscaler hpa`` with ``--hpa-target``,
``--hpa-min-replicas``, ``--hpa-max-replicas``, ``--hpa-scale-up-window``, ``--hpa-scale-down-window``,
each ``[OWNER=]VALUE``): each combination is replayed with the simulated HPA deciding under those
settings (:mod:`pipeline.replay.hpa.overrides`), crossed with the fixed pools or Karpenter's variants.
Such a run's report measures the load it drove (seconds above the HPA's target and above the requests:
:mod:`pipeline.replay.hpa.pressure`), which the sweep trades against pod-hours by default.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.analytics.runs import NodePool, Run, RunInfo
from pipeline.model.errors import ConfigError
from pipeline.replay.autoscale.axes import (
    AutoscalerVariant,
)
from pipeline.replay.hpa.load import LoadModel
from pipeline.replay.inputs import parse_nodes

if TYPE_CHECKING:  # the CLI imports the replay and Kubernetes modules only when a sweep runs
    from pipeline.analytics.snapshots import SnapshotEvents
    from pipeline.analytics.timeline import TimelineFolder
    from pipeline.analytics.timeline_rows import TimelineRow
    from pipeline.io.kube.client import KubeClient
    from pipeline.model.events import Event
    from pipeline.model.usage import UsageSample
    from pipeline.replay.autoscale.settings import ScaledSetting
    from pipeline.replay.hpa.overrides import HpaVariant
    from pipeline.replay.ports import AutoscalerProcess, PodAutoscalerProcess
    from pipeline.replay.replayer import Replayer
    from pipeline.replay.run import Autoscaling, PodAutoscaling
    from pipeline.replay.settings import ReplaySettings

log = logging.getLogger("kubetape.sweep")

PROVIDER = "karpenter"
"""The autoscaler a sweep varies (the local stack runs Karpenter only)."""
DEFAULT_COST = "node_hours"
DEFAULT_RELIABILITY = "pending_pod_seconds"
HPA_COST = "pod_hours"
"""The default cost of a sweep of HPA settings on fixed nodes (whose node-hours do not move)."""
HPA_RELIABILITY = "overload_seconds"
"""The default reliability of a sweep of HPA settings."""
COST_UNITS = {"node_hours": "node-hours", "pod_hours": "pod-hours"}


@dataclass(frozen=True, slots=True)
class NodeOption:
    """``--nodes SKELETON.yaml:N`` of a sweep: a node pool, or none (``none``)."""

    skeleton_path: Path | None
    skeleton: Mapping[str, Any] | None
    count: int

    @property
    def pool(self) -> NodePool | None:
        if self.skeleton is None or self.skeleton_path is None:
            return None
        return node_pool(self.skeleton_path.stem, self.skeleton, self.count)


def node_pool(name: str, skeleton: Mapping[str, Any], count: int) -> NodePool:
    """A run's description of ``count`` nodes made from ``skeleton`` (its allocatable CPU and memory)."""
    from pipeline.analytics.pod_requests import parse_quantity

    capacity = (skeleton.get("status") or {}).get("allocatable") or {}
    return NodePool(
        name,
        count,
        (parse_quantity(capacity.get("cpu")) or 0.0) * 1000,
        parse_quantity(capacity.get("memory")) or 0.0,
    )


@dataclass(frozen=True, slots=True)
class PodAutoscalerSweep:
    """The HPA part of a sweep's grid: each variant's overrides applied to the recorded HPAs, the
    simulated HPA deciding from the recorded load under ``load_model``."""

    variants: Sequence[HpaVariant]
    load_model: LoadModel = LoadModel.CONSERVE
    usage: tuple[UsageSample, ...] = ()
    """Recorded load beside the trace's own (a test's)."""
    stack_dir: Path | None = None
    """The local stack whose cluster's kube-controller-manager and metrics-server run at each replay's
    speed, as ``kubetape replay --autoscaler hpa`` has them (None: ``$KUBETAPE_STACK_DIR`` or the
    default stack; a cluster of no local stack runs as deployed, and the report says so)."""


@dataclass(frozen=True, slots=True)
class AutoscalerSweep:
    """The autoscaled part of a sweep's grid: NodePool variants (see ``autoscale_axes``) replayed with
    the local stack's Karpenter, its timers divided by each speed like ``kubetape replay`` does."""

    variants: Sequence[AutoscalerVariant]
    stack_dir: Path | None = None
    prices: Mapping[str, float] | None = None
    instance_types_file: Path | None = None
    """What Karpenter may launch (the KWOK provider's JSON), as ``kubetape replay`` picks them: this
    file, else the trace's recorded Nodes, else the stack's own."""


# ---- one replay → one run -------------------------------------------------------------------------
class _RunObserver:
    """Lists the replay's pods, nodes and controllers beside the replay and folds them into the run's
    timeline (the pods first and the controllers after, so every listed pod's ReplicaSet or Job, created
    before the pod, is in the later listing; the controllers are folded first, so each pod's owner chain
    is known when the pod is folded)."""

    LISTING_ORDER = (("v1", "Pod"), ("v1", "Node"), ("apps/v1", "ReplicaSet"), ("batch/v1", "Job"))

    def __init__(
        self,
        cluster: KubeClient,
        replayer: Replayer,
        folder: TimelineFolder,
        snapshots: SnapshotEvents,
        *,
        start_ms: int,
        end_ms: int,
    ) -> None:
        from pipeline.replay.rewrite import REPLAY_LABEL

        self._cluster = cluster
        self._replayer = replayer
        self._folder = folder
        self._snapshots = snapshots
        self._start_ms = start_ms
        self._end_ms = end_ms
        self._selector = f"{REPLAY_LABEL}={replayer.name}"
        self.rows: list[TimelineRow] = []

    async def _list(self, api_version: str, kind: str) -> list[dict[str, Any]] | None:
        from pipeline.model.errors import KubeApiError

        try:
            listed = await self._cluster.list_objects(api_version, kind, label_selector=self._selector)
        except KubeApiError as exc:
            log.warning("cannot list %s of %s: %s", kind, self._replayer.name, exc)
            return None
        return listed

    async def observe(self) -> None:
        if self._replayer.trace_started_at is None:
            return  # still setting up: trace time has not begun
        (pod_version, pod_kind), *owner_kinds = self.LISTING_ORDER
        pods = await self._list(pod_version, pod_kind)
        # stamped when the pods were listed (they make the counts): on a busy machine a listing takes
        # a while, and a time taken before it would date the pods too early
        at_ms = self._start_ms + round(self._replayer.trace_elapsed_ms())
        if at_ms > self._end_ms:
            return  # the replay is past the trace (cleaning up): not part of the run
        others = await asyncio.gather(*(self._list(v, k) for v, k in owner_kinds))
        listings: dict[str, list[Event]] = {}
        for (api_version, kind), listed in zip(self.LISTING_ORDER, [pods, *others], strict=True):
            if listed is not None:
                listings[kind] = self._snapshots.observe(at_ms, api_version, kind, listed)
        for kind in ("ReplicaSet", "Job", "Node", "Pod"):
            self._folder.add_all(listings.get(kind, []))
        self.rows.extend(self._folder.advance(at_ms))


async def replay_to_run(
    kubeconfig: Path,
    trace_path: Path,
    settings: ReplaySettings,
    run_dir: Path,
    *,
    pool: NodePool | None = None,
    repetition: int = 0,
    labels: Mapping[str, str] | None = None,
    context: str | None = None,
    autoscaling: Autoscaling | None = None,
    autoscaler: AutoscalerProcess | None = None,
    pod_autoscaling: PodAutoscaling | None = None,
    pod_autoscaler: PodAutoscalerProcess | None = None,
) -> Run:
    """Replay ``trace_path`` with ``settings`` (and ``autoscaling``, its process restarted by
    ``autoscaler``) while observing the simulated cluster; write and return the run directory. ``pool``
    defaults to the settings' node skeleton, named by its ``metadata.name``."""
    from pipeline.analytics.runs import read_run, write_run
    from pipeline.analytics.snapshots import SnapshotEvents, strip_prefix
    from pipeline.analytics.timeline import TimelineFolder, fold_events
    from pipeline.formats.trace import initial_events
    from pipeline.replay.run import ReplayRun, ReplaySpec, TargetCluster, TraceFile

    if pool is None and settings.node_pools and settings.node_pools[0][1] > 0:
        skeleton, count = settings.node_pools[0]
        skeleton_name = str((skeleton.get("metadata") or {}).get("name") or "node")
        pool = node_pool(skeleton_name, skeleton, count)
    spec = ReplaySpec(
        TraceFile(str(trace_path)),
        settings,
        TargetCluster(kubeconfig, context),
        autoscaling,
        pod_autoscaling=pod_autoscaling,
    )
    replay = ReplayRun(spec, autoscaler=autoscaler, pod_autoscaler=pod_autoscaler)
    plan = await replay.prepare()
    assert replay.trace is not None
    end_ms = plan.start_ms + replay.span_ms
    recorded = fold_events(
        initial_events(replay.trace, time_ordered=True), origin_ms=plan.start_ms, end_ms=end_ms
    )
    folder = TimelineFolder(origin_ms=plan.start_ms)
    snapshots = SnapshotEvents(strip_prefix(settings.namespace_prefix))
    observers: list[_RunObserver] = []

    async def observe(replayer: Replayer, cluster: KubeClient) -> None:
        observer = _RunObserver(cluster, replayer, folder, snapshots, start_ms=plan.start_ms, end_ms=end_ms)
        observers.append(observer)
        interval_s = max(1.0 / settings.speed, 0.05)  # one observation per trace second at most
        while True:
            await observer.observe()
            await asyncio.sleep(interval_s)

    report = await replay.run(beside=observe)
    rows = [*(row for o in observers for row in o.rows), *folder.finish(end_ms)]
    info = RunInfo(
        name=run_dir.name,
        trace=str(trace_path),
        speed=settings.speed,
        node_pools=(pool,) if pool is not None else (),
        repetition=repetition,
        labels=dict(labels or {}),
    )
    write_run(
        run_dir,
        info,
        timeline=rows,
        pods=folder.pod_times(),
        recorded=recorded.rows,
        recorded_pods=recorded.pods,
        report=report.to_json(),
    )
    return read_run(run_dir)


# ---- the sweep ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SweepResult:
    runs: list[Run]
    points: dict[str, tuple[float, float]]
    """Per configuration: (mean cost, mean reliability metric)."""
    frontier: list[str]
    reliability_metric: str
    document: dict[str, Any]
    cost_metric: str = DEFAULT_COST


def check_metric(flag: str, metric: str) -> None:
    """ConfigError unless ``metric`` is a run metric (checked before any replay runs)."""
    from pipeline.analytics.compare import METRICS

    if metric not in METRICS:
        raise ConfigError(f"{flag} {metric!r} is not a run metric; choose one of {', '.join(METRICS)}")


def summarize_sweep(
    runs: Sequence[Run], reliability: str = DEFAULT_RELIABILITY, cost: str = DEFAULT_COST
) -> SweepResult:
    """Configurations' means and intervals, and the Pareto frontier of (``cost``, ``reliability``)."""
    from pipeline.analytics.compare import compare_runs
    from pipeline.analytics.pareto import pareto_frontier

    check_metric("--reliability", reliability)
    check_metric("--cost", cost)
    comparison = compare_runs(runs)
    points = {
        c.config: (c.metrics[cost].estimate, c.metrics[reliability].estimate) for c in comparison.configs
    }
    frontier = pareto_frontier(points)
    document = {
        "version": 1,
        "cost_metric": cost,
        "reliability_metric": reliability,
        "points": {k: {"cost": x, "reliability": y} for k, (x, y) in points.items()},
        "frontier": frontier,
        "comparison": comparison.to_json(),
    }
    return SweepResult(list(runs), points, frontier, reliability, document, cost)


async def run_sweep(
    kubeconfig: Path,
    trace_path: Path,
    out_dir: Path,
    *,
    speeds: Sequence[float],
    nodes: Sequence[NodeOption],
    repetitions: int,
    autoscaler: AutoscalerSweep | None = None,
    pod_autoscaler: PodAutoscalerSweep | None = None,
    max_lag_s: float | None = None,
    reliability: str = DEFAULT_RELIABILITY,
    cost: str = DEFAULT_COST,
    context: str | None = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    sample_interval_s: float = 1.0,
) -> SweepResult:
    """Every (speed × (node option or autoscaler variant) × HPA variant) configuration ``repetitions``
    times, one replay after another."""
    from pipeline.replay.run import Autoscaling, PodAutoscaling
    from pipeline.replay.settings import ReplaySettings
    from services.local_karpenter import LocalKarpenter
    from services.local_pod_autoscaler import LocalPodAutoscaler

    runs: list[Run] = []
    options: list[NodeOption | AutoscalerVariant] = [*nodes, *(autoscaler.variants if autoscaler else ())]
    # restarts the HPA's processes only when a replay's speed asks for other timers than they run with
    hpa_processes = LocalPodAutoscaler(pod_autoscaler.stack_dir, kubeconfig) if pod_autoscaler else None
    hpa_options: list[HpaVariant | None] = list(pod_autoscaler.variants) if pod_autoscaler else [None]
    grid = list(itertools.product(speeds, options, hpa_options))
    karpenter = (
        _OncePerConfiguration(LocalKarpenter(autoscaler.stack_dir, kubeconfig)) if autoscaler else None
    )
    for index, (speed, option, hpa) in enumerate(grid):
        fixed = option if isinstance(option, NodeOption) else NodeOption(None, None, 0)
        if karpenter is not None:
            karpenter.configuration = index
        autoscaling = None
        if isinstance(option, AutoscalerVariant):
            assert autoscaler is not None
            autoscaling = Autoscaling(
                PROVIDER,
                node_pools=((option.describe(), tuple(option.pools)),),
                prices=autoscaler.prices,
                instance_types_file=autoscaler.instance_types_file,
            )
        pod_autoscaling = None
        if hpa is not None:
            assert pod_autoscaler is not None
            pod_autoscaling = PodAutoscaling(
                pod_autoscaler.load_model, usage=pod_autoscaler.usage, overrides=hpa.overrides
            )
        for repetition in range(repetitions):
            name = f"sweep-c{index:02d}-r{repetition}"
            settings = ReplaySettings(
                speed=speed,
                replay_name=name,
                namespace_prefix=name,
                node_pools=() if fixed.skeleton is None else ((fixed.skeleton, fixed.count),),
                sample_interval_s=sample_interval_s,
                max_lag_s=max_lag_s,
            )
            pool = fixed.pool
            if isinstance(option, NodeOption):
                labels: dict[str, str] = {}
                described = f"nodes {pool.skeleton}:{pool.count}" if pool else "no nodes"
            else:
                labels = dict(option.labels)
                described = f"Karpenter with {option.describe()}"
            if hpa is not None:
                labels.update(hpa.labels)
                described += f"; {hpa.describe()}"
            say(f"[sweep] {name}: speed {speed:g}, {described}")
            run = await replay_to_run(
                kubeconfig,
                trace_path,
                settings,
                out_dir / name,
                pool=pool,
                repetition=repetition,
                labels=labels,
                context=context,
                autoscaling=autoscaling,
                autoscaler=karpenter,
                pod_autoscaling=pod_autoscaling,
                pod_autoscaler=hpa_processes if pod_autoscaling is not None else None,
            )
            runs.append(run)
    return summarize_sweep(runs, reliability, cost)


class _OncePerConfiguration:
    """The local Karpenter restarted once per configuration (:attr:`configuration`, set by the
    sweep), not at every repetition: a restart takes seconds, and a configuration's repetitions share
    its timers."""

    def __init__(self, process: AutoscalerProcess) -> None:
        self._process = process
        self.configuration = 0
        self._last: tuple[int, list[ScaledSetting]] | None = None

    def restart_at(self, speed: float, instance_types: Mapping[str, Any] | None) -> list[ScaledSetting]:
        if self._last is None or self._last[0] != self.configuration:
            self._last = (self.configuration, self._process.restart_at(speed, instance_types))
        return list(self._last[1])


def parse_node_option(text: str) -> NodeOption:
    if text == "none":
        return NodeOption(None, None, 0)
    skeleton, count = parse_nodes(text)
    return NodeOption(Path(text.rpartition(":")[0]), skeleton, count)


def write_sweep_outputs(result: SweepResult, out_dir: Path, render: Callable[..., str]) -> None:
    from pipeline.analytics.compare import compare_runs

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps(result.document, indent=2) + "\n")
    html = render(
        f"kubetape sweep of {result.runs[0].info.trace}" if result.runs else "kubetape sweep",
        result.runs,
        compare_runs(result.runs),
        pareto=result.points,
        frontier=result.frontier,
        pareto_axes=(result.cost_metric, result.reliability_metric),
    )
    (out_dir / "report.html").write_text(html)


def render_sweep_text(result: SweepResult) -> str:
    cost, reliability = result.cost_metric, result.reliability_metric
    lines = [f"cost ({cost}) vs reliability ({reliability}), means over repetitions:"]
    for config, (x, y) in result.points.items():
        mark = "  *" if config in result.frontier else "   "
        lines.append(f"{mark} {config}: {x:.4g} {COST_UNITS.get(cost, cost)}, {y:.4g} {reliability}")
    lines.append("(* = on the Pareto frontier: no other configuration is cheaper and at least as reliable)")
    return "\n".join(lines)
