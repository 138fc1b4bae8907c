"""The watcher's shaping rules (pipeline.watch.shaper) against an in-memory cluster."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pipeline.formats.wire.codec import decode_event
from pipeline.io.kafka.settings import EVENTS_TOPIC, RESUME_TOPIC, STATE_TOPIC
from pipeline.io.kube.types import ApiResource, ListPage, ResourceVersion, WatchEvent
from pipeline.model.errors import FormatError
from pipeline.model.events import EventType
from pipeline.model.hashing import pod_spec_hash
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import TracerConfig
from pipeline.watch.shaper import LIFECYCLE_PREFIX, Shaper

CONFIG = TracerConfig.from_mapping(
    {
        "trackedObjects": {
            "apps/v1.Deployment": {"trackLifecycle": True},
            "batch/v1.Job": {"trackLifecycle": True},
            "v1.Pod": {"trackLifecycle": True, "skipOwned": True},
        },
        "namespaces": {"deny": ["kube-system"]},
    },
    "test",
)


class GetOnlyCluster:
    """Serves GETs of owners that are not tracked (ReplicaSets); counts them."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        self.gets = 0

    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        return ApiResource(gvk.api_version, gvk.kind, gvk.kind.lower() + "s", True)

    def list_pages(self, res: ApiResource) -> AsyncIterator[ListPage]:
        raise AssertionError("the shaper never lists")

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.objects.get((res.kind, name))

    def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        raise AssertionError("the shaper never watches")


def deployment(rv: int, replicas: int = 2, image: str = "nginx:1", uid: str = "d1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": uid, "resourceVersion": str(rv)},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "c", "image": image}]}},
        },
        "status": {"replicas": 0},
    }


def pod(
    name: str,
    rv: int,
    owner: tuple[str, str, str] | None,
    *,
    started: str | None = None,
    finished: str | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"u-{name}",
        "resourceVersion": str(rv),
    }
    if owner is not None:
        api, kind, oname = owner
        meta["ownerReferences"] = [
            {"apiVersion": api, "kind": kind, "name": oname, "uid": f"u-{oname}", "controller": True}
        ]
    statuses = []
    if started and finished:
        statuses = [{"name": "c", "state": {"terminated": {"startedAt": started, "finishedAt": finished}}}]
    elif started:
        statuses = [{"name": "c", "state": {"running": {"startedAt": started}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "nginx:1"}], "nodeName": "n1"},
        "status": {"containerStatuses": statuses},
    }


def test_spec_changes_are_published_and_status_churn_is_not() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    created = shaper.observe_object("ADDED", deployment(10), 1000)
    assert [e.type for e in created.events] == [EventType.APPLIED]
    assert created.events[0].key == "apps/Deployment/default/web"
    assert {r.topic for r in created.records} == {EVENTS_TOPIC, STATE_TOPIC}
    assert created.records[0].ts_ms == 1000
    # sanitized: no uid/resourceVersion inside the published object
    assert "uid" not in created.events[0].obj["metadata"]  # type: ignore[index]

    churn = deployment(11)
    churn["status"] = {"replicas": 2, "readyReplicas": 2}
    churn["metadata"]["labels"] = {"x": "y"}
    assert shaper.observe_object("MODIFIED", churn, 1100).records == []

    scaled = shaper.observe_object("MODIFIED", deployment(12, replicas=5), 1200)
    assert [e.type for e in scaled.events] == [EventType.APPLIED]
    assert scaled.events[0].obj["spec"]["replicas"] == 5  # type: ignore[index]

    deleted = shaper.observe_object("DELETED", deployment(13, replicas=5), 1300)
    assert [e.type for e in deleted.events] == [EventType.DELETED]
    assert deleted.events[0].obj == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
    }
    tombstone = [r for r in deleted.records if r.topic == STATE_TOPIC]
    assert tombstone[0].value is None
    assert shaper.index == {}


def test_replayed_older_versions_and_unknown_deletes_are_ignored() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", deployment(10), 1000)
    shaper.observe_object("MODIFIED", deployment(20, replicas=4), 2000)
    # a restarted watcher replays the watch from an older resume point
    assert shaper.observe_object("MODIFIED", deployment(15, replicas=3), 3000).records == []
    other = deployment(5)
    other["metadata"]["name"] = "never-seen"
    assert shaper.observe_object("DELETED", other, 3000).records == []


def test_restore_from_published_state_does_not_republish() -> None:
    first = Shaper(CONFIG, GetOnlyCluster([]))
    records = first.observe_object("ADDED", deployment(10), 1000).records
    state = {r.key: r.value for r in records if r.topic == STATE_TOPIC and r.value is not None}
    restarted = Shaper(CONFIG, GetOnlyCluster([]))
    assert restarted.restore(state, {}) == 0
    assert restarted.observe_object("ADDED", deployment(10), 5000).records == []
    assert len(restarted.observe_object("MODIFIED", deployment(11, image="nginx:2"), 6000).events) == 1


def test_replaced_object_is_deleted_then_applied() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", deployment(10), 1000)
    out = shaper.observe_object("ADDED", deployment(30, uid="d2"), 2000)
    assert [e.type for e in out.events] == [EventType.DELETED, EventType.APPLIED]


def test_denied_namespace_is_not_published() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    obj = deployment(10)
    obj["metadata"]["namespace"] = "kube-system"
    assert shaper.observe_object("ADDED", obj, 1000).records == []


async def test_lifecycle_follows_owner_chain_through_an_untracked_replicaset() -> None:
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-abc",
            "namespace": "default",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "uid": "d1",
                    "controller": True,
                }
            ],
        },
    }
    cluster = GetOnlyCluster([rs])
    shaper = Shaper(CONFIG, cluster)
    shaper.observe_object("ADDED", deployment(10), 1000)
    owner = ("apps/v1", "ReplicaSet", "web-abc")

    assert (await shaper.observe_pod("ADDED", pod("web-abc-1", 11, owner), 1100)).records == []
    running = await shaper.observe_pod(
        "MODIFIED", pod("web-abc-1", 12, owner, started="2026-01-01T00:00:01Z"), 1200
    )
    [event] = running.events
    assert event.type is EventType.POD_LIFECYCLE
    assert event.owner_key == "apps/Deployment/default/web"
    assert event.pod_spec_hash == pod_spec_hash(pod("x", 0, None)["spec"])
    assert (event.pod_start_ms, event.pod_end_ms) == (1_767_225_601_000, None)
    assert {r.topic for r in running.records} == {EVENTS_TOPIC, RESUME_TOPIC}

    # a second pod of the same ReplicaSet reuses the cached chain
    await shaper.observe_pod("ADDED", pod("web-abc-2", 13, owner, started="2026-01-01T00:00:02Z"), 1300)
    assert cluster.gets == 1

    # status churn without a lifecycle transition publishes nothing
    again = pod("web-abc-1", 14, owner, started="2026-01-01T00:00:01Z")
    again["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert (await shaper.observe_pod("MODIFIED", again, 1400)).records == []

    # deleted while running: SimKube's guess, finished at deletion time, then forgotten
    gone = await shaper.observe_pod("DELETED", again, 1_767_225_610_000)
    assert [(e.pod_start_ms, e.pod_end_ms) for e in gone.events] == [(1_767_225_601_000, 1_767_225_610_000)]
    assert gone.records[-1] == gone.records[-1].__class__(
        RESUME_TOPIC, LIFECYCLE_PREFIX + "core/Pod/default/web-abc-1", None, 1_767_225_610_000
    )
    assert "core/Pod/default/web-abc-1" not in shaper.pods


async def test_finished_job_pod_and_restart_dedup() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "default", "uid": "u-j", "resourceVersion": "5"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", job, 1000)
    owner = ("batch/v1", "Job", "j")
    a = await shaper.observe_pod("MODIFIED", pod("j-1", 6, owner, started="2026-01-01T00:00:00Z"), 1100)
    done = pod("j-1", 7, owner, started="2026-01-01T00:00:00Z", finished="2026-01-01T00:00:05.250Z")
    b = await shaper.observe_pod("MODIFIED", done, 1200)
    assert [(e.pod_start_ms, e.pod_end_ms) for e in a.events + b.events] == [
        (1_767_225_600_000, None),
        (1_767_225_600_000, 1_767_225_605_250),
    ]
    assert b.events[0].owner_key == "batch/Job/default/j"

    # a restarted watcher restores the lifecycle and does not republish it
    resume = {r.key: r.value for r in b.records if r.topic == RESUME_TOPIC and r.value}
    state = {"batch/Job/default/j": _state_of(CONFIG, job)}
    restarted = Shaper(CONFIG, GetOnlyCluster([]))
    restarted.restore(state, resume)
    assert (await restarted.observe_pod("MODIFIED", done, 1300)).records == []
    # deleting the finished pod adds no lifecycle, only forgets it
    gone = await restarted.observe_pod("DELETED", done, 1400)
    assert gone.events == []
    assert [r.value for r in gone.records] == [None]


def _state_of(config: TracerConfig, obj: dict[str, Any]) -> bytes:
    out = Shaper(config, GetOnlyCluster([])).observe_object("ADDED", copy.deepcopy(obj), 1)
    return next(r.value for r in out.records if r.topic == STATE_TOPIC and r.value is not None)


async def test_daemonset_pods_and_pods_without_tracked_owner_have_no_lifecycle() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    ds_pod = pod("ds-1", 5, ("apps/v1", "DaemonSet", "ds"), started="2026-01-01T00:00:00Z")
    assert (await shaper.observe_pod("ADDED", ds_pod, 1000)).records == []
    orphan = pod("o-1", 5, ("apps/v1", "ReplicaSet", "gone"), started="2026-01-01T00:00:00Z")
    assert (await shaper.observe_pod("ADDED", orphan, 1000)).records == []


async def test_bare_pod_is_its_own_lifecycle_owner() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    bare = pod("solo", 5, None)
    shaper.observe_object("ADDED", bare, 1000)
    out = await shaper.observe_pod("MODIFIED", pod("solo", 6, None, started="2026-01-01T00:00:00Z"), 1100)
    assert [e.owner_key for e in out.events] == ["core/Pod/default/solo"]
    assert decode_event(out.records[0].value or b"").type is EventType.POD_LIFECYCLE


def test_object_without_metadata_raises_a_format_error() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    with pytest.raises(FormatError, match="metadata"):
        shaper.observe_object("ADDED", {"apiVersion": "apps/v1", "kind": "Deployment"}, 1)


async def test_finish_with_a_new_start_time_keeps_the_first_start() -> None:
    # KWOK's completion stages (and container restarts) report the last container start, not the first
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", pod("solo", 5, None), 1000)
    await shaper.observe_pod("MODIFIED", pod("solo", 6, None, started="2026-01-01T00:00:00Z"), 1100)
    done = pod("solo", 7, None, started="2026-01-01T00:00:09Z", finished="2026-01-01T00:00:09Z")
    out = await shaper.observe_pod("MODIFIED", done, 1200)
    assert [(e.pod_start_ms, e.pod_end_ms) for e in out.events] == [(1_767_225_600_000, 1_767_225_609_000)]


async def test_an_owner_not_found_yet_is_looked_up_again() -> None:
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-abc",
            "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d1"}],
        },
    }
    cluster = GetOnlyCluster([])
    shaper = Shaper(CONFIG, cluster)
    shaper.observe_object("ADDED", deployment(10), 1000)
    owner = ("apps/v1", "ReplicaSet", "web-abc")
    first = await shaper.observe_pod("MODIFIED", pod("p", 11, owner, started="2026-01-01T00:00:01Z"), 1100)
    assert first.events == []  # the ReplicaSet is not visible (yet)
    cluster.objects["ReplicaSet", "web-abc"] = rs
    second = await shaper.observe_pod("MODIFIED", pod("p", 12, owner, started="2026-01-01T00:00:01Z"), 1200)
    assert [e.owner_key for e in second.events] == ["apps/Deployment/default/web"]


PODS_ONLY = TracerConfig.from_mapping({"trackedObjects": {"v1.Pod": {"trackLifecycle": True}}}, "pods only")
WIDGET = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "default", "uid": "u-w"},
}


async def test_a_pod_whose_owner_is_not_tracked_is_its_own_lifecycle_owner() -> None:
    """A custom controller's pod (owner kind not tracked) is recorded as a bare pod: replayed alone, with
    its recorded lifetime, instead of losing its lifecycle."""
    shaper = Shaper(PODS_ONLY, GetOnlyCluster([WIDGET]))
    owner = ("example.com/v1", "Widget", "w")
    [applied] = shaper.observe_object("ADDED", pod("w-1", 10, owner), 1000).events
    assert applied.type is EventType.APPLIED
    done = pod("w-1", 11, owner, started="2026-01-01T00:00:01Z", finished="2026-01-01T00:00:31Z")
    [event] = (await shaper.observe_pod("MODIFIED", done, 1100)).events
    assert event.type is EventType.POD_LIFECYCLE
    assert event.owner_key == "core/Pod/default/w-1"
    assert (event.pod_start_ms, event.pod_end_ms) == (1_767_225_601_000, 1_767_225_631_000)


async def test_a_pod_seen_before_its_own_object_is_published_waits_for_it() -> None:
    shaper = Shaper(PODS_ONLY, GetOnlyCluster([WIDGET]))
    owner = ("example.com/v1", "Widget", "w")
    running = pod("w-1", 10, owner, started="2026-01-01T00:00:01Z")
    assert (await shaper.observe_pod("ADDED", running, 1000)).events == []  # the pod stream ran ahead
    published = shaper.observe_object("ADDED", running, 1100).events
    assert [e.type for e in published] == [EventType.APPLIED, EventType.POD_LIFECYCLE]
    assert published[1].owner_key == "core/Pod/default/w-1"


async def test_with_skip_owned_a_pod_no_owner_makes_again_is_still_recorded_as_its_own_owner() -> None:
    """skipOwned leaves out the pods an owner makes again on replay; a custom controller's pod (its Widget
    makes nothing in a simulation) is recorded and replays as a bare pod with its lifetime."""
    shaper = Shaper(CONFIG, GetOnlyCluster([WIDGET]))  # Pods: trackLifecycle and skipOwned (SimKube's)
    owner = ("example.com/v1", "Widget", "w")
    running = pod("w-1", 10, owner, started="2026-01-01T00:00:01Z")
    assert [e.type for e in shaper.observe_object("ADDED", running, 1000).events] == [EventType.APPLIED]
    [event] = (await shaper.observe_pod("MODIFIED", running, 1100)).events
    assert event.owner_key == "core/Pod/default/w-1"


async def test_with_skip_owned_a_replica_set_pod_is_not_recorded_as_an_object() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    running = pod("web-abc-1", 10, ("apps/v1", "ReplicaSet", "web-abc"), started="2026-01-01T00:00:01Z")
    assert shaper.observe_object("ADDED", running, 1000).events == []


SPARK_CONFIG = TracerConfig.from_mapping(
    {
        "trackedObjects": {
            "sparkoperator.k8s.io/v1beta2.SparkApplication": {"trackLifecycle": True},
            "v1.Pod": {"trackLifecycle": True, "skipOwned": True},
        }
    },
    "spark",
)


async def test_a_spark_executor_owned_by_its_driver_pod_has_its_lifecycle_under_the_application() -> None:
    app = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "pi", "namespace": "default", "uid": "u-pi", "resourceVersion": "1"},
        "spec": {"type": "Scala"},
    }
    shaper = Shaper(SPARK_CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", app, 1000)
    driver = pod(
        "pi-driver",
        2,
        ("sparkoperator.k8s.io/v1beta2", "SparkApplication", "pi"),
        started="2026-01-01T00:00:01Z",
    )
    executor = pod("pi-exec-1", 3, ("v1", "Pod", "pi-driver"), started="2026-01-01T00:00:02Z")
    for p in (driver, executor):  # both recorded as objects: nothing makes them in a simulation
        assert [e.type for e in shaper.observe_object("ADDED", p, 1100).events] == [EventType.APPLIED]
    owners = [
        e.owner_key
        for p in (driver, executor)
        for e in (await shaper.observe_pod("MODIFIED", p, 1200)).events
    ]
    assert owners == ["sparkoperator.k8s.io/SparkApplication/default/pi"] * 2
