"""CronJobs whose Jobs were recorded are replayed suspended; the others keep firing on the wall clock."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.formats.trace import read_trace
from pipeline.io.kube.types import ApiResource
from pipeline.replay.plan import cronjobs_with_recorded_jobs, plan_replay
from pipeline.replay.replayer import Replayer
from tests.data import SIMKUBE_TRACES
from tests.unit import test_replay_replayer as base
from tests.unit.test_replay_replayer import MemoryCluster, applied, fast, trace


def cronjob(name: str) -> dict[str, Any]:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": "ops"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}},
    }


def job(name: str, cron: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ops"}
    if cron is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "CronJob", "name": cron, "uid": "u"}]
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": template}}


def test_only_cronjobs_owning_a_recorded_job_are_found() -> None:
    events = [
        applied(0, cronjob("tick")),
        applied(0, cronjob("idle")),
        applied(60_000, job("tick-1", "tick")),
        applied(60_000, job("loose", None)),
    ]
    assert cronjobs_with_recorded_jobs(events) == frozenset({"batch/CronJob/ops/tick"})
    # SimKube's example records the CronJob alone: it must go on firing, or nothing of it runs
    assert plan_replay(read_trace(SIMKUBE_TRACES / "cronjob.sktrace"), 1).cronjobs_with_jobs == frozenset()


async def test_the_replay_applies_the_recorded_jobs_and_suspends_their_cronjob(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(
        base.KINDS, ("batch/v1", "CronJob"), ApiResource("batch/v1", "CronJob", "cronjobs", True)
    )
    monkeypatch.setitem(base.KINDS, ("batch/v1", "Job"), ApiResource("batch/v1", "Job", "jobs", True))
    events = [applied(0, cronjob("tick")), applied(0, cronjob("idle")), applied(1_000, job("tick-1", "tick"))]
    cluster = MemoryCluster()
    report = await Replayer(cluster, plan_replay(trace(events), 1000), fast(keep=True)).run()

    assert report.failed == 0, report.summary()
    assert cluster.objects[("CronJob", "kubetape-ops", "tick")]["spec"]["suspend"] is True
    assert "suspend" not in cluster.objects[("CronJob", "kubetape-ops", "idle")]["spec"]
    assert ("Job", "kubetape-ops", "tick-1") in cluster.objects
