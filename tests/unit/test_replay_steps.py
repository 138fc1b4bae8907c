"""Every recorded change reaches the simulated cluster as recorded, at its time divided by the speed
the user asked for: an owner scaled up and down, a bare pod, the trace's last change."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pipeline.io.kube.types import ApiResource
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.settings import ReplaySettings
from services.cli import build_parser
from services.commands.replay import spec_from_args
from tests.unit.test_replay_replayer import MemoryCluster, applied, fast, pod, trace
from tests.unit.test_replay_schedule import VirtualClock

DEPLOYMENT = ApiResource("apps/v1", "Deployment", "deployments", True)
SCALED = [(0, 2), (10_000, 5), (20_000, 3), (30_000, 1)]
"""(trace ms, spec.replicas) of the recorded Deployment: up, then down twice."""
SLACK_S = 0.05


class TimedWrites(MemoryCluster):
    """The in-memory apiserver, serving Deployments too, noting the clock instant of every write."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock
        self.written: list[tuple[float, str, str, Any]] = []
        """(clock instant, kind, name, spec.replicas) of each write, in order."""

    async def resource_for(self, api_version: str, kind: str) -> ApiResource:
        if (api_version, kind) == ("apps/v1", "Deployment"):
            return DEPLOYMENT
        return await super().resource_for(api_version, kind)

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        live = await super().apply(obj, force=force)
        replicas = (obj.get("spec") or {}).get("replicas")
        self.written.append((self.clock.now(), obj["kind"], obj["metadata"]["name"], replicas))
        return live


def deployment(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }


async def replayed_writes(settings: ReplaySettings) -> tuple[list[tuple[float, int]], TimedWrites]:
    """The recorded Deployment's scales and a bare pod (at trace 15 s) replayed with ``settings``:
    each Deployment write as (wall seconds after trace time began, replicas), and the cluster."""
    events = [applied(ts, deployment(replicas)) for ts, replicas in SCALED]
    events.insert(2, applied(15_000, pod("bare", restart_policy="Always")))
    clock = VirtualClock()
    cluster = TimedWrites(clock)
    replayer = Replayer(cluster, plan_replay(trace(events), settings.speed), settings, clock=clock)
    report = await replayer.run()
    assert report.failed == 0, report.failures
    began = replayer.trace_started_at
    assert began is not None
    writes = [
        (round(at - began, 3), replicas) for at, kind, _, replicas in cluster.written if kind == "Deployment"
    ]
    return writes, cluster


async def test_each_scale_up_and_down_is_written_at_its_time_divided_by_the_speed() -> None:
    writes, cluster = await replayed_writes(replace(fast(keep=True), speed=10))
    assert [replicas for _, replicas in writes] == [2, 5, 3, 1]
    # within a sample interval: the virtual clock wakes the sampler's sleepers and the scheduler's in turn
    assert [at for at, _ in writes] == pytest.approx([0.0, 1.0, 2.0, 3.0], abs=SLACK_S)
    assert cluster.objects[("Deployment", "kubetape-prod", "web")]["spec"]["replicas"] == 1
    bare = [at for at, kind, name, _ in cluster.written if (kind, name) == ("Pod", "bare")]
    assert len(bare) == 1, cluster.written
    assert ("Pod", "kubetape-prod", "bare") in cluster.objects


async def test_the_speed_flag_sets_the_pace_of_the_writes() -> None:
    for flag, times in (("1", [0.0, 10.0, 20.0, 30.0]), ("10", [0.0, 1.0, 2.0, 3.0])):
        flags = ["--speed", flag, "--keep", "--sample-interval", "0.5"]
        args = build_parser().parse_args(["replay", "--trace", "t", "--kubeconfig", "k", *flags])
        settings = replace(spec_from_args(args).settings, replay_name="t1", cleanup_timeout_s=1)
        writes, _ = await replayed_writes(settings)
        assert [at for at, _ in writes] == pytest.approx(times, abs=SLACK_S), (flag, writes)
