"""The Simulation controller's reconcile passes against the shared in-memory apiserver (tests/fakes).

What a user relies on: a Simulation becomes one replayer Job per repetition, one at a time; the status
says what happened and why; a bad spec or source fails with the reason; a restarted controller neither
duplicates nor loses work; deleting a Simulation removes its Jobs and every replayed object.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline.controller.controller import Controller
from pipeline.controller.lease import LeaseKeeper
from pipeline.controller.objects import FINALIZER, REPLAY_LABEL, REPLAY_ROOT_API_VERSION, REPLAY_ROOT_KIND
from pipeline.controller.reconciler import Reconciler
from pipeline.controller.settings import ControllerSettings
from pipeline.controller.spec import API_VERSION, KIND
from pipeline.io.metrics import Metrics
from pipeline.model.errors import UnknownKindError
from tests.fakes.cluster import MemoryCluster
from tests.fakes.replay_job import mounted_args, mounted_document

# ---- the tests -----------------------------------------------------------------------------------
NS = "kubetape"
SETTINGS = ControllerSettings(identity="ctrl-a", namespace=NS, image="kubetape:test")
REPORT = {"events": {"applied": 7, "failed": 1}, "lateness_ms": {"p99": 4.5}, "wall_seconds": 3.2}


def simulation(name: str, **spec: Any) -> dict[str, Any]:
    body = {"source": {"traceURL": "https://traces.example/bare-pods.sktrace"}, "speed": 10, **spec}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": body}


def sim_of(cluster: MemoryCluster, name: str) -> dict[str, Any]:
    found = cluster.find(API_VERSION, KIND, None, name)
    assert found is not None
    return found


def job_of(cluster: MemoryCluster, name: str) -> dict[str, Any] | None:
    return cluster.find("batch/v1", "Job", NS, name)


def finish(cluster: MemoryCluster, job_name: str, *, ok: bool, message: str) -> None:
    """Play the Job controller and the kubelet: a finished pod with a termination message, a Job condition."""
    job = job_of(cluster, job_name)
    assert job is not None
    labels = {**job["spec"]["template"]["metadata"]["labels"], "job-name": job_name}
    terminated = {"exitCode": 0 if ok else 1, "message": message}
    cluster.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{job_name}-abcde", "namespace": NS, "labels": labels},
            "status": {"containerStatuses": [{"name": "replay", "state": {"terminated": terminated}}]},
        }
    )
    condition = {
        "type": "Complete" if ok else "Failed",
        "status": "True",
        "lastTransitionTime": "2026-01-01T00:05:00Z",
    }
    job["status"] = {"startTime": "2026-01-01T00:01:00Z", "conditions": [condition]}
    if ok:
        job["status"]["completionTime"] = "2026-01-01T00:05:00Z"


@pytest.fixture
def cluster() -> MemoryCluster:
    fake = MemoryCluster()
    account = {"name": "kubetape-replayer", "namespace": NS}
    fake.add({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": account})
    return fake


async def test_without_the_replayers_service_account_it_waits_and_says_so(cluster: MemoryCluster) -> None:
    await cluster.delete("v1", "ServiceAccount", NS, "kubetape-replayer")
    cluster.add(simulation("demo"))
    await Reconciler(cluster, SETTINGS).reconcile_all()
    status = sim_of(cluster, "demo")["status"]
    assert status["phase"] == "Pending"
    assert "ServiceAccount kubetape/kubetape-replayer" in status["message"]
    assert not cluster.of_kind("Job")


async def test_a_simulation_becomes_a_replayer_job_and_runs(cluster: MemoryCluster) -> None:
    cluster.add(simulation("demo", repetitions=2, namespacePrefix="sim", duration="2m"))
    active = await Reconciler(cluster, SETTINGS).reconcile_all()

    assert active == "demo"
    sim = sim_of(cluster, "demo")
    assert FINALIZER in sim["metadata"]["finalizers"]
    assert sim["status"]["phase"] == "Running"
    assert sim["status"]["startTime"]
    job = job_of(cluster, "demo-r1")
    assert job is not None
    assert job["metadata"]["ownerReferences"][0]["uid"] == sim["metadata"]["uid"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "kubetape:test"
    # the Job runs the replay document of its ConfigMap, owned by the Simulation as the Job is
    document = mounted_document(cluster, job)
    assert document == {
        "apiVersion": "kubetape.dev/v1",
        "kind": "ReplaySpec",
        "spec": {
            "name": "demo-r1", "speed": 10, "trace": "https://traces.example/bare-pods.sktrace",
            "duration": 120, "namespacePrefix": "sim", "reportJson": "/dev/termination-log",
        },
    }  # fmt: skip
    # no kubeconfig: in a cluster the Job uses its service account
    config_map = cluster.find("v1", "ConfigMap", NS, "demo-r1")
    assert config_map is not None
    assert config_map["metadata"]["ownerReferences"][0]["uid"] == sim["metadata"]["uid"]
    assert job["spec"]["backoffLimit"] == 0
    assert job_of(cluster, "demo-r2") is None  # repetitions run one after the other
    assert [e[2] for e in cluster.events] == ["JobCreated", "Running"]


async def test_repetitions_run_in_turn_and_the_status_keeps_each_result(cluster: MemoryCluster) -> None:
    cluster.add(simulation("demo", repetitions=2))
    reconciler = Reconciler(cluster, SETTINGS)
    await reconciler.reconcile_all()
    finish(cluster, "demo-r1", ok=True, message=json.dumps(REPORT))
    await reconciler.reconcile_all()
    assert job_of(cluster, "demo-r2") is not None
    assert sim_of(cluster, "demo")["status"]["completedRepetitions"] == 1

    finish(cluster, "demo-r2", ok=True, message=json.dumps(REPORT)[:50])  # cut off at the 4 KiB limit
    active = await reconciler.reconcile_all()

    status = sim_of(cluster, "demo")["status"]
    assert active is None
    assert status["phase"] == "Succeeded"
    assert status["completionTime"]
    assert status["completedRepetitions"] == 2
    first, second = status["repetitions"]
    assert first | {"job": "demo-r1"} == first
    assert (first["applied"], first["failed"], first["latenessP99Ms"], first["wallSeconds"]) == (
        7,
        1,
        4.5,
        3.2,
    )
    assert second["phase"] == "Succeeded"
    assert second["applied"] == 7  # read from the part the kubelet kept
    assert "latenessP99Ms" not in second
    assert "report cut at 4 KiB" in second["message"]
    assert ("demo", "Normal", "Succeeded") in [e[:3] for e in cluster.events]


async def test_a_failed_replay_fails_the_simulation_with_the_replayers_error(cluster: MemoryCluster) -> None:
    cluster.add(simulation("demo", repetitions=3))
    reconciler = Reconciler(cluster, SETTINGS)
    await reconciler.reconcile_all()
    tail = "[replay] starting\nkubetape: error: cannot read trace https://traces.example/x: HTTP 404\n"
    finish(cluster, "demo-r1", ok=False, message=tail)
    await reconciler.reconcile_all()

    status = sim_of(cluster, "demo")["status"]
    assert status["phase"] == "Failed"
    assert "repetition 1" in status["message"]
    assert "kubetape: error: cannot read trace https://traces.example/x: HTTP 404" in status["message"]
    assert job_of(cluster, "demo-r2") is None
    assert ("demo", "Warning", "Failed") in [e[:3] for e in cluster.events]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"segments": {"claimName": "segs", "from": "yesterday", "to": "now"}}, "spec.source.segments.from"),
        ({"topic": {"bootstrap": "no port", "from": "-1h", "to": "now"}}, "spec.source.topic.bootstrap"),
        ({"traceURL": "ftp://x/y"}, "spec.source.traceURL"),
        ({}, "exactly one of segments, topic or traceURL"),
    ],
)
async def test_a_spec_that_cannot_run_fails_naming_the_field(
    cluster: MemoryCluster, source: dict[str, Any], expected: str
) -> None:
    cluster.add(simulation("bad", source=source))
    await Reconciler(cluster, SETTINGS).reconcile_all()
    status = sim_of(cluster, "bad")["status"]
    assert status["phase"] == "Failed"
    assert expected in status["message"]
    assert not cluster.of_kind("Job")


async def test_a_missing_segment_volume_fails_before_any_job(cluster: MemoryCluster) -> None:
    cluster.add(simulation("segs", source={"segments": {"claimName": "nope", "from": "-30m", "to": "now"}}))
    await Reconciler(cluster, SETTINGS).reconcile_all()
    status = sim_of(cluster, "segs")["status"]
    assert status["phase"] == "Failed"
    assert "PersistentVolumeClaim 'nope' does not exist in namespace 'kubetape'" in status["message"]
    assert not cluster.of_kind("Job")


async def test_a_segment_source_mounts_its_claim_and_passes_the_range(cluster: MemoryCluster) -> None:
    cluster.add(
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "segs", "namespace": NS}}
    )
    source = {"segments": {"claimName": "segs", "path": "prod", "from": "-30m", "to": "2026-01-01T00:00:00Z"}}
    skeleton = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"type": "kwok"}}}
    pools = [{"skeleton": skeleton, "count": 4}, {"skeleton": skeleton, "count": 2}]
    cluster.add(simulation("segs", source=source, nodePools=pools))
    await Reconciler(cluster, SETTINGS).reconcile_all()

    job = job_of(cluster, "segs-r1")
    assert job is not None
    pod = job["spec"]["template"]["spec"]
    # the replayer reads its document as meant
    parsed = mounted_args(cluster, job)
    assert parsed.segments == "/var/lib/kubetape/segments/prod"
    assert (parsed.start, parsed.end) == ("-30m", "2026-01-01T00:00:00Z")
    assert parsed.nodes == [
        "/etc/kubetape/node-pools/pool-0.yaml:4",
        "/etc/kubetape/node-pools/pool-1.yaml:2",
    ]
    assert {"name": "segments", "persistentVolumeClaim": {"claimName": "segs", "readOnly": True}} in pod[
        "volumes"
    ]
    pool_files = cluster.find("v1", "ConfigMap", NS, "segs-node-pools")
    assert pool_files is not None
    assert "kind: Node" in pool_files["data"]["pool-0.yaml"]
    assert "kind: Node" in pool_files["data"]["pool-1.yaml"]


async def test_one_simulation_at_a_time_oldest_first(cluster: MemoryCluster) -> None:
    cluster.add(simulation("first"))
    cluster.add(simulation("second"))
    reconciler = Reconciler(cluster, SETTINGS)
    await reconciler.reconcile_all()
    assert sim_of(cluster, "second")["status"]["phase"] == "Pending"
    assert "waiting for Simulation first" in sim_of(cluster, "second")["status"]["message"]
    assert job_of(cluster, "second-r1") is None

    finish(cluster, "first-r1", ok=True, message=json.dumps(REPORT))
    await reconciler.reconcile_all()
    assert sim_of(cluster, "first")["status"]["phase"] == "Succeeded"
    assert sim_of(cluster, "second")["status"]["phase"] == "Running"
    assert job_of(cluster, "second-r1") is not None


async def test_pause_holds_the_next_repetition_and_resume_starts_it(cluster: MemoryCluster) -> None:
    cluster.add(simulation("demo", paused=True))
    reconciler = Reconciler(cluster, SETTINGS)
    await reconciler.reconcile_all()
    assert sim_of(cluster, "demo")["status"]["phase"] == "Paused"
    assert not cluster.of_kind("Job")

    sim_of(cluster, "demo")["spec"]["paused"] = False
    await reconciler.reconcile_all()
    assert sim_of(cluster, "demo")["status"]["phase"] == "Running"
    assert job_of(cluster, "demo-r1") is not None


async def test_pausing_a_running_repetition_stops_its_replays_clock_through_the_root(
    cluster: MemoryCluster,
) -> None:
    cluster.add(simulation("demo"))
    reconciler = Reconciler(cluster, SETTINGS)
    await reconciler.reconcile_all()
    root_name = "kubetape-demo-r1"  # the replay's root, as `kubetape replay --name demo-r1` creates it
    cluster.add(
        {"apiVersion": REPLAY_ROOT_API_VERSION, "kind": "ReplayRoot", "metadata": {"name": root_name}}
    )

    def pause_annotation() -> str | None:
        root = cluster.find(REPLAY_ROOT_API_VERSION, "ReplayRoot", None, root_name)
        assert root is not None
        return (root["metadata"].get("annotations") or {}).get("kubetape.dev/paused")

    sim_of(cluster, "demo")["spec"]["paused"] = True
    await reconciler.reconcile_all()
    assert sim_of(cluster, "demo")["status"]["phase"] == "Paused"
    assert pause_annotation() == "true"  # the replayer reads it at every sample

    sim_of(cluster, "demo")["spec"]["paused"] = False
    await reconciler.reconcile_all()
    assert sim_of(cluster, "demo")["status"]["phase"] == "Running"
    assert pause_annotation() is None


async def test_a_restarted_controller_continues_without_duplicating_work(cluster: MemoryCluster) -> None:
    cluster.add(simulation("demo", repetitions=2))
    await Reconciler(cluster, SETTINGS).reconcile_all()
    events_before = list(cluster.events)

    fresh = Reconciler(cluster, SETTINGS)  # a new process: nothing but the cluster's state
    writes = cluster.writes
    await fresh.reconcile_all()
    assert cluster.writes == writes, "a pass over an unchanged cluster must write nothing"
    assert cluster.events == events_before

    # the status write was lost after the Job was created: the next pass adopts the Job
    sim_of(cluster, "demo").pop("status")
    await fresh.reconcile_all()
    assert len(cluster.of_kind("Job")) == 1
    assert sim_of(cluster, "demo")["status"]["phase"] == "Running"
    finish(cluster, "demo-r1", ok=True, message=json.dumps(REPORT))
    await fresh.reconcile_all()
    assert job_of(cluster, "demo-r2") is not None


async def test_deleting_a_simulation_removes_its_jobs_and_replayed_objects(cluster: MemoryCluster) -> None:
    cluster.add(simulation("demo", repetitions=2))
    reconciler = Reconciler(cluster, SETTINGS)
    await reconciler.reconcile_all()
    # the replayer of repetition 1 created its root (it owns the replayed objects); another replay's stays
    for replay in ("demo-r1", "other"):
        cluster.add(
            {
                "apiVersion": "kubetape.dev/v1",
                "kind": "ReplayRoot",
                "metadata": {"name": f"kubetape-{replay}", "labels": {REPLAY_LABEL: replay}},
            }
        )
    await cluster.delete(API_VERSION, KIND, None, "demo")
    await reconciler.reconcile_all()
    assert job_of(cluster, "demo-r1") is None
    assert cluster.find("kubetape.dev/v1", "ReplayRoot", None, "kubetape-demo-r1") is None
    assert cluster.find("kubetape.dev/v1", "ReplayRoot", None, "kubetape-other") is not None
    await reconciler.reconcile_all()  # roots gone: the finalizer is released and the Simulation goes
    assert cluster.find(API_VERSION, KIND, None, "demo") is None


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_the_lease_admits_one_controller_until_its_holder_goes_silent(cluster: MemoryCluster) -> None:
    clock = Clock()
    first = LeaseKeeper(cluster, SETTINGS, clock)
    second = LeaseKeeper(cluster, ControllerSettings(identity="ctrl-b", namespace=NS), clock)
    assert await first.try_hold("demo")
    assert not await second.try_hold()
    assert second.holder == "ctrl-a"
    clock.now += timedelta(seconds=10)
    assert await first.try_hold("demo")  # renewed
    clock.now += timedelta(seconds=10)
    assert not await second.try_hold()  # 10 s after the renewal: still valid (15 s lease)

    restarted = LeaseKeeper(cluster, SETTINGS, clock)  # same identity: takes it back at once
    assert await restarted.try_hold("demo")

    clock.now += timedelta(seconds=16)  # silent longer than the lease duration
    assert await second.try_hold()
    lease = cluster.find("coordination.k8s.io/v1", "Lease", NS, "kubetape-simulation")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "ctrl-b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert not await first.try_hold()

    await second.release()
    assert await first.try_hold()  # released: no need to wait for the expiry


async def test_the_controller_loop_reconciles_until_stopped_then_gives_the_lease_up(
    cluster: MemoryCluster,
) -> None:
    cluster.add(simulation("demo"))
    settings = ControllerSettings(identity="ctrl-a", namespace=NS, renew_interval_s=0.05)
    metrics = Metrics()
    controller = Controller(cluster, settings, metrics)
    stop = asyncio.Event()
    run = asyncio.create_task(controller.run(stop))
    for _ in range(200):
        if job_of(cluster, "demo-r1") is not None:
            break
        await asyncio.sleep(0.01)
    assert controller.ready
    assert "kubetape_controller_leader 1" in metrics.render()
    stop.set()
    await asyncio.wait_for(run, 5)
    lease = cluster.find("coordination.k8s.io/v1", "Lease", NS, "kubetape-simulation")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == ""  # released: a successor need not wait for the expiry
    assert lease["metadata"]["annotations"]["kubetape.dev/active-simulation"] == "demo"


class ClusterWithoutReplayRoots(MemoryCluster):
    """A cluster where no replay has run yet: the replayer installs the ReplayRoot CRD with its first root."""

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]:
        if kind == REPLAY_ROOT_KIND:
            raise UnknownKindError(f"the apiserver serves no kind {kind!r} in {api_version!r}")
        return await super().list_objects(
            api_version, kind, label_selector=label_selector, namespace=namespace
        )

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        if kind == REPLAY_ROOT_KIND:
            raise UnknownKindError(f"the apiserver serves no kind {kind!r} in {api_version!r}")
        return await super().get(api_version, kind, namespace, name)


async def test_a_simulation_pauses_and_goes_before_any_replay_installed_the_root_crd() -> None:
    cluster = ClusterWithoutReplayRoots()
    cluster.add(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "kubetape-replayer", "namespace": NS},
        }
    )
    cluster.add(simulation("demo"))
    reconciler = Reconciler(cluster, SETTINGS)
    await reconciler.reconcile_all()
    sim_of(cluster, "demo")["spec"]["paused"] = True
    await reconciler.reconcile_all()  # no root to annotate yet: the next pass does it
    assert sim_of(cluster, "demo")["status"]["phase"] == "Paused"
    await cluster.delete(API_VERSION, KIND, None, "demo")
    await reconciler.reconcile_all()
    await reconciler.reconcile_all()
    assert cluster.find(API_VERSION, KIND, None, "demo") is None


async def test_a_deleted_simulation_loses_its_replay_namespaces_before_its_replay_root(
    cluster: MemoryCluster,
) -> None:
    # a replayer killed without cleaning up: its namespace and root are left behind; deleting the root
    # first would delete the virtual nodes with it, and pods on a deleted KWOK node stay Terminating
    cluster.add(simulation("demo"))
    reconciler = Reconciler(cluster, SETTINGS)
    await reconciler.reconcile_all()
    labels = {REPLAY_LABEL: "demo-r1"}
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sim-shop", "labels": labels}})
    cluster.add(
        {
            "apiVersion": "kubetape.dev/v1",
            "kind": "ReplayRoot",
            "metadata": {"name": "kubetape-demo-r1", "labels": labels},
        }
    )
    await cluster.delete(API_VERSION, KIND, None, "demo")
    await reconciler.reconcile_all()
    assert cluster.find("v1", "Namespace", None, "sim-shop") is None
    assert cluster.find("kubetape.dev/v1", "ReplayRoot", None, "kubetape-demo-r1") is not None
    await reconciler.reconcile_all()  # namespaces gone: now the root
    assert cluster.find("kubetape.dev/v1", "ReplayRoot", None, "kubetape-demo-r1") is None
