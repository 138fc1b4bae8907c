"""SimKube 2.7's lifecycle delays on the real ``sim`` KWOK cluster: at ×10, a 10 s pod-startup delay makes
the replayed pods Running about 1 s of wall time after they are scheduled, through the stack's KWOK stages.

Measured from the pods' own timestamps (the scheduler's PodScheduled condition against the Ready condition
KWOK writes), which the apiserver keeps to the second: a wait of at least 1 s shows as at least 1 s, a
wait a little above it as 1 s or 2 s. So the lower bound is strict, the upper bound is loose (a loaded
machine delays KWOK's patches) but well below the 10 s an unscaled delay would take, and the same replay
without delays must be faster."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from functools import partial
from pathlib import Path
from statistics import mean
from typing import Any

import yaml

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.formats.trace import read_trace
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.io.kube.pod_watch import PodWatch
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.model.lifecycle_delays import LifecycleDelays
from pipeline.replay.delays import IMAGE_PULL_DELAY, STARTUP_DELAY
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.rewrite import REPLAY_LABEL
from pipeline.replay.settings import ReplaySettings
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON

REPLICAS = 10
SPEED = 10.0
RUNNING_DEADLINE_S = 60.0
LOOSE_UPPER_S = 6.0
"""Scheduled to Ready for a 1 s wait on a loaded machine, at most: KWOK may be slow to patch, but an
unscaled 10 s delay stays out of reach."""


def _trace(path: Path) -> Path:
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "app"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }
    events = [Event.applied(0, key_of(deployment), deployment, 0)]
    path.write_bytes(encode_segment(build_segment(events, start_ms=0, end_ms=1_000, kind=SegmentKind.TRACE)))
    return path


def _condition_time(pod: dict[str, Any], kind: str) -> datetime | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return datetime.fromisoformat(str(condition["lastTransitionTime"]).replace("Z", "+00:00"))
    return None


async def _scheduled_to_ready_s(
    kubeconfig: Path, trace: Path, name: str, delays: LifecycleDelays
) -> tuple[list[float], list[dict[str, Any]]]:
    """Replay ``trace`` with ``delays`` (objects kept), wait until every pod is Running, and return each
    pod's seconds from PodScheduled to Ready by its own conditions, and the pods; then clean up."""
    skeleton = yaml.safe_load(DEFAULT_NODE_SKELETON.read_text())
    settings = ReplaySettings(
        speed=SPEED,
        replay_name=name,
        namespace_prefix=name,
        node_pools=((skeleton, 2),),
        duration_ms=5_000,
        keep=True,
        lifecycle_delays=delays,
    )
    plan = plan_replay(read_trace(trace), settings.speed)
    async with kube_api(kubeconfig) as api:
        cluster = KubeClient(api)
        replayer = Replayer(cluster, plan, settings, pod_watch=partial(PodWatch, api))
        try:
            report = await replayer.run()
            assert report.failed == 0, report.summary()
            deadline = time.monotonic() + RUNNING_DEADLINE_S
            while True:
                pods = await cluster.list_objects("v1", "Pod", label_selector=f"{REPLAY_LABEL}={name}")
                phases = sorted((p.get("status") or {}).get("phase", "?") for p in pods)
                if len(pods) == REPLICAS and all(
                    _condition_time(p, "Ready") and _condition_time(p, "PodScheduled") for p in pods
                ):
                    break
                assert time.monotonic() < deadline, (
                    f"{name}: pods not all Running within {RUNNING_DEADLINE_S:g} s; last seen {phases}"
                )
                await asyncio.sleep(0.2)
        finally:
            await replayer.cleanup()
    waits = []
    for pod in pods:
        ready, scheduled = _condition_time(pod, "Ready"), _condition_time(pod, "PodScheduled")
        assert ready is not None
        assert scheduled is not None
        waits.append((ready - scheduled).total_seconds())
    return waits, pods


async def test_pod_startup_delay_is_scaled_by_speed(sim_kubeconfig: Path, tmp_path: Path) -> None:
    trace = _trace(tmp_path / "web.ktrace")
    delayed, pods = await _scheduled_to_ready_s(
        sim_kubeconfig, trace, "delay-start", LifecycleDelays(startup_s=10.0)
    )
    # the replayer wrote the delay divided by the speed
    assert {p["metadata"]["annotations"].get(STARTUP_DELAY) for p in pods} == {"1000ms"}
    assert all(p["status"]["phase"] == "Running" for p in pods), pods
    assert min(delayed) >= 1.0, f"a pod ran before its 1 s startup delay: {sorted(delayed)}"
    assert max(delayed) <= LOOSE_UPPER_S, f"the delay looks unscaled (10 s): {sorted(delayed)}"

    undelayed, _ = await _scheduled_to_ready_s(sim_kubeconfig, trace, "delay-none", LifecycleDelays())
    assert mean(undelayed) < mean(delayed), (sorted(undelayed), sorted(delayed))


async def test_image_pull_then_startup_delay(sim_kubeconfig: Path, tmp_path: Path) -> None:
    # 5 s of image pull (pod-pull-images), then 5 s of startup (pod-ready), with jitter: 1 s at ×10 at least
    delays = LifecycleDelays(image_pull_s=5.0, image_pull_jitter_s=2.0, startup_s=5.0, startup_jitter_s=2.0)
    waits, pods = await _scheduled_to_ready_s(
        sim_kubeconfig, _trace(tmp_path / "web.ktrace"), "delay-pull", delays
    )
    assert {p["metadata"]["annotations"].get(IMAGE_PULL_DELAY) for p in pods} == {"500ms"}
    assert min(waits) >= 1.0, f"a pod ran before its image-pull and startup delays: {sorted(waits)}"
    assert max(waits) <= LOOSE_UPPER_S + 0.4, f"the delays look unscaled: {sorted(waits)}"
    for pod in pods:
        statuses = pod["status"]["containerStatuses"]
        assert [s["state"].get("running") is not None for s in statuses] == [True], statuses
