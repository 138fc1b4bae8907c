"""A stack cluster started with metrics serves the Metrics API from KWOK's emulated kubelet metrics, and
the cluster's own HPA acts on it: pods annotated with a CPU usage above their request are scaled up, and
scaled down once their usage is lowered. A recording of an HPA scaling up under rising load, replayed
with ``--autoscaler hpa``, has the simulated HPA scale the same way from the recorded load. The watcher
(``kubetape watch``) records the usage set on pods on ``kubetape.usage``, and the sink stores it.

The cluster is the module's own (``metrics``), deleted after it: the session's ``source`` and ``sim``
stay as they were. Its nodes are made from the stack's default node skeleton, as ``kubetape stack up
--nodes`` makes them, so this also proves that every such node can be scraped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.formats.segment.content import usage_order
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.usage_window import usage_window
from pipeline.formats.wire.usage import decode_usage
from pipeline.io.http import HttpSettings
from pipeline.io.kafka.settings import USAGE_TOPIC, KafkaSettings
from pipeline.io.kube.client import FIELD_MANAGER, KubeClient
from pipeline.model.errors import KubetapeError
from pipeline.model.events import EventType
from pipeline.model.keys import ClusterId
from pipeline.model.timespec import parse_go_duration
from pipeline.model.usage import UsageSample
from pipeline.replay.hpa.load import LoadModel
from pipeline.replay.hpa.timing import KUBE_CONTROLLER_MANAGER, METRICS_SERVER
from pipeline.replay.replayer import Replayer
from pipeline.replay.run import LoadedTrace, PodAutoscaling, ReplayRun, ReplaySpec, TargetCluster
from pipeline.replay.settings import ReplaySettings
from pipeline.sink.service import SinkServiceSettings, run_sink_service
from pipeline.stack import kwok
from pipeline.stack.stack import LocalStack
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportRequest, export_window
from pipeline.store.store_url import LocalLocation, cluster_store_location, open_segment_store
from pipeline.store.usage_history import open_usage_store, stored_usage, usage_store_location
from services import hpa_workload
from services.local_pod_autoscaler import LocalPodAutoscaler
from tests import hpa_recording as rec
from tests.integration.test_watch_service import read_topic, running_watcher
from tests.polling import eventually_sync

CLUSTER = "metrics"
NAMESPACE = "hpa-metrics"
APP = "busy"
USAGE_ANNOTATION = "kwok.x-k8s.io/usage-cpu"
REQUEST_M = 100
HIGH_USAGE_M = 180
LOW_USAGE_M = 10
MAX_REPLICAS = 4
# metrics-server scrapes every 15 s and needs two scrapes for a CPU rate; the HPA syncs every 15 s
METRICS_TIMEOUT_S = 150.0
SCALING_TIMEOUT_S = 150.0


# ---- recording the load -------------------------------------------------------------------------------
RECORD_NAMESPACE = "usage-record"
LOADED = "loaded"
LOADED_CPU_M = 120
LOADED_MEMORY = 96 * 2**20


def _loaded_deployment() -> dict[str, Any]:
    labels = {"app": LOADED}
    annotations = {USAGE_ANNOTATION: f"{LOADED_CPU_M}m", "kwok.x-k8s.io/usage-memory": "96Mi"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": LOADED, "namespace": RECORD_NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {"containers": [{"name": "app", "image": "example/loaded:1"}]},
            },
        },
    }


@pytest.fixture(scope="module")
def metered(local_stack: LocalStack) -> Iterator[kwok.KwokCluster]:
    info = local_stack.up([CLUSTER], metrics=True)
    cluster = kwok.KwokCluster(CLUSTER, local_stack.kwok_workdir, info.bin_dir)
    try:
        local_stack.add_nodes(CLUSTER, kwok.DEFAULT_NODE_SKELETON, 2, prefix="metered")
        # the recording test's workload starts now: its pods' metrics (two scrapes, ~30 s) are ready
        # by the time the HPA test before it is done, so recording them costs seconds, not a minute
        cluster.kubectl("create", "namespace", RECORD_NAMESPACE)
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_loaded_deployment()))
        yield cluster
    finally:
        local_stack.delete_cluster(CLUSTER)


def _deployment() -> dict[str, Any]:
    labels = {"app": APP}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {USAGE_ANNOTATION: f"{HIGH_USAGE_M}m"}},
                "spec": {
                    # one pod on each node at first, so that every node's metrics are needed
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": labels},
                        }
                    ],
                    "containers": [
                        {
                            "name": "app",
                            "image": "example/busy:1",
                            "resources": {"requests": {"cpu": f"{REQUEST_M}m", "memory": "64Mi"}},
                        }
                    ],
                },
            },
        },
    }


def _hpa() -> dict[str, Any]:
    fast = {"type": "Percent", "value": 100, "periodSeconds": 15}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": APP, "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
            "minReplicas": 1,
            "maxReplicas": MAX_REPLICAS,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                }
            ],
            # the controller's 5-minute downscale stabilization would outlast the test: no window here
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [fast]},
                "scaleDown": {"stabilizationWindowSeconds": 0, "policies": [fast]},
            },
        },
    }


def _millicores(quantity: str) -> Decimal:
    units = {"n": Decimal("1e-6"), "u": Decimal("1e-3"), "m": Decimal(1)}
    if quantity[-1] in units:
        return Decimal(quantity[:-1]) * units[quantity[-1]]
    return Decimal(quantity) * 1000


def _get(cluster: kwok.KwokCluster, path: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(cluster.kubectl("get", "--raw", path))
    return loaded


def _pods_by_node(cluster: kwok.KwokCluster) -> dict[str, str]:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"app={APP}", "-o", "json"))
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in pods["items"]
        if p["status"].get("phase") == "Running"
    }


def _usage(cluster: kwok.KwokCluster) -> dict[str, Decimal]:
    """PodMetrics of the app's pods: pod name → CPU millicores (the Metrics API the HPA reads)."""
    try:
        listed = _get(cluster, f"/apis/metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods")
    except Exception as exc:  # the APIService answers 503 until metrics-server has scraped once
        return {"<unavailable>": Decimal(-1), str(exc)[-200:]: Decimal(-1)}
    return {
        m["metadata"]["name"]: sum((_millicores(c["usage"]["cpu"]) for c in m["containers"]), Decimal(0))
        for m in listed["items"]
        if m["metadata"].get("labels", {}).get("app") == APP
    }


def _replicas(cluster: kwok.KwokCluster) -> dict[str, Any]:
    hpa = json.loads(cluster.kubectl("get", "hpa", APP, "-n", NAMESPACE, "-o", "json"))
    status = hpa.get("status", {})
    return {
        "desired": status.get("desiredReplicas"),
        "deployment": json.loads(
            cluster.kubectl("get", "deployment", APP, "-n", NAMESPACE, "-o", "jsonpath={.spec.replicas}")
        ),
        "metrics": status.get("currentMetrics"),
        "conditions": [(c["type"], c["status"], c.get("reason")) for c in status.get("conditions", [])],
    }


def test_the_metrics_api_serves_annotated_usage_from_every_node_and_the_hpa_scales_on_it(
    metered: kwok.KwokCluster,
) -> None:
    cluster = metered
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_deployment()))

    def placed_and_measured() -> tuple[dict[str, str], dict[str, Decimal]]:
        return _pods_by_node(cluster), _usage(cluster)

    def on_each_node_near_the_annotation(state: tuple[dict[str, str], dict[str, Decimal]]) -> bool:
        pods, usage = state
        return (
            len(set(pods.values())) == 2
            and set(pods) <= set(usage)
            and all(abs(usage[p] - HIGH_USAGE_M) <= HIGH_USAGE_M * Decimal("0.1") for p in pods)
        )

    eventually_sync(
        placed_and_measured,
        on_each_node_near_the_annotation,
        f"PodMetrics of {APP}'s two pods, one per node, near {HIGH_USAGE_M}m (pods by node, usage)",
        timeout_s=METRICS_TIMEOUT_S,
        interval_s=3.0,
    )
    nodes = {m["metadata"]["name"] for m in _get(cluster, "/apis/metrics.k8s.io/v1beta1/nodes")["items"]}
    assert {"metered-0", "metered-1"} <= nodes, f"NodeMetrics only for {sorted(nodes)}"

    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_hpa()))
    eventually_sync(
        lambda: _replicas(cluster),
        lambda seen: seen["deployment"] == MAX_REPLICAS,
        f"the HPA to scale {APP} from 2 to {MAX_REPLICAS} replicas at {HIGH_USAGE_M}m of {REQUEST_M}m",
        timeout_s=SCALING_TIMEOUT_S,
        interval_s=3.0,
    )

    # the load falls: the running pods' usage annotation is lowered (no rollout, the same pods)
    cluster.kubectl(
        "annotate", "pods", "-n", NAMESPACE, "-l", f"app={APP}", "--overwrite",
        f"{USAGE_ANNOTATION}={LOW_USAGE_M}m",
    )  # fmt: skip
    eventually_sync(
        lambda: _replicas(cluster),
        lambda seen: seen["deployment"] < MAX_REPLICAS,
        f"the HPA to scale {APP} down once its usage fell to {LOW_USAGE_M}m",
        timeout_s=SCALING_TIMEOUT_S,
        interval_s=3.0,
    )


# the replay: 2 pods at 20 % until 30 s, then at 180 %; production's HPA went 2 -> 4 at 60 s
REPLAY_SPEED = 10.0
REPLAY_SPAN_MS = 1_800_000
"""At most 180 wall seconds at x10; the replay is finished once the simulated HPA's decision has held
for HELD_S. The cluster's controller-manager and metrics-server are restarted at x10 as `kubetape
replay` does (sync 1.5 s, resolution 1.5 s): the new nodes' first scrapes, two scrapes of each new pod
and a sync put the decision a few wall s after the load rose (docs/hpa-replay.md gives the figures;
45-70 wall s with the processes unscaled)."""
HELD_S = 10.0
RECORDED_SCALE_UP = (60_000, rec.MAX_REPLICAS)


REPLAYED_NAMESPACE = f"hpa-replay-{rec.NAMESPACE}"


class _SimulatedHpa:
    """Beside a replay: reads its HPA and the HPA's Deployment from the simulated cluster every
    second (the replay's cleanup deletes them), keeping the last of each, every ``lastScaleTime`` the
    HPA stated and every condition it was in, for what the test asserts of them and its failure
    messages."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace, self.name = namespace, name
        self.hpa: dict[str, Any] | None = None
        self.deployment: dict[str, Any] | None = None
        self.scale_times: list[str] = []
        self.conditions: set[tuple[str, str, str]] = set()
        """(type, status, reason) of every condition the HPA stated."""

    @property
    def hpa_status(self) -> object:
        return "never read" if self.hpa is None else self.hpa.get("status")

    async def read(self, cluster: KubeClient) -> None:
        with contextlib.suppress(KubetapeError):
            hpa = await cluster.get("autoscaling/v2", "HorizontalPodAutoscaler", self.namespace, self.name)
            deployment = await cluster.get("apps/v1", "Deployment", self.namespace, self.name)
            if hpa is not None:
                self.hpa = hpa
                status = hpa.get("status") or {}
                scaled = status.get("lastScaleTime")
                if scaled and scaled not in self.scale_times:
                    self.scale_times.append(scaled)
                self.conditions |= {
                    (c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []
                }
            if deployment is not None:
                self.deployment = deployment

    async def __call__(self, replayer: Replayer, cluster: KubeClient) -> None:
        while True:
            await asyncio.sleep(1.0)
            await self.read(cluster)


class _FinishOnceHeld(_SimulatedHpa):
    """Beside the replay: also ends it once the owner has run its recorded maximum for HELD_S wall
    seconds."""

    def __init__(self) -> None:
        super().__init__(REPLAYED_NAMESPACE, rec.APP)

    async def __call__(self, replayer: Replayer, cluster: KubeClient) -> None:
        since: float | None = None
        while True:
            await asyncio.sleep(1.0)
            await self.read(cluster)
            samples = replayer.report.owner_samples
            at_max = bool(samples) and samples[-1].running.get(str(rec.OWNER), 0) == rec.MAX_REPLICAS
            since = (since or time.monotonic()) if at_max else None
            if since is not None and time.monotonic() - since >= HELD_S:
                replayer.finish()
                return


@pytest.mark.timeout(600)  # a cluster of its own when run alone, and the replay's 180 s at most
async def test_a_replay_with_the_hpa_deciding_scales_from_the_recorded_load(
    local_stack: LocalStack, metered: kwok.KwokCluster
) -> None:
    trace = rec.recording([RECORDED_SCALE_UP], span_ms=REPLAY_SPAN_MS)
    spec = ReplaySpec(
        LoadedTrace(trace, "hpa-recording"),
        ReplaySettings(
            speed=REPLAY_SPEED,
            replay_name="hpa-replay",
            namespace_prefix="hpa-replay",
            node_pools=((yaml.safe_load(kwok.DEFAULT_NODE_SKELETON.read_text()), 2),),
        ),
        TargetCluster(metered.kubeconfig),
        pod_autoscaling=PodAutoscaling(
            LoadModel.CONSERVE, rec.rising_load(REPLAY_SPAN_MS, rise_at_ms=30_000)
        ),
    )
    beside = _FinishOnceHeld()
    processes = LocalPodAutoscaler(local_stack.stack_dir, metered.kubeconfig)
    report = await ReplayRun(spec, pod_autoscaler=processes).run(beside=beside)
    summary = f"{report.summary()}\nthe simulated HPA's last status: {beside.hpa_status}"
    assert report.failed == 0, summary
    # (not the cleanup: the module's cluster goes with it, and a loaded machine's garbage collector
    # may take longer than the replay waits)
    hpa = report.pod_autoscaling
    assert hpa is not None, summary
    assert hpa["load_model"] == "conserve"
    [owner] = hpa["owners"]
    assert owner["owner"] == str(rec.OWNER)
    assert owner["replica_writes_left_out"] == 1, "production's HPA's write was left to the simulated one"
    assert hpa["usage_writes"] > 0, summary
    applied = {setting["name"]: setting["applied"] for setting in hpa["settings"]}
    assert applied[f"{KUBE_CONTROLLER_MANAGER} --horizontal-pod-autoscaler-sync-period"] == "1s500ms", applied
    assert applied["metrics-server --metric-resolution"] == "1s500ms", applied
    assert f"the simulated HPA decides 1 owner(s) ({rec.OWNER})" in summary
    # the simulated HPA scaled the owner up to what the recorded one reached (its 4 pods then sharing
    # the recorded 360m at 90 %, above its 50 % target) and, from its reaction on, stayed within one
    # pod of the recording
    running = [(round(s.trace_ms), s.running.get(str(rec.OWNER), 0)) for s in report.owner_samples]
    reacted = [i for i, (_, count) in enumerate(running) if count == rec.MAX_REPLICAS]
    assert reacted, f"the simulated HPA never scaled to {rec.MAX_REPLICAS}: {running}\n{summary}"
    # docs/hpa-replay.md's figure: trace s from the load's rise (30 s) to the pods running
    print(
        f"x{REPLAY_SPEED:g}: {rec.MAX_REPLICAS} pods running "
        f"{(running[reacted[0]][0] - 30_000) / 1000:.0f} trace s after the load rose"
    )
    after = [count for _, count in running[reacted[0] :]]
    assert all(abs(count - rec.MAX_REPLICAS) <= 1 for count in after), f"{running}\n{summary}"
    assert after[-1] == rec.MAX_REPLICAS, f"{running}\n{summary}"
    assert_the_simulated_hpa_decided(beside, rec.MAX_REPLICAS, summary)
    assert beside.hpa is not None
    assert beside.hpa["status"].get("currentReplicas") == rec.MAX_REPLICAS, summary  # held HELD_S there


SCALE_WRITER = "kube-controller-manager"
"""The field manager of the HPA controller's writes (kube-controller-manager's user agent)."""


def assert_the_simulated_hpa_decided(seen_hpa: _SimulatedHpa, replicas: int, summary: str) -> None:
    """The simulated cluster's own evidence, not the report's counters: its HPA, last read, says it
    scaled the Deployment to ``replicas``, it computed replicas from its metric while the replay ran
    (the metric may be gone by the end, with the recorded load), and the Deployment's replicas were
    written through the scale subresource by the controller-manager, not by the replayer (whose
    recorded writes a replay of the recorded replicas would have made, leaving the HPA nothing to do)."""
    hpa, deployment = seen_hpa.hpa, seen_hpa.deployment
    assert hpa is not None, f"the HPA was never read from the cluster\n{summary}"
    assert deployment is not None, f"the Deployment was never read from the cluster\n{summary}"
    status = hpa.get("status") or {}
    seen = f"the HPA's status: {status}\n{summary}"
    # (desired, not current: the HPA states the replicas it found at its next sync, 1.5 s on at x10)
    assert status.get("desiredReplicas") == replicas, seen
    assert seen_hpa.scale_times, f"the HPA never scaled anything; {seen}"
    states = {(kind, state) for kind, state, _ in seen_hpa.conditions}
    seen = f"{seen}\nevery condition it stated: {sorted(seen_hpa.conditions)}"
    assert ("AbleToScale", "True") in states, seen
    assert ("ScalingActive", "True") in states, f"the HPA never computed from a metric; {seen}"
    managed = deployment["metadata"].get("managedFields") or []
    owners = [
        (m.get("manager"), m.get("operation"), m.get("subresource"))
        for m in managed
        if "f:replicas" in ((m.get("fieldsV1") or {}).get("f:spec") or {})
    ]
    seen = f"spec.replicas managed by (manager, operation, subresource) {owners}; {seen}"
    assert deployment["spec"]["replicas"] == replicas, seen
    assert owners, seen
    assert all((manager or "").startswith(SCALE_WRITER) for manager, _, _ in owners), seen
    assert all(subresource == "scale" for _, _, subresource in owners), seen
    assert FIELD_MANAGER not in {manager for manager, _, _ in owners}, seen


async def test_the_usage_that_was_set_is_recorded_stored_and_exported(
    metered: kwok.KwokCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    cluster = metered  # the fixture started the loaded Deployment
    try:
        config = tmp_path / "tracer.yaml"
        config.write_text(
            json.dumps(
                {
                    "trackedObjects": {"apps/v1.Deployment": {"trackLifecycle": True}},
                    "namespaces": {"allow": [RECORD_NAMESPACE]},
                }
            )
        )
        cluster_id = ClusterId(f"it-usage-{uuid.uuid4().hex[:8]}")
        owner = f"apps/Deployment/{RECORD_NAMESPACE}/{LOADED}"
        samples: list[UsageSample] = []

        async def recorded() -> list[UsageSample]:
            records = await read_topic(kafka_bootstrap, USAGE_TOPIC, cluster_id)
            return [decode_usage(value, f"{USAGE_TOPIC} {key}") for key, value, _ in records if value]

        def both_pods_at_the_set_usage(seen: list[UsageSample]) -> bool:
            # two such samples: the export below starts between them, so the first is folded in
            return (
                sum(
                    s.owner_key == owner
                    and not s.gap
                    and s.pods == 2
                    and abs(s.cpu_millicores - 2 * LOADED_CPU_M) <= 2 * LOADED_CPU_M * 0.1
                    for s in seen
                )
                >= 2
            )

        args = ("--usage-every", "3", "--cluster-id", cluster_id)
        async with running_watcher(config, cluster.kubeconfig, kafka_bootstrap, *args) as watcher:
            deadline = time.monotonic() + METRICS_TIMEOUT_S
            while not both_pods_at_the_set_usage(samples := await recorded()):
                if time.monotonic() > deadline:
                    exposed = (await watcher.metrics()).splitlines()
                    usage_metrics = [m for m in exposed if "usage" in m and not m.startswith("#")]
                    raise AssertionError(
                        f"no usage sample of {owner} with 2 pods near {2 * LOADED_CPU_M}m; last seen: "
                        f"{samples[-3:]}; watcher metrics: {usage_metrics}"
                    )
                await asyncio.sleep(2.0)
            assert await watcher.terminate() == 0
        # a stopping watcher says the load is unknown from its stop on: the recording does not hold the
        # last load across the time no watcher runs (docs/usage.md, the watcher's own outage)
        samples = await recorded()
        last_of_owner = max((s for s in samples if s.owner_key == owner), key=lambda s: s.ts_ms)
        assert last_of_owner.gap, f"no stop gap after the watcher stopped; last samples: {samples[-3:]}"
        hashes = {
            p["metadata"]["labels"]["pod-template-hash"]
            for p in json.loads(
                cluster.kubectl("get", "pods", "-n", RECORD_NAMESPACE, "-l", f"app={LOADED}", "-o", "json")
            )["items"]
        }
        full = [s for s in samples if s.owner_key == owner and not s.gap and s.pods == 2]
        last = full[-1]
        assert {s.template_hash for s in full} == hashes
        assert [c.name for c in last.containers] == ["app"]
        # memory is a gauge: exact; CPU a rate over two scrapes, so near what was set
        assert last.memory_bytes == 2 * LOADED_MEMORY
        per_pod_cpu, per_pod_memory = last.per_pod()["app"]
        assert abs(per_pod_cpu - LOADED_CPU_M) <= LOADED_CPU_M * 0.1
        assert per_pod_memory == LOADED_MEMORY
        assert {s.owner_key for s in samples} == {owner}  # nothing outside the tracer config

        # the real sink stores them, and an export of a window starting between two samples carries the
        # window's samples with the load at its start folded in, as recorded
        location = LocalLocation(tmp_path / "store")
        stored = await _sink_until_stored(kafka_bootstrap, location, cluster_id, len(samples))
        assert sorted(stored, key=usage_order) == sorted(samples, key=usage_order)
        start, end = full[1].ts_ms - 1, full[-1].ts_ms + 1
        cluster_location = cluster_store_location(location, cluster_id)
        trace = decode_segment(
            export_window(
                SegmentCatalog(open_segment_store(cluster_location)),
                ExportRequest(start, end),
                usage=open_usage_store(cluster_location, for_reading=True),
            ).data
        )
        assert trace.usage == usage_window(samples, start, end)
        assert trace.usage[0] == dataclasses.replace(full[0], ts_ms=start)  # the load at the start
        assert full[1] in trace.usage
    finally:
        cluster.kubectl("delete", "namespace", RECORD_NAMESPACE, "--wait=false")


async def _sink_until_stored(
    bootstrap: str, location: LocalLocation, cluster: ClusterId, at_least: int
) -> list[UsageSample]:
    """Run the real sink service (its usage segments written every second) until the store holds
    ``at_least`` samples of ``cluster``; then stop it (it flushes and commits) and return them."""
    settings = SinkServiceSettings(
        kafka=KafkaSettings(bootstrap),
        segment_store=location,
        http=HttpSettings(port=0),
        group_id=f"kubetape-sink-{cluster}",
        cluster=cluster,
        usage_flush_s=1.0,
    )
    usage_location = usage_store_location(cluster_store_location(location, cluster))
    assert isinstance(usage_location, LocalLocation)
    stop = asyncio.Event()
    sink = asyncio.create_task(run_sink_service(settings, stop))
    held: list[UsageSample] = []
    try:
        deadline = time.monotonic() + 60
        while len(held) < at_least:
            assert not sink.done(), sink
            assert time.monotonic() < deadline, f"the sink stored {len(held)} of {at_least} samples"
            await asyncio.sleep(0.5)
            if usage_location.path.is_dir():
                held = stored_usage(open_segment_store(usage_location), 1 << 62)
    finally:
        stop.set()
        await sink
    return held


# ---- a sweep of the HPA's target --------------------------------------------------------------------
SWEEP_TARGETS = (50, 150)
"""Against 2 pods at 180 % of their 100m: 50 scales to the maximum 4 (90 % each: above the target,
below the requests), 150 to 3 (120 % each: overloaded for the whole replay)."""
SWEEP_SPAN_MS = 10_000
"""The CI sweep's trace at x1, one replay per target: about 25 s each with setup and cleanup, too short
for the simulated HPA's first decision (45-70 wall s after a replay starts, longer under load), so it
proves the plumbing: every point's replay applied its own target and measured the load it drove."""
ORDER_SPEED = 10.0
ORDER_SPAN_MS = 300_000
"""The ordering sweep's trace, at x10 (30 wall s a replay), the cluster's HPA processes restarted at
that speed as ``kubetape sweep`` does: the simulated HPA decides about 35 trace s after the load rose
(docs/hpa-replay.md), so the two targets run apart for most of each replay."""


def _busy_trace(path: Path, span_ms: int) -> Path:
    """The HPA recording with the load at 180 % from the start, its usage carried by the trace file."""
    from pipeline.formats.segment.content import build_segment
    from pipeline.formats.segment.encode import encode_segment
    from pipeline.formats.segment.header import SegmentKind

    load = rec.rising_load(span_ms, rise_at_ms=0, every_ms=5_000)
    events = rec.recording([], span_ms=span_ms).events
    segment = build_segment(events, start_ms=0, end_ms=span_ms, kind=SegmentKind.TRACE, usage=load)
    path.write_bytes(encode_segment(segment))
    return path


async def _sweep_targets(
    stack: LocalStack,
    cluster: kwok.KwokCluster,
    tmp_path: Path,
    span_ms: int,
    *,
    repetitions: int,
    speed: float = 1.0,
) -> tuple[Any, str]:
    """``kubetape sweep --autoscaler hpa --hpa-target 50 --hpa-target 150 --repetitions N --speed S``
    on two fixed nodes; the result, and what each run saw (for messages). Each run applied its target."""
    from pipeline.replay.hpa.overrides import hpa_variants, parse_axis_value
    from services.cli import main
    from services.sweep import PodAutoscalerSweep, parse_node_option, run_sweep

    out = tmp_path / "sweep"
    targets = [parse_axis_value("target_utilization", str(t)) for t in SWEEP_TARGETS]
    result = await run_sweep(
        cluster.kubeconfig,
        _busy_trace(tmp_path / "hpa-busy.ktrace", span_ms),
        out,
        speeds=[speed],
        nodes=[parse_node_option(f"{kwok.DEFAULT_NODE_SKELETON}:2")],
        repetitions=repetitions,
        pod_autoscaler=PodAutoscalerSweep(hpa_variants(targets), stack_dir=stack.stack_dir),
        reliability="overload_seconds",
        cost="pod_hours",
        say=print,
    )
    runs = {
        run.info.name: (
            run.info.labels.get("hpa_target"),
            run.report["events"]["failed"],
            (run.report.get("pod_autoscaling") or {}).get("pressure"),
        )
        for run in result.runs
    }
    seen = f"points {result.points}\nruns (target, failed writes, pressure): {runs}"
    assert len(result.runs) == len(SWEEP_TARGETS) * repetitions, seen
    for target, failed, pressure in runs.values():
        assert failed == 0, seen
        assert pressure is not None, seen
        owner = pressure["owners"][str(rec.OWNER)]
        assert owner["target_utilization_percent"] == float(str(target)), f"its own target\n{seen}"
        # two pods at 180 % from the start: overloaded at least until the HPA's first decision
        assert owner["overload_seconds"] > 0, seen
        assert owner["pod_hours"] > 0, seen
        assert pressure["seconds"] >= 0.8 * span_ms / 1000, f"measured over the replay\n{seen}"
    assert main(["compare", str(tmp_path / "sweep"), "--json"]) == 0  # compare reads the runs
    return result, seen


@pytest.mark.timeout(600)
async def test_a_sweep_of_the_hpas_target_replays_each_target_and_measures_the_load(
    local_stack: LocalStack, metered: kwok.KwokCluster, tmp_path: Path
) -> None:
    result, seen = await _sweep_targets(local_stack, metered, tmp_path, SWEEP_SPAN_MS, repetitions=1)
    # one point per target
    assert sorted(c.rsplit("=", 1)[-1] for c in result.points) == sorted(map(str, SWEEP_TARGETS)), seen


@pytest.mark.timeout(900)
async def test_a_higher_hpa_target_runs_fewer_pod_hours_and_more_overload(
    local_stack: LocalStack, metered: kwok.KwokCluster, tmp_path: Path
) -> None:
    eventually_sync(
        lambda: _usage(metered),
        lambda usage: "<unavailable>" not in usage,
        "the Metrics API to answer (the simulated HPA decides nothing without it)",
        timeout_s=METRICS_TIMEOUT_S,
        interval_s=3.0,
    )
    result, seen = await _sweep_targets(
        local_stack, metered, tmp_path, ORDER_SPAN_MS, repetitions=1, speed=ORDER_SPEED
    )
    low, high = (
        result.points[next(c for c in result.points if c.endswith(f"hpa_target={t}"))] for t in SWEEP_TARGETS
    )
    assert high[0] < low[0], f"a higher target runs fewer pod-hours\n{seen}"
    assert high[1] > low[1], f"a higher target leaves the pods overloaded longer\n{seen}"


# ---- the HPA's process timers at a replay's speed (last: it restarts the module's processes) ---------
TIMERS_NAMESPACE = "hpa-timers"
SCALED_RESOLUTION_BELOW_S = 5.0
"""A PodMetrics window under this is a resolution under upstream metrics-server's 10 s floor (at x10
the stack's build scrapes every 1.5 s; a loaded machine may delay a scrape by a second or two)."""


def _pod_windows(cluster: kwok.KwokCluster) -> dict[str, str]:
    """PodMetrics of the namespace: pod name → window (the time between the two scrapes of the rate)."""
    if kwok.component_command(cluster, METRICS_SERVER) is None:
        return {"<metrics-server not running>": str(cluster.cluster_dir / "logs" / "metrics-server.log")}
    try:
        listed = _get(cluster, f"/apis/metrics.k8s.io/v1beta1/namespaces/{TIMERS_NAMESPACE}/pods")
    except Exception as exc:  # the APIService answers 503 until the restarted metrics-server has scraped
        return {"<unavailable>": str(exc)[-200:]}
    return {m["metadata"]["name"]: m["window"] for m in listed["items"]}


@pytest.mark.timeout(600)  # a cluster of its own when run alone, and metrics-server's first scrapes
def test_a_replay_at_x10_runs_the_clusters_hpa_processes_with_scaled_timers_and_a_plain_one_the_defaults(
    local_stack: LocalStack, metered: kwok.KwokCluster
) -> None:
    """What ``kubetape replay --autoscaler hpa --speed 10`` does to the cluster before it replays: its
    kube-controller-manager runs with the HPA's timers divided by 10 and metrics-server (the stack's
    build, whose floor is 1 s) scrapes every 1.5 s (the PodMetrics window shows it), each as the
    report lists them; a plain replay after it puts the defaults back."""
    processes = LocalPodAutoscaler(local_stack.stack_dir, metered.kubeconfig)
    settings = {s.name: s for s in processes.restart_at(REPLAY_SPEED)}
    controller = kwok.flag_values(kwok.component_command(metered, KUBE_CONTROLLER_MANAGER) or [])
    for flag in (
        "sync-period",
        "downscale-stabilization",
        "cpu-initialization-period",
        "initial-readiness-delay",
    ):
        name = f"horizontal-pod-autoscaler-{flag}"
        assert controller.get(name) == settings[f"{KUBE_CONTROLLER_MANAGER} --{name}"].applied, controller
    assert controller["horizontal-pod-autoscaler-sync-period"] == "1s500ms"
    server = kwok.flag_values(kwok.component_command(metered, METRICS_SERVER) or [])
    assert server["metric-resolution"] == settings["metrics-server --metric-resolution"].applied == "1s500ms"
    timeout = settings["metrics-server --kubelet-request-timeout"].applied
    assert server["kubelet-request-timeout"] == timeout == "1s350ms", "under 90 % of the resolution"
    running = Path((kwok.component_command(metered, METRICS_SERVER) or [""])[0]).resolve()
    assert running == local_stack.build_metrics_server().resolve(), "the stack's build, floor 1 s"

    # the restarted metrics-server really scrapes every 1.5 s: a pod's CPU rate spans one resolution
    metered.kubectl("create", "namespace", TIMERS_NAMESPACE)
    try:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "timed",
                "namespace": TIMERS_NAMESPACE,
                "annotations": {USAGE_ANNOTATION: "50m"},
            },
            "spec": {"containers": [{"name": "app", "image": "example/timed:1"}]},
        }
        metered.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        eventually_sync(
            lambda: _pod_windows(metered),
            lambda seen: (
                "timed" in seen and parse_go_duration(seen["timed"], "window") < SCALED_RESOLUTION_BELOW_S
            ),
            f"PodMetrics of {TIMERS_NAMESPACE}/timed with a window under {SCALED_RESOLUTION_BELOW_S:g}s "
            "(pod name → window)",
            timeout_s=METRICS_TIMEOUT_S,
            interval_s=2.0,
        )
    finally:
        metered.kubectl("delete", "namespace", TIMERS_NAMESPACE, "--wait=false")

    processes.restart_at(1.0)  # what a plain replay asks for
    controller = kwok.flag_values(kwok.component_command(metered, KUBE_CONTROLLER_MANAGER) or [])
    assert controller["horizontal-pod-autoscaler-sync-period"] == "15s", controller
    server = kwok.flag_values(kwok.component_command(metered, METRICS_SERVER) or [])
    assert (server["metric-resolution"], server["kubelet-request-timeout"]) == ("15s", "10s"), server


# ---- end to end: a real HPA recorded under a rising, then falling load, replayed with the HPA deciding
E2E_NAMESPACE = "hpa-e2e"
E2E_OWNER = f"apps/Deployment/{E2E_NAMESPACE}/{hpa_workload.APP}"
E2E_SPEED = 10.0
"""The issue's speed: every HPA timer scales exactly (the stack's metrics-server scrapes every 1.5 s,
its floor is 1 s), so the simulated HPA's reaction time is the recorded one's, 45 s of trace."""


@pytest.mark.timeout(1200)
async def test_a_real_hpa_recorded_under_rising_then_falling_load_replays_with_the_simulated_hpa_tracking_it(
    metered: kwok.KwokCluster, local_stack: LocalStack, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The issue's end to end: on the cluster, a Deployment with an HPA scales for real as a load rises
    and falls; the real watcher and sink record it, an export makes the trace, and a replay of that
    file with the simulated HPA deciding (the load from the trace's own samples) tracks the recorded
    replicas: the report's verdict holds, judged after the HPA's reaction time."""
    from pipeline.model.tracer_config import TracerConfig
    from pipeline.replay.hpa.reaction import reaction_time_ms
    from pipeline.replay.hpa.timing import scale_hpa_process_timers
    from pipeline.replay.run import TraceFile

    cluster = metered
    workload = hpa_workload.HpaWorkload(cluster, E2E_NAMESPACE)
    cluster_id = ClusterId(f"it-hpa-e2e-{uuid.uuid4().hex[:8]}")
    config = tmp_path / "tracer.yaml"
    config.write_text(
        json.dumps(
            {
                "trackedObjects": {
                    "apps/v1.Deployment": {"trackLifecycle": True},
                    "autoscaling/v2.HorizontalPodAutoscaler": {},
                },
                "namespaces": {"allow": [E2E_NAMESPACE]},
            }
        )
    )
    kubectl = cluster.kubectl
    try:
        args = ("--usage-every", "5", "--cluster-id", cluster_id)
        async with running_watcher(config, cluster.kubeconfig, kafka_bootstrap, *args) as watcher:
            start_ms = int(time.time() * 1000)
            await asyncio.to_thread(kubectl, "create", "namespace", E2E_NAMESPACE)
            await asyncio.to_thread(workload.run, print, delete=False)
            end_ms = int(time.time() * 1000)
            assert await watcher.terminate() == 0
    finally:
        with contextlib.suppress(Exception):  # the recording is made: the source workload goes
            await asyncio.to_thread(kubectl, "delete", "namespace", E2E_NAMESPACE, "--wait=false")
    # the real sink, started once the watcher has made the usage topic, stores both topics
    location = LocalLocation(tmp_path / "store")
    await _sink_both_until_stored(kafka_bootstrap, location, cluster_id)
    assert all(driver.writes > 0 for driver in workload.drivers), [d.last_failure for d in workload.drivers]

    cluster_location = cluster_store_location(location, cluster_id)
    trace_path = tmp_path / "recording.kts"
    trace_path.write_bytes(
        export_window(
            SegmentCatalog(open_segment_store(cluster_location)),
            ExportRequest(start_ms, end_ms, config=TracerConfig.default()),
            usage=open_usage_store(cluster_location, for_reading=True),
        ).data
    )
    # the replay goes on for the HPA's reaction time past the recording's end (its last state held), so
    # the simulated HPA's answer to the fall is judged too
    reaction_ms = reaction_time_ms(E2E_SPEED, scale_hpa_process_timers(E2E_SPEED)[0])
    assert reaction_ms == pytest.approx(45_000), "every timer scaled exactly: the recorded HPA's 45 s"
    spec = ReplaySpec(
        TraceFile(str(trace_path)),  # the load comes from the file's own samples: none handed over
        ReplaySettings(
            speed=E2E_SPEED,
            duration_ms=end_ms - start_ms + round(reaction_ms),
            replay_name="hpa-e2e",
            namespace_prefix="hpa-e2e-replay",
            node_pools=((yaml.safe_load(kwok.DEFAULT_NODE_SKELETON.read_text()), 2),),
        ),
        TargetCluster(metered.kubeconfig),
        pod_autoscaling=PodAutoscaling(LoadModel.CONSERVE),
    )
    # the cluster's HPA timers divided by 10, as `kubetape replay` does: exact at this speed
    processes = LocalPodAutoscaler(local_stack.stack_dir, metered.kubeconfig)
    simulated = _SimulatedHpa(f"hpa-e2e-replay-{E2E_NAMESPACE}", hpa_workload.APP)
    try:
        report = await ReplayRun(spec, pod_autoscaler=processes).run(beside=simulated)
    finally:  # the module's cluster as it was: the defaults
        await asyncio.to_thread(processes.restart_at, 1.0)
    doc = report.to_json()
    summary = report.summary()
    assert report.failed == 0, summary
    hpa = report.pod_autoscaling
    assert hpa is not None, summary
    [owner] = hpa["owners"]
    assert owner["owner"] == E2E_OWNER
    assert owner["readings"] > 10, f"the trace's own usage samples drove the load: {owner}"
    # the test's own count: every change of the recorded replicas is the real HPA's (nothing else scales
    # this workload), and every one of them is left to the simulated HPA
    versions = [
        e.obj["spec"]["replicas"]
        for e in decode_segment(trace_path.read_bytes()).events
        if str(e.key) == E2E_OWNER and e.type is EventType.APPLIED and e.obj is not None
    ]
    recorded_writes = sum(1 for a, b in itertools.pairwise(versions) if a != b)
    assert recorded_writes >= 2, f"the recording holds the HPA's rise and fall: {versions}"
    assert owner["replica_writes_left_out"] == recorded_writes, (
        f"production's HPA's writes went to the simulated one: {owner}; recorded replicas {versions}"
    )
    fidelity = doc["owner_fidelity"]
    [judged] = [o for o in fidelity["owners"] if o["owner"] == E2E_OWNER]
    assert judged["recorded_peak"] == hpa_workload.MAX_REPLICAS, (
        f"the recording holds the real HPA's scale-up: {judged}"
    )
    assert judged["replay_peak"] == hpa_workload.MAX_REPLICAS, (
        f"the simulated HPA scaled up as the recorded one: {summary}"
    )
    assert judged["hpa_reaction_ms"] == hpa["reaction_ms"] == 45_000, summary
    applied = {setting["name"]: setting["applied"] for setting in hpa["settings"]}
    assert applied["metrics-server --metric-resolution"] == "1s500ms", applied
    assert applied["kubetape replay: the usage driver's update period"] == "100ms", applied
    assert judged["max_error"] <= 1, f"within one pod of the recorded replicas after the reaction: {summary}"
    # held; degraded only for the machine's pace on a loaded machine (late writes, sparse samples), never
    # for an owner missing the bound
    pace = ("ran late", "could not be sampled")
    machine_only = all(any(p in reason for p in pace) for reason in fidelity["reasons"])
    assert fidelity["verdict"] == "held" or (fidelity["verdict"] == "degraded" and machine_only), summary
    running = [s.running.get(E2E_OWNER, 0) for s in report.owner_samples]
    assert running[-1] == hpa_workload.MIN_REPLICAS, (
        f"the simulated HPA scaled back down as the load fell: {running}"
    )
    # and the simulated cluster says so itself: its HPA scaled up and back down (two scale times at
    # least), and the Deployment's replicas are the controller-manager's writes of the scale
    assert_the_simulated_hpa_decided(simulated, hpa_workload.MIN_REPLICAS, summary)
    assert len(simulated.scale_times) >= 2, f"the HPA's scale times: {simulated.scale_times}\n{summary}"
    # docs/hpa-replay.md's figures: the recorded pods (from their lifecycles) against the replayed ones
    replayed = [(s.trace_ms, s.running.get(E2E_OWNER, 0)) for s in report.owner_samples]
    print(f"x{E2E_SPEED:g}: {_reaction_figures(report.recorded_by_owner[E2E_OWNER], replayed)}")


def _reaction_figures(recorded: Sequence[tuple[float, int]], replayed: Sequence[tuple[float, int]]) -> str:
    """When each HPA's pods reached the maximum and came back to the minimum, in trace ms: the recorded
    pods' lifecycles, the simulated ones sampled."""

    def up_down(timeline: Sequence[tuple[float, int]]) -> tuple[float | None, float | None]:
        up = next((t for t, n in timeline if n >= hpa_workload.MAX_REPLICAS), None)
        down = next(
            (t for t, n in timeline if up is not None and t > up and n <= hpa_workload.MIN_REPLICAS), None
        )
        return up, down

    (rec_up, rec_down), (sim_up, sim_down) = up_down(recorded), up_down(replayed)

    def late(sim: float | None, rec: float | None) -> str:
        return "never" if sim is None or rec is None else f"{(sim - rec) / 1000:+.0f} s"

    return (
        f"recorded pods at {hpa_workload.MAX_REPLICAS} at {rec_up}, back at {hpa_workload.MIN_REPLICAS} at "
        f"{rec_down} ms; simulated at {sim_up}, {sim_down} ms: scale-up {late(sim_up, rec_up)}, "
        f"scale-down {late(sim_down, rec_down)} (sampled every {_sample_step_s(replayed)} trace s)"
    )


def _sample_step_s(timeline: Sequence[tuple[float, int]]) -> str:
    steps = [b[0] - a[0] for a, b in itertools.pairwise(timeline)]
    return f"{sorted(steps)[len(steps) // 2] / 1000:.0f}" if steps else "?"


async def _sink_both_until_stored(bootstrap: str, location: LocalLocation, cluster: ClusterId) -> None:
    """Run the real sink service until it has committed every event of ``cluster`` and stored every
    usage sample the watcher published; then stop it (it flushes and commits)."""
    from pipeline.sink.compactor import CompactionSettings
    from pipeline.sink.settings import SinkSettings
    from services.mission import wait_committed

    published = [
        decode_usage(value, USAGE_TOPIC)
        for _, value, _ in await read_topic(bootstrap, USAGE_TOPIC, cluster)
        if value
    ]
    group = f"kubetape-sink-{cluster}"
    settings = SinkServiceSettings(
        kafka=KafkaSettings(bootstrap),
        segment_store=location,
        sink=SinkSettings(compaction=CompactionSettings(idle_close_s=1.0)),
        http=HttpSettings(port=0),
        group_id=group,
        cluster=cluster,
        usage_flush_s=1.0,
    )
    usage_location = usage_store_location(cluster_store_location(location, cluster))
    assert isinstance(usage_location, LocalLocation)
    stop = asyncio.Event()
    sink = asyncio.create_task(run_sink_service(settings, stop))
    try:
        await asyncio.to_thread(wait_committed, bootstrap, group, 120.0)
        deadline = time.monotonic() + 60
        held: list[UsageSample] = []
        while len(held) < len(published):
            assert not sink.done(), sink
            assert time.monotonic() < deadline, f"the sink stored {len(held)} of {len(published)} samples"
            await asyncio.sleep(0.5)
            if usage_location.path.is_dir():
                held = stored_usage(open_segment_store(usage_location), 1 << 62)
    finally:
        stop.set()
        await sink
