"""Replayer benchmarks on a real KWOK apiserver; prints one JSON document.

* ``throughput``: N ConfigMaps recorded at the same instant, replayed (rewrite + server-side apply,
  ``--max-in-flight`` concurrent) beside a plain concurrent create loop (POST, same concurrency, same
  apiserver, same run) — the ceiling. Figure: objects/s of each and the replayer's share of the ceiling.
  A third loop (server-side apply with an owner reference, no replayer) separates what the apiserver
  charges for apply + ownership from what the replayer itself costs.
* ``lateness``: a light trace (one ConfigMap change every ``--gap-ms`` of trace time) replayed at speeds
  1, 10 and 100. Figures: lateness p50/p99/max (ms) of each step against its scaled deadline. At speed
  100 the default trace asks for 400 writes/s, more than a 2-core machine's apiserver takes: lateness
  there measures throughput, not timing.

Usage::

    .venv/bin/python -m bench.bench_replay                     # starts a private stack (~1 min)
    .venv/bin/python -m bench.bench_replay --kubeconfig K      # reuse a running cluster
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.environment import machine, private_stack
from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.report.report import ReplayReport
from pipeline.replay.run import LoadedTrace, ReplayRun, ReplaySpec, TargetCluster
from pipeline.replay.settings import ReplaySettings


def _config_map(name: str, namespace: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "replay"}},
        "data": {"index": str(i), "payload": "x" * 256},
    }


async def _replay(kubeconfig: Path, events: list[Event], speed: float, max_in_flight: int) -> ReplayReport:
    end = max(e.ts_ms for e in events) + 1
    trace = build_segment(events, start_ms=0, end_ms=end, kind=SegmentKind.TRACE)
    name = f"bench-{uuid.uuid4().hex[:6]}"
    settings = ReplaySettings(
        speed=speed, replay_name=name, namespace_prefix=name, max_in_flight=max_in_flight, keep=True
    )
    run = ReplayRun(ReplaySpec(LoadedTrace(trace, name), settings, TargetCluster(kubeconfig)))
    async with run.session() as session:
        report = await session.run()
        await session.replayer.cleanup()  # not timed: wall_seconds is measured before cleanup
    return report


async def _write_loop(kubeconfig: Path, count: int, concurrency: int, *, apply: bool) -> float:
    """Seconds to write ``count`` ConfigMaps with ``concurrency`` in flight: POST (the apiserver's
    ceiling) or server-side apply with an owner reference (what the replayer sends, minus the replayer)."""
    namespace = f"bench-plain-{uuid.uuid4().hex[:6]}"
    async with kube_api(kubeconfig) as api:
        cluster = KubeClient(api)
        owner = await cluster.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        ref = {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": owner["metadata"]["uid"]}
        slots = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            body = _config_map(f"cm-{i}", namespace, i)
            async with slots:
                if apply:
                    body["metadata"]["ownerReferences"] = [{**ref, "blockOwnerDeletion": True}]
                    await cluster.apply(body)
                else:
                    await cluster.create(body)

        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(count)))
        elapsed = time.monotonic() - started
        await cluster.delete("v1", "Namespace", None, namespace)
        # wait until it is gone: its deletion would otherwise compete with the next measurement
        for _ in range(600):
            if await cluster.get("v1", "Namespace", None, namespace) is None:
                break
            await asyncio.sleep(0.2)
    return elapsed


async def bench_throughput(kubeconfig: Path, count: int, concurrency: int, repeats: int) -> dict[str, Any]:
    await _write_loop(kubeconfig, min(200, count), concurrency, apply=False)  # warm the apiserver
    events = [
        Event.applied(0, key_of(cm), cm, 0) for i in range(count) for cm in [_config_map(f"cm-{i}", "app", i)]
    ]
    plain, owned_apply, replay, replay_phase, failed = [], [], [], [], 0
    for _ in range(repeats):  # interleaved, best of each: the machine is shared
        plain.append(count / await _write_loop(kubeconfig, count, concurrency, apply=False))
        owned_apply.append(count / await _write_loop(kubeconfig, count, concurrency, apply=True))
        report = await _replay(kubeconfig, events, speed=1.0, max_in_flight=concurrency)
        replay.append(report.applied / report.wall_seconds)
        replay_phase.append(report.applied / (report.wall_seconds - report.setup_seconds))
        failed += report.failed
    return {
        "objects": count,
        "concurrency": concurrency,
        "repeats": repeats,
        "plain_create_per_s": round(max(plain), 1),
        "plain_owned_apply_per_s": round(max(owned_apply), 1),
        "replayer_apply_per_s": round(max(replay), 1),
        "replayer_share_of_ceiling": round(max(replay) / max(plain), 3),
        "replayer_share_of_owned_apply": round(max(replay) / max(owned_apply), 3),
        "replayer_apply_phase_per_s": round(max(replay_phase), 1),
        "replayer_failed": failed,
        "note": "replayer_apply_per_s includes setup (root, discovery, namespace); the phase figure not",
    }


async def bench_lateness(kubeconfig: Path, steps: int, gap_ms: int) -> dict[str, Any]:
    events = [
        Event.applied(i * gap_ms, key_of(cm), cm, 0)
        for i in range(steps)
        for cm in [_config_map(f"cm-{i}", "app", i)]
    ]
    out: dict[str, Any] = {"steps": steps, "trace_gap_ms": gap_ms}
    for speed in (1.0, 10.0, 100.0):
        latency = (await _replay(kubeconfig, events, speed=speed, max_in_flight=32)).to_json()["lateness_ms"]
        out[f"speed_{speed:g}"] = {k: latency[k] for k in ("p50", "p99", "max")}
    return out


@contextlib.contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[Path]:
    if args.kubeconfig:
        yield args.kubeconfig
        return
    with private_stack(["sim"]) as (_, info):
        yield info.kubeconfigs["sim"]


async def _main(args: argparse.Namespace, kubeconfig: Path) -> dict[str, Any]:
    return {
        "benchmark": "replay",
        "machine": machine(),
        "throughput": await bench_throughput(kubeconfig, args.objects, args.concurrency, args.repeats),
        "lateness": await bench_lateness(kubeconfig, args.steps, args.gap_ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--kubeconfig", type=Path, default=None, help="a running cluster (default: start one)"
    )
    parser.add_argument("--objects", type=int, default=2_000, help="ConfigMaps for the throughput benchmark")
    parser.add_argument("--concurrency", type=int, default=32, help="writes in flight, both sides")
    parser.add_argument("--repeats", type=int, default=2, help="throughput rounds (best of each is kept)")
    parser.add_argument("--steps", type=int, default=100, help="steps of the lateness trace")
    parser.add_argument("--gap-ms", type=int, default=250, help="trace time between lateness steps")
    args = parser.parse_args()
    with _cluster(args) as kubeconfig:
        result = asyncio.run(_main(args, kubeconfig))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
