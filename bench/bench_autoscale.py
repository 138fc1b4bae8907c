"""Autoscaled replay against fixed node pools, same trace, same run; prints one JSON document.

The trace: ``--waves`` Deployments of ``--replicas`` one-CPU pods, one wave every 20 s of trace time,
each scaled to zero 60 s after it arrived. It is replayed at ``--speed``

* with Karpenter (its KWOK provider, started by the stack's own code): no nodes at first, one NodePool
  of 4- and 8-CPU types, its timers (batch windows, disruption polling, consolidation validation
  delay) divided by the speed;
* on a fixed pool of 8-CPU virtual nodes big enough for the peak (what a static what-if would give).

Both runs are sampled the same way (the replay's pods and the nodes they may use, every 0.5 s) with
``pipeline.replay.autoscale.figures``. Figures: pending→running p50/p99 (wall seconds, Kubernetes'
1 s timestamps) of each and their ratio, node launches and launches per wall second (Karpenter),
node-hours of each (trace time) and their ratio.

With ``--ramp 10,20,40``, the same pair of replays runs once per wave size, so pods arrive faster at
each level (``replicas × speed / 20 s`` per wall second), and the JSON says how many pods per wall second
the loop sustained before the autoscaler, not the replayer, was the limit: the first level at which
Karpenter's pending→running p99 is more than ``--bound-s`` above the fixed pool's, or some of its pods
never ran while their wave lived (they have no pending→running time), while the fixed pool
(the replayer, the scheduler and KWOK without an autoscaler) still keeps its own p99 and the replayer's
lateness p99 within ``--bound-s``. A level where the fixed pool falls behind first is reported as limited
by the replayer or the control plane instead.

Usage: ``.venv/bin/python -m bench.bench_autoscale [--waves 3 --replicas 10 --speed 10]`` or
``[--ramp 10,20,40,80 --bound-s 10]`` (starts a private stack with Karpenter, ~1.5 min, plus two
replays per level)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.environment import machine, private_stack
from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.io.kube.client import KubeClient
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.autoscale.figures import NODEPOOL_LABEL, AutoscaleFigures
from pipeline.replay.clock.schedule import percentile
from pipeline.replay.replayer import Replayer
from pipeline.replay.rewrite import REPLAY_LABEL
from pipeline.replay.run import Autoscaling, LoadedTrace, ReplayRun, ReplaySpec, TargetCluster
from pipeline.replay.settings import ReplaySettings
from pipeline.replay.workload_manifests import deployment, kwok_node_pool
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON
from pipeline.stack.stack import LocalStack
from services.local_karpenter import LocalKarpenter

WAVE_GAP_MS = 20_000
WAVE_LIFE_MS = 60_000
NODE_CPUS = 8


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    return deployment(name, "shop", replicas, cpu="1", memory="256Mi")


def _trace(waves: int, replicas: int) -> tuple[Any, int]:
    """The trace as a segment, and its end (trace ms)."""
    events = []
    for wave in range(waves):
        name, start = f"wave-{wave}", wave * WAVE_GAP_MS
        events.append(Event.applied(start, key_of(_deployment(name, 0)), _deployment(name, replicas), 0))
        events.append(
            Event.applied(start + WAVE_LIFE_MS, key_of(_deployment(name, 0)), _deployment(name, 0), 1)
        )
    end = max(e.ts_ms for e in events) + 10_000
    return build_segment(events, start_ms=0, end_ms=end, kind=SegmentKind.TRACE), end


def _skeleton() -> Mapping[str, Any]:
    import yaml

    loaded: Mapping[str, Any] = yaml.safe_load(DEFAULT_NODE_SKELETON.read_text())
    return loaded


async def _replay(
    kubeconfig: Path,
    trace: Any,
    settings: ReplaySettings,
    node_selector: str,
    autoscaling: Autoscaling | None = None,
) -> dict[str, Any]:
    """Replay with a sampler of our own beside the replayer's, identical for both runs."""
    figures = AutoscaleFigures(settings.speed)
    settings = dataclasses.replace(settings, keep=True)  # cleaned up below, after the last sample
    spec = ReplaySpec(LoadedTrace(trace, "bench"), settings, TargetCluster(kubeconfig), autoscaling)
    # Karpenter was restarted at the speed once, for every pair (_run)
    async with ReplayRun(spec).session() as session:

        async def sample(replayer: Replayer, cluster: KubeClient) -> None:
            # from trace start: a fixed pool's nodes, created in setup, are not launches
            while replayer.trace_started_at is None:  # noqa: ASYNC110 - the replayer has no such event
                await asyncio.sleep(0.05)
            while True:
                pods = await cluster.list_objects(
                    "v1", "Pod", label_selector=f"{REPLAY_LABEL}={replayer.name}"
                )
                nodes = await cluster.list_objects(
                    "v1", "Node", label_selector=node_selector.format(replayer.name)
                )
                figures.observe(replayer.trace_elapsed_ms(), time.monotonic(), nodes, pods)
                await asyncio.sleep(0.5)

        report = await session.run(beside=sample)
        await session.replayer.cleanup()  # not sampled: nodes draining after the trace are not its cost
    data = figures.to_json()
    lateness_p99 = percentile(report.lateness_ms, 0.99)
    return {
        "wall_seconds": round(report.wall_seconds, 2),
        "failed": report.failed,
        "lateness_p99_ms": None if lateness_p99 is None else round(lateness_p99, 1),
        "pods_timed": data["pending_to_running"]["pods"],
        "pending_to_running_p50_s": data["pending_to_running"]["p50_wall_s"],
        "pending_to_running_p99_s": data["pending_to_running"]["p99_wall_s"],
        "pending_pod_seconds": data["pending_pod_seconds"],
        "node_launches": data["launches"],
        "node_launches_per_wall_s": round(data["launches"] / report.wall_seconds, 3)
        if report.wall_seconds
        else None,
        "nodes_peak": data["nodes_peak"],
        "node_hours": data["node_hours"],
        "cleanup": report.cleanup,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


async def _pair(kubeconfig: Path, speed: float, waves: int, replicas: int) -> dict[str, Any]:
    """One trace replayed with Karpenter, then on a fixed pool big enough for its peak."""
    trace, end_ms = _trace(waves, replicas)
    pool = kwok_node_pool("bench", ("kwok-standard-4", "kwok-standard-8"))
    name = f"bench-k-{uuid.uuid4().hex[:4]}"
    karpenter = await _replay(
        kubeconfig,
        trace,
        ReplaySettings(speed=speed, replay_name=name, namespace_prefix=name),
        f"{NODEPOOL_LABEL}={{}}-bench",
        Autoscaling("karpenter", node_pools=(("bench pool", (pool,)),)),
    )
    print(
        json.dumps({"replicas": replicas, "karpenter": karpenter}), file=sys.stderr
    )  # kept if the next fails
    # the peak: waves overlapping within one wave's life, one-CPU pods, 8-CPU nodes (7.9 allocatable)
    overlapping = min(waves, math.ceil(WAVE_LIFE_MS / WAVE_GAP_MS))
    fixed_nodes = math.ceil(overlapping * replicas / (NODE_CPUS - 1))
    name = f"bench-f-{uuid.uuid4().hex[:4]}"
    fixed = await _replay(
        kubeconfig,
        trace,
        ReplaySettings(
            speed=speed, replay_name=name, namespace_prefix=name, node_pools=((_skeleton(), fixed_nodes),)
        ),
        f"{REPLAY_LABEL}={{}}",
    )
    fixed["nodes_fixed"] = fixed_nodes
    print(json.dumps({"replicas": replicas, "fixed_pool": fixed}), file=sys.stderr)
    return {
        "trace": {
            "waves": waves,
            "replicas_per_wave": replicas,
            "pod_cpu": 1,
            "speed": speed,
            "trace_seconds": end_ms / 1000,
            "pods_per_wall_s": _arrival_rate(replicas, speed),
        },
        "karpenter": karpenter,
        "fixed_pool": fixed,
        "ratios_karpenter_over_fixed": {
            "pending_to_running_p50": _ratio(
                karpenter["pending_to_running_p50_s"], fixed["pending_to_running_p50_s"]
            ),
            "pending_to_running_p99": _ratio(
                karpenter["pending_to_running_p99_s"], fixed["pending_to_running_p99_s"]
            ),
            "node_hours": _ratio(karpenter["node_hours"], fixed["node_hours"]),
            "pending_pod_seconds": _ratio(karpenter["pending_pod_seconds"], fixed["pending_pod_seconds"]),
        },
    }


def _arrival_rate(replicas: int, speed: float) -> float:
    """Pods per wall second while a wave arrives: one wave every WAVE_GAP_MS of trace time."""
    return round(replicas * speed / (WAVE_GAP_MS / 1000), 2)


def limit_of(levels: list[dict[str, Any]], bound_s: float) -> dict[str, Any]:
    """What stopped the ramp (see the module docstring): the first level where the fixed pool fell
    behind (the replayer or the control plane is the limit), or where Karpenter added more than
    ``bound_s`` to the fixed pool's pending→running p99 (the autoscaler is)."""
    sustained = None
    for level in levels:
        fixed, karpenter = level["fixed_pool"], level["karpenter"]
        lateness_s = (fixed["lateness_p99_ms"] or 0) / 1000
        fixed_p99 = fixed["pending_to_running_p99_s"]
        rate = level["trace"]["pods_per_wall_s"]
        if fixed_p99 is None or fixed_p99 > bound_s or lateness_s > bound_s or fixed["failed"]:
            return {
                "limited_by": "replayer or control plane",
                "at_pods_per_wall_s": rate,
                "sustained": sustained,
            }
        karpenter_p99 = karpenter["pending_to_running_p99_s"]
        # pods that never ran while their wave lived have no pending→running time: they count too
        never_ran = fixed["pods_timed"] - karpenter["pods_timed"]
        if karpenter_p99 is None or karpenter_p99 > fixed_p99 + bound_s or never_ran > 0:
            return {
                "limited_by": "autoscaler",
                "at_pods_per_wall_s": rate,
                "sustained": sustained,
                "pods_never_running_under_karpenter": never_ran,
            }
        sustained = rate
    return {"limited_by": None, "at_pods_per_wall_s": None, "sustained": sustained}


async def _run(args: argparse.Namespace, stack: LocalStack, kubeconfig: Path) -> dict[str, Any]:
    LocalKarpenter(stack.stack_dir, kubeconfig).restart_at(args.speed)
    head = {"benchmark": "autoscale", "machine": machine()}
    note = (
        "pending→running in wall seconds from Kubernetes timestamps (1 s resolution: a ratio over a fixed "
        "pool's 0 s is null); node-hours and pending-pod seconds in trace time; the fixed pool is created "
        "before trace time, so launches nothing during the replay"
    )
    if not args.ramp:
        return {**head, **await _pair(kubeconfig, args.speed, args.waves, args.replicas), "note": note}
    levels = [await _pair(kubeconfig, args.speed, args.waves, replicas) for replicas in args.ramp]
    return {
        **head,
        "ramp": levels,
        "bound_s": args.bound_s,
        "limit": limit_of(levels, args.bound_s),
        "note": note + "; sustained: the highest pods per wall second at which neither limit was reached",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=10, help="one-CPU pods per wave")
    parser.add_argument("--speed", type=float, default=10.0)
    parser.add_argument(
        "--ramp",
        type=lambda text: [int(part) for part in text.split(",")],
        default=None,
        metavar="R1,R2,…",
        help="wave sizes to step through (pods arrive at R × speed / 20 per wall second)",
    )
    parser.add_argument(
        "--bound-s", type=float, default=10.0, help="wall seconds a p99 may grow before a limit is called"
    )
    args = parser.parse_args()
    with private_stack(["sim"], autoscaled=["sim"]) as (stack, info):
        result = asyncio.run(_run(args, stack, info.kubeconfigs["sim"]))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
