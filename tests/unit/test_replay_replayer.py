"""The replayer against an in-memory cluster: planning, rewriting on the way, failures reported, cleanup."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.formats.trace import read_trace
from pipeline.io.kube.types import ApiResource
from pipeline.model.errors import ApiUnavailableError, KubeApiError, ObjectRejectedError, UnknownKindError
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey, key_of
from pipeline.replay import setup as replay_setup
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.rewrite import LIFETIME_ANNOTATION, REPLAY_LABEL, RESOURCE_METRICS_PATH_ANNOTATION
from pipeline.replay.settings import ReplaySettings
from pipeline.replay.setup import root_crd
from tests.data import SIMKUBE_TRACES

KINDS = {
    ("v1", "Pod"): ApiResource("v1", "Pod", "pods", True),
    ("v1", "Namespace"): ApiResource("v1", "Namespace", "namespaces", False),
    ("v1", "Node"): ApiResource("v1", "Node", "nodes", False),
    ("v1", "ConfigMap"): ApiResource("v1", "ConfigMap", "configmaps", True),
    ("kubetape.dev/v1", "ReplayRoot"): ApiResource("kubetape.dev/v1", "ReplayRoot", "replayroots", False),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ApiResource(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False
    ),
    ("scheduling.k8s.io/v1", "PriorityClass"): ApiResource(
        "scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False
    ),
}


class MemoryCluster:
    """An apiserver in a dict: applies, deletes, rejects ConfigMaps named ``bad``, flakes on demand."""

    def __init__(self, flaky: int = 0) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.applies: list[dict[str, Any]] = []
        self.flaky = flaky

    async def resource_for(self, api_version: str, kind: str) -> ApiResource:
        try:
            return KINDS[(api_version, kind)]
        except KeyError:
            raise UnknownKindError(f"the apiserver serves no kind {kind!r} in {api_version!r}") from None

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        if self.flaky:
            self.flaky -= 1
            raise ApiUnavailableError("apply: HTTP 503", status=503)
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "bad":
            raise ObjectRejectedError("apply ConfigMap bad: HTTP 422 Invalid: data too large", status=422)
        meta = obj["metadata"]
        live = {**obj, "metadata": {**meta, "uid": f"uid-{meta['name']}"}}
        if obj["kind"] == "Node":  # KWOK's node-initialize stage
            live["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        self.objects[(obj["kind"], meta.get("namespace"), meta["name"])] = live
        self.applies.append(obj)
        return live

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        if kind == "ServiceAccount" and ("Namespace", None, namespace) in self.objects:
            return {"metadata": {"name": name}}  # the controller-manager makes "default" at once
        return self.objects.get((kind, namespace, name))

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]:
        label, _, value = label_selector.partition("=")
        return [
            o
            for (k, _, _), o in self.objects.items()
            if k == kind and (not label or o["metadata"].get("labels", {}).get(label) == value)
        ]

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
    ) -> bool:
        if (kind, namespace, name) not in self.objects:
            return False
        del self.objects[(kind, namespace, name)]
        if kind == "ReplayRoot":  # the garbage collector: everything owned by the root goes,
            # and with a namespace everything in it
            self.objects = {
                k: o
                for k, o in self.objects.items()
                if all(ref.get("name") != name for ref in o["metadata"].get("ownerReferences", []))
            }
            namespaces = {n for (k, _, n) in self.objects if k == "Namespace"}
            self.objects = {k: o for k, o in self.objects.items() if k[1] is None or k[1] in namespaces}
        return True


def pod(name: str, ns: str = "prod", restart_policy: str = "Never") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": restart_policy,
            "nodeName": "n1",
            "containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 1}]}],
        },
    }


def obj(api_version: str, kind: str, name: str, ns: str | None = "prod") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def applied(ts: int, body: dict[str, Any]) -> Event:
    return Event.applied(ts, key_of(body), body, 0)


def trace(events: list[Event]) -> Any:
    return build_segment(events, start_ms=0, end_ms=max(e.ts_ms for e in events) + 1, kind=SegmentKind.TRACE)


def fast(**kwargs: Any) -> ReplaySettings:
    return ReplaySettings(speed=1000, replay_name="t1", sample_interval_s=0.01, cleanup_timeout_s=1, **kwargs)


async def test_replay_applies_rewritten_objects_reports_failures_and_cleans_up() -> None:
    cluster = MemoryCluster()
    p1 = pod("p1")
    events = [
        applied(0, p1),
        applied(0, obj("v1", "ConfigMap", "bad")),
        applied(100, obj("example.com/v1", "Widget", "w")),
        applied(200, obj("scheduling.k8s.io/v1", "PriorityClass", "high", None)),
        Event.pod_lifecycle(0, key_of(p1), owner_key=key_of(p1), pod_spec_hash=1, start_ms=0, end_ms=30_000),
        Event.deleted(300, key_of(p1), p1),
        Event.deleted(300, ObjectKey("core/Pod/prod/never"), pod("never")),
    ]
    plan = plan_replay(trace(events), speed=1000)
    replayer = Replayer(cluster, plan, fast())
    report = await replayer.run()

    assert report.applied == 2  # the pod and the PriorityClass
    assert report.deleted == 1
    assert report.deletes_missed == 1
    assert report.failed == 2
    reasons = {f.key: f.reason for f in report.failures}
    assert "HTTP 422" in reasons["core/ConfigMap/prod/bad"]
    assert "Widget" in reasons["example.com/Widget/prod/w"]
    assert report.cluster_scoped == ["scheduling.k8s.io/PriorityClass/_/high"]
    assert len(report.lateness_ms) == report.steps == 6

    applied_pod = next(o for o in cluster.applies if o["kind"] == "Pod")
    assert applied_pod["metadata"]["namespace"] == "kubetape-prod"
    assert applied_pod["metadata"]["annotations"][LIFETIME_ANNOTATION] == "0.030s"  # 30 s / 1000
    assert applied_pod["metadata"]["labels"][REPLAY_LABEL] == "t1"
    assert "nodeName" not in applied_pod["spec"]
    namespaces = [o for o in cluster.applies if o["kind"] == "Namespace"]
    assert [n["metadata"]["name"] for n in namespaces] == ["kubetape-prod"]

    assert report.cleanup.startswith("done")
    assert cluster.objects == {}, "deleting the root must take every replayed object with it"
    as_json = report.to_json()
    assert as_json["events"]["failed"] == 2
    assert as_json["lateness_ms"]["count"] == 6
    assert "FAILED core/ConfigMap/prod/bad" in report.summary()


async def test_transient_errors_are_retried_and_keep_leaves_objects() -> None:
    cluster = MemoryCluster(flaky=2)
    plan = plan_replay(trace([applied(0, pod("p"))]), speed=1)
    report = await Replayer(cluster, plan, fast(keep=True)).run()
    assert report.retries == 2
    assert report.failed == 0
    assert report.cleanup.startswith("kept")
    assert ("Pod", "kubetape-prod", "p") in cluster.objects


async def test_virtual_nodes_are_created_and_owned_by_the_root(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="pipeline.replay")
    cluster = MemoryCluster()
    skeleton = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sk"}, "status": {}}
    plan = plan_replay(trace([applied(0, pod("p"))]), speed=1)
    big = {**skeleton, "metadata": {"name": "big"}}
    pools = ((skeleton, 1), (big, 1))  # a second pool of the same skeleton must not collide
    settings = fast(keep=True, node_pools=((skeleton, 2), *pools))
    await Replayer(cluster, plan, settings).run()
    nodes = sorted(name for kind, _, name in cluster.objects if kind == "Node")
    assert nodes == ["t1-big-2-0", "t1-sk-0", "t1-sk-1", "t1-sk-1-0"]
    # the nodes were seen Ready: trace time did not start on the readiness time-out
    assert not [r.getMessage() for r in caplog.records if "not Ready in time" in r.getMessage()]


async def test_a_plain_replay_replays_the_recorded_replicas_and_not_the_hpas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests import hpa_recording as rec

    cluster = MemoryCluster()
    monkeypatch.setitem(
        KINDS, ("apps/v1", "Deployment"), ApiResource("apps/v1", "Deployment", "deployments", True)
    )
    plan = plan_replay(rec.recording([(10, 4)], span_ms=100), speed=1000)
    report = await Replayer(cluster, plan, fast(keep=True)).run()
    assert report.failed == 0, report.summary()
    assert report.hpa_writes_left_out == 1
    assert not [o for o in cluster.applies if o["kind"] == "HorizontalPodAutoscaler"]
    assert cluster.objects[("Deployment", "kubetape-hpa-shop", "web")]["spec"]["replicas"] == 4
    assert "recorded HPAs not applied (1 write(s))" in report.summary()


async def test_virtual_nodes_tell_metrics_server_where_kwok_serves_their_metrics() -> None:
    cluster = MemoryCluster()
    skeleton = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sk"}, "status": {}}
    plan = plan_replay(trace([applied(0, pod("p"))]), speed=1)
    await Replayer(cluster, plan, fast(keep=True, node_pools=((skeleton, 1),))).run()
    node = cluster.objects[("Node", None, "t1-sk-0")]
    assert (
        node["metadata"]["annotations"][RESOURCE_METRICS_PATH_ANNOTATION]
        == "/metrics/nodes/t1-sk-0/metrics/resource"
    )


def test_plan_of_simkube_bare_pods_trace_scales_recorded_lifetimes() -> None:
    plan = plan_replay(read_trace(SIMKUBE_TRACES / "bare-pods.sktrace"), speed=10)
    assert [s.ts_ms - plan.start_ms for s in plan.steps] == [0, 42_000, 102_000, 162_000]
    lifetimes = {k.rsplit("/", 1)[1]: v for k, v in plan.lifetimes_ms.items()}
    assert lifetimes == {
        "bare-pod-1781282449": 1_200.0,
        "bare-pod-1781282509": 3_000.0,
        "bare-pod-1781282570": 3_000.0,
    }  # the last pod never finished: no lifetime, it keeps running
    assert plan.recorded_running == [
        (0, 1),
        (12_000, 0),
        (43_000, 1),
        (73_000, 0),
        (103_000, 1),
        (133_000, 0),
        (163_000, 1),
    ]


def test_plan_of_simkube_cronjob_trace_gives_the_owner_its_job_duration() -> None:
    plan = plan_replay(read_trace(SIMKUBE_TRACES / "cronjob.sktrace"), speed=3)
    assert plan.lifetimes_ms == {ObjectKey("batch/CronJob/default/hello-simkube"): pytest.approx(10_000.0)}
    assert [e.payload.type.value for e in plan.steps] == ["applied", "deleted"]


async def test_malformed_recorded_object_is_reported_not_fatal() -> None:
    cluster = MemoryCluster()
    malformed = Event.applied(0, ObjectKey("core/Pod/prod/odd"), {"kind": "Pod", "metadata": {}}, 0)
    plan = plan_replay(trace([malformed, applied(10, pod("fine"))]), speed=1000)
    report = await Replayer(cluster, plan, fast()).run()
    assert report.applied == 1
    assert [f.key for f in report.failures] == ["core/Pod/prod/odd"]
    assert "malformed recorded object" in report.failures[0].reason


async def until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` on a fake cluster: a bound against hanging, counted in event-loop turns of
    10 ms (a loaded machine makes them longer, never fewer)."""
    for _ in range(3_000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached within 3,000 polls")


SECOND_POD_MS = 2_000
"""Trace time of the paused test's second pod: room for the replayer to see the pause before it is due."""


class HangingCluster(MemoryCluster):
    """Never answers the apply of a pod named ``hang``."""

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        if obj["metadata"]["name"] == "hang":
            await asyncio.Event().wait()
        return await super().apply(obj, force=force)


async def test_stop_skips_later_events_and_still_cleans_up() -> None:
    cluster = MemoryCluster()
    events = [applied(0, pod("a")), applied(60_000, pod("b"))]
    replayer = Replayer(cluster, plan_replay(trace(events), speed=1), fast())
    task = asyncio.create_task(replayer.run())
    await until(lambda: replayer.report.applied >= 1)
    replayer.stop()
    report = await asyncio.wait_for(task, 5)
    assert report.stopped_early
    assert report.not_started == 1
    assert report.cleanup.startswith("done")
    assert cluster.objects == {}


async def test_cancelled_replay_still_deletes_its_root() -> None:
    cluster = HangingCluster()
    replayer = Replayer(cluster, plan_replay(trace([applied(0, pod("hang"))]), speed=1), fast())
    task = asyncio.create_task(replayer.run())
    await until(lambda: any(kind == "Namespace" for kind, _, _ in cluster.objects))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert replayer.report.cleanup.startswith("done")
    assert cluster.objects == {}


class SlowServiceAccounts(MemoryCluster):
    """The namespace's default ServiceAccount appears only after a few polls, as on a busy cluster."""

    def __init__(self) -> None:
        super().__init__()
        self.sa_polls = 0
        self.pod_applied_after_polls: int | None = None

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        if kind == "ServiceAccount":
            self.sa_polls += 1
            return {"metadata": {"name": name}} if self.sa_polls > 3 else None
        return await super().get(api_version, kind, namespace, name)

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        if obj["kind"] == "Pod":
            self.pod_applied_after_polls = self.sa_polls
        return await super().apply(obj, force=force)


async def test_pods_wait_for_the_new_namespace_default_service_account() -> None:
    cluster = SlowServiceAccounts()
    report = await Replayer(cluster, plan_replay(trace([applied(0, pod("p"))]), speed=1), fast()).run()
    assert report.failed == 0
    assert cluster.pod_applied_after_polls == 4


def deployment(name: str, ns: str = "prod") -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def test_only_pods_that_end_by_themselves_get_a_lifetime() -> None:
    # A Deployment's pods (restartPolicy Always) that were deleted by a rollout are recorded as finished
    # lifecycles; enforcing that duration would make replayed Deployment pods complete instead of being
    # replaced by the simulated controller. A bare pod with restartPolicy Never did end by itself.
    web, batch = deployment("web"), pod("batch")
    web_key, batch_key = key_of(web), key_of(batch)
    events = [
        applied(0, web),
        applied(0, batch),
        Event.pod_lifecycle(
            10,
            ObjectKey("core/Pod/prod/web-1"),
            owner_key=web_key,
            pod_spec_hash=1,
            start_ms=0,
            end_ms=20_000,
        ),
        Event.pod_lifecycle(10, batch_key, owner_key=batch_key, pod_spec_hash=2, start_ms=0, end_ms=4_000),
    ]
    plan = plan_replay(trace(events), speed=2)
    assert plan.lifetimes_ms == {batch_key: 2_000.0}
    assert plan.recorded_by_owner == {
        str(web_key): [(0, 1), (20_000, 0)],
        str(batch_key): [(0, 1), (4_000, 0)],
    }


class KwokLikeCluster(MemoryCluster):
    """Pods run as soon as they are applied, as on a KWOK node."""

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        live = await super().apply(obj, force=force)
        if obj["kind"] == "Pod":
            live["status"] = {"phase": "Running"}
        return live


async def test_replayed_pods_are_counted_per_recorded_owner_beside_the_recording() -> None:
    batch, extra = pod("batch"), pod("extra")
    batch_key = key_of(batch)
    events = [
        applied(0, batch),
        applied(0, extra),  # recorded as an object but never seen running: a fidelity error of one pod
        Event.pod_lifecycle(0, batch_key, owner_key=batch_key, pod_spec_hash=1, start_ms=0, end_ms=None),
    ]
    cluster = KwokLikeCluster()
    report = await Replayer(cluster, plan_replay(trace(events), speed=1000), fast(keep=True)).run()

    live = cluster.objects[("Pod", "kubetape-prod", "batch")]
    assert live["metadata"]["annotations"]["kubetape.dev/recorded-owner"] == str(batch_key)
    assert report.recorded_by_owner == {str(batch_key): [(0, 1)]}
    owners = {o["owner"]: o for o in report.to_json()["owner_fidelity"]["owners"]}
    assert owners[str(batch_key)]["max_error"] == 0
    assert owners["core/Pod/prod/extra"]["max_error"] == 1
    assert owners["core/Pod/prod/extra"]["recorded_peak"] == 0
    assert "largest error 1 pod(s) (core/Pod/prod/extra)" in report.summary()


async def test_an_annotation_on_the_root_pauses_the_trace_clock_until_removed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # how the Simulation controller pauses a replay running in a Job's pod
    caplog.set_level("INFO", logger="pipeline.replay")
    cluster = MemoryCluster()
    events = [applied(0, pod("first")), applied(SECOND_POD_MS, pod("second"))]
    settings = ReplaySettings(
        speed=1, replay_name="t1", sample_interval_s=0.01, cleanup_timeout_s=1, keep=True
    )
    replayer = Replayer(cluster, plan_replay(trace(events), speed=1), settings)
    run = asyncio.create_task(replayer.run())
    await until(lambda: ("Pod", "kubetape-prod", "first") in cluster.objects)
    root = cluster.objects[("ReplayRoot", None, "kubetape-t1")]
    root["metadata"]["annotations"] = {"kubetape.dev/paused": "true"}
    await until(lambda: any("paused by the root" in r.getMessage() for r in caplog.records))
    paused_at_ms = replayer.trace_elapsed_ms()
    assert paused_at_ms < SECOND_POD_MS, "the pause was seen only after the second pod was due"
    # while paused, wall time passes but trace time does not, and the second pod stays unapplied
    await asyncio.sleep(0.2)  # the pause lasting: a slower machine only makes it shorter in samples
    assert replayer.trace_elapsed_ms() == paused_at_ms
    assert ("Pod", "kubetape-prod", "second") not in cluster.objects
    assert not run.done()
    root["metadata"]["annotations"] = {}
    report = await asyncio.wait_for(run, 5)
    assert ("Pod", "kubetape-prod", "second") in cluster.objects
    assert report.failed == 0


class SlowGarbageCluster(MemoryCluster):
    """The root lingers for a while after its delete, as with thousands of dependents."""

    def __init__(self, lingering_gets: int) -> None:
        super().__init__()
        self.lingering_gets = lingering_gets

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        if kind == "ReplayRoot" and self.lingering_gets > 0:
            self.lingering_gets -= 1
            await asyncio.sleep(0.01)
            return {"metadata": {"name": name}}
        return await super().get(api_version, kind, namespace, name)


async def test_a_long_cleanup_says_how_far_it_is(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="pipeline.replay.replayer")
    cluster = SlowGarbageCluster(lingering_gets=3)  # the cleanup polls every 0.5 s
    settings = replace(fast(cleanup_progress_every_s=0.02), cleanup_timeout_s=30)
    report = await Replayer(cluster, plan_replay(trace([applied(0, pod("p1"))]), speed=1000), settings).run()
    assert report.cleanup.startswith("done"), report.cleanup
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cleanup of t1:")]
    assert progress, [r.getMessage() for r in caplog.records]
    assert "the garbage collector removes the rest" in progress[0]
    assert "pod(s) left" in progress[0]


class ClusterWithoutRootCrd(MemoryCluster):
    """A plain simulated cluster: it serves no ReplayRoot until the CRD is applied, and the CRD is
    Established only after ``pending_gets`` reads (a new CRD has no conditions at first); discovery
    lags behind for ``stale_discoveries`` more lookups."""

    def __init__(self, pending_gets: int, stale_discoveries: int = 0) -> None:
        super().__init__()
        self.pending_gets = pending_gets
        self.stale_discoveries = stale_discoveries

    async def resource_for(self, api_version: str, kind: str) -> ApiResource:
        if kind == "ReplayRoot":
            crd = self.objects.get(("CustomResourceDefinition", None, "replayroots.kubetape.dev"))
            established = crd is not None and "status" in crd
            if not established or self.stale_discoveries > 0:
                self.stale_discoveries -= established
                raise UnknownKindError("the apiserver serves no kind 'ReplayRoot' in 'kubetape.dev/v1'")
        return await super().resource_for(api_version, kind)

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        await self.resource_for(obj["apiVersion"], obj["kind"])  # as KubeClient.apply does
        return await super().apply(obj, force=force)

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        live = await super().get(api_version, kind, namespace, name)
        if kind == "CustomResourceDefinition" and live is not None:
            if self.pending_gets > 0:
                self.pending_gets -= 1
            else:
                live["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
        return live


async def test_a_cluster_without_the_root_crd_gets_it_before_the_root() -> None:
    cluster = ClusterWithoutRootCrd(pending_gets=3, stale_discoveries=2)
    settings = fast(keep=True)
    report = await Replayer(cluster, plan_replay(trace([applied(0, pod("p1"))]), speed=1000), settings).run()
    assert report.failed == 0, report.failures
    kinds = [o["kind"] for o in cluster.applies]
    assert kinds[:2] == ["CustomResourceDefinition", "ReplayRoot"], kinds
    root = cluster.objects[("ReplayRoot", None, "kubetape-t1")]
    assert root["apiVersion"] == "kubetape.dev/v1"
    assert root["metadata"]["labels"] == {REPLAY_LABEL: "t1"}
    assert ("Pod", "kubetape-prod", "p1") in cluster.objects


async def test_a_root_crd_that_never_becomes_established_fails_the_replay_with_its_conditions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replay_setup, "ROOT_CRD_TIMEOUT_S", 0.3)
    cluster = ClusterWithoutRootCrd(pending_gets=10**9)
    with pytest.raises(
        KubeApiError, match=r"replayroots\.kubetape\.dev not Established after .*last conditions: \[\]"
    ):
        await Replayer(cluster, plan_replay(trace([applied(0, pod("p1"))]), speed=1000), fast()).run()
    assert not [o for o in cluster.applies if o["kind"] == "Pod"]


def test_the_replayer_installs_the_same_root_crd_as_k8s_sim() -> None:
    shipped = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "k8s/sim/replayroot-crd.yaml").read_text()
    )
    assert shipped == root_crd()
