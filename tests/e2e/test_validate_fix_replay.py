"""validate → --fix → transform → replay on the real ``sim`` cluster: the repaired trace's pods reach
Running; the unrepaired trace is refused by the apiserver (and reported, the replay still finishing);
with every repair but the ServiceAccount placeholder, the apiserver accepts the Deployment and refuses
its pods, which is what rule E0001 warns about."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from pipeline.formats.trace import read_trace
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.report.report import ReplayReport
from pipeline.replay.rewrite import REPLAY_LABEL
from pipeline.replay.settings import ReplaySettings
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON
from pipeline.validate.apply import apply_transform
from pipeline.validate.fixes import PLACEHOLDER_IMAGE, fix_transform
from pipeline.validate.rules import validate_trace
from pipeline.validate.tracefile import read_trace_file, write_trace_file
from pipeline.validate.transform import parse_transform
from services.cli import main

T = TypeVar("T")
TRACE = "simkube-validation-trace.json"
DEPLOYMENT_KEY = "apps/Deployment/default/test-deployment"
SAFETY_LIMIT_S = 90.0
"""How long to wait for the cluster before giving up: a bound against hanging, not a speed check."""


@dataclass
class Replayed:
    """A finished replay whose objects are still in the cluster (``keep``), until the block ends."""

    report: ReplayReport
    cluster: KubeClient
    selector: str
    namespace: str

    async def pods(self) -> list[dict[str, Any]]:
        return await self.cluster.list_objects("v1", "Pod", label_selector=self.selector)


@contextlib.asynccontextmanager
async def replayed(trace: Path, kubeconfig: Path, name: str) -> AsyncIterator[Replayed]:
    """Replay ``trace`` at speed 10 keeping its objects; clean everything up when the block ends."""
    settings = ReplaySettings(
        speed=10.0,
        replay_name=name,
        namespace_prefix=name,
        node_pools=((yaml.safe_load(DEFAULT_NODE_SKELETON.read_text()), 1),),
        keep=True,
    )
    plan = plan_replay(read_trace(trace), settings.speed)
    async with kube_api(kubeconfig) as api:
        cluster = KubeClient(api)
        replayer = Replayer(cluster, plan, settings, source=str(trace))
        report = await replayer.run()
        try:
            yield Replayed(report, cluster, f"{REPLAY_LABEL}={name}", f"{name}-default")
        finally:
            await replayer.cleanup()
        assert report.cleanup.startswith("done"), report.cleanup
        assert await cluster.list_objects("v1", "Pod", label_selector=f"{REPLAY_LABEL}={name}") == []


async def eventually(
    probe: Callable[[], Awaitable[T | None]], what: str, last_seen: Callable[[], object] = lambda: None
) -> T:
    """Poll ``probe`` until it returns something; fail naming ``what`` (and ``last_seen()``, the state
    the probe last saw) after the safety limit."""
    deadline = time.monotonic() + SAFETY_LIMIT_S
    while (found := await probe()) is None:
        assert time.monotonic() < deadline, f"gave up waiting: {what}; last seen: {last_seen()}"
        await asyncio.sleep(0.5)
    return found


async def test_a_fixed_trace_replays_with_every_pod_running(
    simkube_traces: Path, sim_kubeconfig: Path, tmp_path: Path
) -> None:
    original = simkube_traces / TRACE
    fix, fixed = tmp_path / "fix.yaml", tmp_path / "fixed.json"
    assert main(["validate", str(original), "--fix", str(fix)]) == 1  # errors found, repairs written
    assert main(["transform", str(original), str(fix), "-o", str(fixed)]) == 0
    assert main(["validate", str(fixed)]) == 0

    async with replayed(fixed, sim_kubeconfig, "fixed-trace") as replay:
        assert replay.report.failed == 0, replay.report.failures
        # 7 placeholders (ServiceAccount, 3 ConfigMaps, 3 Secrets) and the Deployment
        assert replay.report.applied == 8

        seen: list[dict[str, Any]] = []

        async def all_running() -> list[dict[str, Any]] | None:
            seen[:] = await replay.pods()
            return seen if seen and all(p["status"].get("phase") == "Running" for p in seen) else None

        def pod_states() -> list[tuple[str, Any, Any]]:
            return [(p["metadata"]["name"], p["spec"].get("nodeName"), p.get("status")) for p in seen]

        pods = await eventually(all_running, "the repaired Deployment's pods to be Running", pod_states)
        assert len(pods) == 1  # the Deployment asks for the default single replica
        spec = pods[0]["spec"]
        assert spec["serviceAccountName"] == "the-service-account"
        container = spec["containers"][0]
        assert container["image"] == PLACEHOLDER_IMAGE
        assert container["envFrom"] == [
            {"configMapRef": {"name": "another-config-map"}},
            {"secretRef": {"name": "another-secret"}},
        ]


async def test_the_unfixed_trace_is_refused_and_reported_and_the_replay_finishes(
    simkube_traces: Path, sim_kubeconfig: Path
) -> None:
    async with replayed(simkube_traces / TRACE, sim_kubeconfig, "broken-trace") as replay:
        assert replay.report.failed == 1
        (failure,) = replay.report.failures
        assert failure.key == DEPLOYMENT_KEY
        # the apiserver's 422 names exactly what rules KE0010, KE0011 and KE0009 report
        assert "HTTP 422" in failure.reason
        assert "spec.selector: Required value" in failure.reason
        assert "spec.template.spec.containers[0].image: Required value" in failure.reason
        assert "envFrom: Invalid value" in failure.reason
        assert "may not have more than one field specified at a time" in failure.reason
        gone = await replay.cluster.get("apps/v1", "Deployment", replay.namespace, "test-deployment")
        assert gone is None
        assert await replay.pods() == []


async def test_without_its_service_account_the_deployment_is_accepted_but_its_pods_are_refused(
    simkube_traces: Path, sim_kubeconfig: Path, tmp_path: Path
) -> None:
    trace = read_trace_file(simkube_traces / TRACE)
    all_but_account = [f for f in validate_trace(trace) if f.code != "E0001"]
    transform = parse_transform(fix_transform(all_but_account), "every repair but E0001's")
    partly_fixed = tmp_path / "partly-fixed.json"
    write_trace_file(apply_transform(trace, transform)[0], partly_fixed)
    assert [f.code for f in validate_trace(read_trace_file(partly_fixed))] == ["E0001"]

    async with replayed(partly_fixed, sim_kubeconfig, "no-account") as replay:
        assert replay.report.failed == 0, replay.report.failures  # the Deployment itself is valid

        async def refusal() -> str | None:
            sets = await replay.cluster.list_objects("apps/v1", "ReplicaSet", label_selector=replay.selector)
            conditions = [c for rs in sets for c in (rs.get("status") or {}).get("conditions") or []]
            return next((c["message"] for c in conditions if c["type"] == "ReplicaFailure"), None)

        message = await eventually(refusal, "the ReplicaSet to report its refused pods")
        assert 'serviceaccount "the-service-account" not found' in message
        assert await replay.pods() == []
