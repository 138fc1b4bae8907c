"""A replay with the simulated HPA deciding, against in-memory clusters: the recorded HPA's replica
writes are left out (a write that changed more keeps the live replicas), HPAs are applied scaled, the
recorded load is written onto the owner's running pods, and the report names the model and owners."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pipeline.model.errors import ConfigError, NotFoundError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey
from pipeline.replay.clock.schedule import ScheduledStep
from pipeline.replay.hpa.load import CPU_ANNOTATION, LoadModel
from pipeline.replay.hpa.replay import (
    USAGE_INTERVAL_SETTING,
    HpaReplay,
    HpaWrites,
    UsageDriver,
    usage_interval,
)
from pipeline.replay.hpa.targets import hpa_targets, plan_hpas, without_replica_changes
from pipeline.replay.rewrite import RECORDED_OWNER_ANNOTATION, REPLAY_LABEL, RESOURCE_METRICS_PATH_ANNOTATION
from pipeline.replay.run import LoadedTrace, PodAutoscaling, ReplayRun, ReplaySpec, TopicFollow
from pipeline.replay.settings import ReplaySettings
from tests import hpa_recording as rec

WRITES = [(30_000, 3), (45_000, 4), (200_000, 2)]


def steps_of(trace: Any) -> list[ScheduledStep[Event]]:
    return [ScheduledStep(e.ts_ms, str(e.key), e) for e in trace.events if e.type is EventType.APPLIED]


def test_the_hpas_target_is_its_scale_target_in_its_namespace() -> None:
    trace = rec.recording(WRITES, span_ms=300_000)
    assert hpa_targets(trace.events) == {
        rec.OWNER: ObjectKey(f"autoscaling/HorizontalPodAutoscaler/{rec.NAMESPACE}/web")
    }


def test_replica_only_writes_are_left_out_and_a_write_that_changed_more_is_kept() -> None:
    trace = rec.recording(WRITES, span_ms=300_000, image_change_at_ms=250_000)
    kept, dropped = without_replica_changes(steps_of(trace), [rec.OWNER])
    deployment_steps = [s for s in kept if s.payload.key == rec.OWNER]
    assert [s.ts_ms for s in deployment_steps] == [0, 250_000], "the creation and the new image"
    assert dropped == {rec.OWNER: 3}
    # other owners' writes are untouched
    assert [s for s in kept if s.payload.key != rec.OWNER] == [
        s for s in steps_of(trace) if s.payload.key != rec.OWNER
    ]


def test_a_replica_write_the_recorder_annotated_is_left_out_too() -> None:
    """A watcher that observed a write late annotates the event's time source: the write is still the
    HPA's alone (a scale-down seen late under load was replayed, fighting the simulated HPA)."""
    trace = rec.recording(WRITES, span_ms=300_000)
    steps = steps_of(trace)
    late = [i for i, s in enumerate(steps) if s.payload.key == rec.OWNER][-1]
    event = steps[late].payload
    assert event.obj is not None
    obj = copy.deepcopy(event.obj)
    obj["metadata"].setdefault("annotations", {})["kubetape.dev/time-source"] = "managedFields"
    steps[late] = ScheduledStep(
        steps[late].ts_ms,
        steps[late].key,
        Event.applied(
            event.ts_ms,
            event.key,
            obj,
            event.spec_hash,
            uid=event.uid,
            resource_version=event.resource_version,
        ),
    )
    kept, dropped = without_replica_changes(steps, [rec.OWNER])
    assert dropped == {rec.OWNER: 3}
    assert [s.ts_ms for s in kept if s.payload.key == rec.OWNER] == [0]


def test_the_plan_names_the_owner_and_every_hpa_setting_scaled() -> None:
    _, plan = plan_hpas(steps_of(rec.recording(WRITES, span_ms=300_000)), 10.0)
    assert plan.owners == (rec.OWNER,)
    assert plan.replica_writes_left_out == {rec.OWNER: 3}
    windows = {s.name.split("behavior.")[1]: (s.given, s.applied) for s in plan.settings}
    assert windows["scaleDown.stabilizationWindowSeconds"] == ("60s", "6s")
    assert windows["scaleUp.policies[0].periodSeconds"] == ("15s", "2s")


class Cluster:
    """Just enough apiserver: get and list from a dict, apply merges annotations (or stores)."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {self._key(o): copy.deepcopy(o) for o in objects}
        self.applied: list[dict[str, Any]] = []

    @staticmethod
    def _key(o: dict[str, Any]) -> tuple[str, str | None, str]:
        return o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]:
        label, _, value = label_selector.partition("=")
        return [
            copy.deepcopy(o)
            for (k, _, _), o in self.objects.items()
            if k == kind and o["metadata"].get("labels", {}).get(label) == value
        ]

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        self.applied.append(copy.deepcopy(obj))
        live = self.objects.get(self._key(obj))
        if live is None:
            raise NotFoundError(f"{obj['kind']} {obj['metadata']['name']} is gone")
        live["metadata"].setdefault("annotations", {}).update(obj["metadata"].get("annotations", {}))
        return live

    async def resource_for(self, api_version: str, kind: str) -> Any:
        raise AssertionError("not used")

    async def delete(self, *args: Any, **kwargs: Any) -> bool:
        raise AssertionError("not used")


def pod(
    name: str, *, phase: str = "Running", owner: ObjectKey = rec.OWNER, containers: int = 1
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kubetape-hpa-shop",
            "labels": {REPLAY_LABEL: "r1"},
            "annotations": {RECORDED_OWNER_ANNOTATION: str(owner)},
        },
        "spec": {"containers": [{"name": f"c{i}"} for i in range(containers)]},
        "status": {"phase": phase},
    }


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {REPLAY_LABEL: "r1"}}}


def hpa_replay(model: LoadModel) -> HpaReplay:
    from pipeline.replay.hpa.load import RecordedLoad

    _, plan = plan_hpas(steps_of(rec.recording(WRITES, span_ms=300_000)), 10.0)
    return HpaReplay(plan, RecordedLoad.from_samples(rec.rising_load(300_000), plan.owners), model)


class Clock:
    def now(self) -> float:
        return 0.0

    async def sleep_until(self, when: float) -> None:
        return None


@pytest.mark.parametrize(("model", "per_pod"), [(LoadModel.CONSERVE, "120m"), (LoadModel.PER_POD, "180m")])
async def test_the_recorded_load_is_written_onto_the_owners_running_pods(
    model: LoadModel, per_pod: str
) -> None:
    # recorded at 200 s: 2 pods at 180m, 360m in all; the simulation runs 3 of the owner's pods
    running = [pod("web-a"), pod("web-b"), pod("web-c")]
    others = [
        pod("web-pending", phase="Pending"),
        pod("db-a", owner=ObjectKey("apps/Deployment/hpa-shop/db")),
    ]
    cluster = Cluster([*running, *others, node("kwok-0")])
    driver = UsageDriver(cluster, hpa_replay(model), "r1", lambda: 200_000.0, Clock())
    await driver.update()
    usage = {
        o["metadata"]["name"]: o["metadata"]["annotations"].get(CPU_ANNOTATION)
        for o in cluster.objects.values()
    }
    assert usage == {
        "web-a": per_pod,
        "web-b": per_pod,
        "web-c": per_pod,
        "web-pending": None,
        "db-a": None,
        "kwok-0": None,
    }
    node_annotations = cluster.objects[("Node", None, "kwok-0")]["metadata"]["annotations"]
    assert node_annotations[RESOURCE_METRICS_PATH_ANNOTATION] == "/metrics/nodes/kwok-0/metrics/resource"
    # unchanged load and pods: nothing is written again
    writes = len(cluster.applied)
    await driver.update()
    assert len(cluster.applied) == writes
    report = driver.report()
    assert report["load_model"] == model.value
    assert [o["owner"] for o in report["owners"]] == [str(rec.OWNER)]
    assert report["usage_writes"] == 3
    assert report["usage_write_failures"] == 0


async def test_a_pod_gone_before_its_write_is_counted_and_the_rest_go_on() -> None:
    class Vanishing(Cluster):
        async def list_objects(self, api_version: str, kind: str, **kwargs: Any) -> list[dict[str, Any]]:
            listed = await super().list_objects(api_version, kind, **kwargs)
            if kind == "Pod":
                self.objects.pop(("Pod", "kubetape-hpa-shop", "web-a"), None)
            return listed

    cluster = Vanishing([pod("web-a"), pod("web-b")])
    driver = UsageDriver(cluster, hpa_replay(LoadModel.CONSERVE), "r1", lambda: 200_000.0, Clock())
    await driver.update()
    assert driver.figures.failures == 1
    assert "web-a" in driver.figures.last_failure
    assert (
        cluster.objects[("Pod", "kubetape-hpa-shop", "web-b")]["metadata"]["annotations"][CPU_ANNOTATION]
        == "180m"
    )


async def test_a_later_write_of_the_target_keeps_the_simulated_replicas_and_hpas_are_scaled() -> None:
    live = rec.deployment(5)
    live["metadata"]["namespace"] = "kubetape-hpa-shop"
    writes = HpaWrites(Cluster([live]), hpa_replay(LoadModel.CONSERVE), 10.0)
    body = rec.deployment(2, image="example/web:2")
    body["metadata"]["namespace"] = "kubetape-hpa-shop"
    event = Event.applied(250_000, rec.OWNER, rec.deployment(2), 4)
    adjusted = await writes.adjust(event, body)
    assert adjusted["spec"]["replicas"] == 5, "the simulated HPA's decision, not the recorded 2"
    assert adjusted["spec"]["template"]["spec"]["containers"][0]["image"] == "example/web:2"
    scaled = await writes.adjust(Event.applied(0, ObjectKey("x/y/z/w"), rec.hpa(), 1), rec.hpa())
    assert scaled["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 6


async def test_prepare_hands_the_owner_to_the_hpa_and_runs_to_the_traces_end() -> None:
    trace = rec.recording(WRITES, span_ms=300_000)
    spec = ReplaySpec(
        LoadedTrace(trace),
        ReplaySettings(speed=10.0),
        pod_autoscaling=PodAutoscaling(LoadModel.PER_POD, rec.rising_load(300_000)),
    )
    run = ReplayRun(spec)
    plan = await run.prepare()
    assert [s.ts_ms for s in plan.steps if s.payload.key == rec.OWNER] == [0]
    hpa = run.settings.pod_autoscaling
    assert hpa is not None
    assert hpa.model is LoadModel.PER_POD
    assert hpa.load.samples_of(rec.OWNER) == 20
    assert run.settings.duration_ms is None  # every replay of a trace runs to its end
    assert run.span_ms == plan.span_ms == 300_000
    assert any(s.applied == "as deployed" for s in hpa.process_settings), "the controller's timers say so"


def test_following_a_live_topic_with_the_hpa_deciding_is_refused() -> None:
    from pipeline.io.kafka.settings import KafkaSettings

    with pytest.raises(ConfigError, match="--autoscaler hpa replays a recorded range"):
        ReplaySpec(TopicFollow(KafkaSettings("127.0.0.1:9092"), "t"), pod_autoscaling=PodAutoscaling())


def test_the_flags_ask_for_the_hpa_with_or_without_karpenter(tmp_path: Any) -> None:
    from services.cli import build_parser
    from services.commands.replay import spec_from_args

    def spec(*flags: str) -> ReplaySpec:
        return spec_from_args(build_parser().parse_args(["replay", "--trace=t", *flags]))

    assert spec("--autoscaler=hpa").pod_autoscaling == PodAutoscaling(LoadModel.CONSERVE)
    per_pod = spec("--autoscaler=hpa", "--load-model=per-pod")
    assert per_pod.pod_autoscaling == PodAutoscaling(LoadModel.PER_POD)
    pool = tmp_path / "pool.yaml"
    pool.write_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}\nspec: {}\n")
    both = spec("--autoscaler=hpa", "--autoscaler=karpenter", f"--nodepool={pool}")
    assert both.pod_autoscaling is not None
    assert both.autoscaling is not None
    assert spec().pod_autoscaling is None
    with pytest.raises(ConfigError, match="add --autoscaler hpa"):
        spec("--load-model=per-pod")
    with pytest.raises(ConfigError, match=r"fixed speed|--speed max"):
        spec("--autoscaler=hpa", "--speed=max", "--max-lag=5")


@pytest.mark.parametrize(
    ("speed", "wall", "applied", "noted"),
    [
        (0.5, 1.0, "1s", True),
        (1.0, 1.0, "1s", False),
        (4.0, 0.25, "250ms", False),
        (10.0, 0.1, "100ms", False),
        (30.0, 0.1, "100ms", True),
    ],
)
def test_the_usage_driver_updates_the_pods_once_per_trace_second_at_most_ten_times_a_wall_second(
    speed: float, wall: float, applied: str, noted: bool
) -> None:
    """At x10 a scrape every 1.5 s must see the load of its moment: one update per wall second would
    be 10 trace s stale. Above x10 the updates (a listing of the replay's pods and nodes each) stay
    10 a second, and the report says how much trace each spans."""
    interval_s, setting = usage_interval(speed)
    assert interval_s == pytest.approx(wall)
    assert (setting.given, setting.applied, bool(setting.note)) == ("1s", applied, noted)
    if speed > 10:
        assert "3s of trace each" in setting.note


async def test_the_driver_runs_and_reports_its_interval_at_the_replays_speed() -> None:
    import dataclasses

    hpa = dataclasses.replace(hpa_replay(LoadModel.CONSERVE), speed=10.0)
    driver = UsageDriver(Cluster([pod("web-a")]), hpa, "r1", lambda: 200_000.0, Clock())
    [row] = [s for s in driver.report()["settings"] if s["name"] == USAGE_INTERVAL_SETTING]
    assert (row["given"], row["applied"]) == ("1s", "100ms")
