"""Event time from the object's own evidence when the watcher saw a change late (restart, outage,
re-list): managedFields times, creationTimestamp, deletionTimestamp; and the event says which it used."""

from __future__ import annotations

import copy
from typing import Any

from pipeline.formats.wire.codec import encode_event
from pipeline.io.metrics import Metrics
from pipeline.model.events import Event, EventType
from pipeline.model.tracer_config import TracerConfig
from pipeline.watch.event_time import LATE_AFTER_MS, TIME_SOURCE_ANNOTATION
from pipeline.watch.shaper import Shaper
from pipeline.watch.watcher import Watcher
from tests.unit.test_watch_shaper import GetOnlyCluster
from tests.unit.test_watch_watcher import FAST, FakeBus, FakeCluster, run_until

CONFIG = TracerConfig.from_mapping({"trackedObjects": {"apps/v1.Deployment": {}}}, "test")
CREATED = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SCALED = CREATED + 30_000  # 2026-01-01T00:00:30Z


def deployment(rv: int, replicas: int, *, deleted: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "web",
        "namespace": "default",
        "uid": "d1",
        "resourceVersion": str(rv),
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "managedFields": [
            {"manager": "kubectl", "operation": "Update", "time": "2026-01-01T00:00:20Z"},
            # kubectl scale writes through the scale subresource: a change of the spec
            {
                "manager": "kubectl",
                "operation": "Update",
                "subresource": "scale",
                "time": "2026-01-01T00:00:30Z",
            },
            # a later status write is not a change of the spec
            {"manager": "kube-controller-manager", "subresource": "status", "time": "2026-01-01T00:05:00Z"},
        ],
    }
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {"replicas": replicas}}


def test_a_late_observation_takes_the_latest_spec_write_and_says_so() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    out = shaper.observe_object("ADDED", deployment(5, 3), SCALED + 600_000)
    [event] = out.events
    assert event.ts_ms == SCALED
    assert event.obj is not None
    assert event.obj["metadata"]["annotations"][TIME_SOURCE_ANNOTATION] == "managedFields"
    assert {r.ts_ms for r in out.records} == {SCALED}, "the Kafka timestamp is the event time"


def test_creation_time_when_nothing_wrote_later() -> None:
    obj = deployment(5, 3)
    del obj["metadata"]["managedFields"]
    [event] = Shaper(CONFIG, GetOnlyCluster([])).observe_object("ADDED", obj, CREATED + 120_000).events
    assert event.ts_ms == CREATED
    assert event.obj is not None
    assert event.obj["metadata"]["annotations"][TIME_SOURCE_ANNOTATION] == "creationTimestamp"


def test_a_timely_observation_keeps_its_own_time_and_no_annotation() -> None:
    observed = SCALED + LATE_AFTER_MS - 1
    [event] = Shaper(CONFIG, GetOnlyCluster([])).observe_object("ADDED", deployment(5, 3), observed).events
    assert event.ts_ms == observed
    assert event.obj is not None
    assert TIME_SOURCE_ANNOTATION not in event.obj["metadata"]["annotations"]


def test_evidence_older_than_the_keys_last_event_is_not_used() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    # timely (stamped at observation), and more than the evidence's one-second resolution after it
    shaper.observe_object("ADDED", deployment(5, 3), SCALED + 1_200)
    # a change whose managedFields were not updated (another manager's entry is older): observed time
    [event] = shaper.observe_object("MODIFIED", deployment(6, 4), SCALED + 900_000).events
    assert event.ts_ms == SCALED + 900_000
    assert event.obj is not None
    assert TIME_SOURCE_ANNOTATION not in event.obj["metadata"]["annotations"]


def test_a_late_deletion_takes_the_deletion_timestamp() -> None:
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", deployment(5, 3), SCALED + 100)
    out = shaper.observe_object("DELETED", deployment(7, 3, deleted=True), CREATED + 3_600_000)
    [event] = out.events
    assert event.type is EventType.DELETED
    assert event.ts_ms == CREATED + 600_000
    assert event.obj is not None
    assert event.obj["metadata"]["annotations"] == {TIME_SOURCE_ANNOTATION: "deletionTimestamp"}


def test_odd_evidence_is_ignored() -> None:
    obj = deployment(5, 3)
    obj["metadata"]["creationTimestamp"] = "yesterday"
    obj["metadata"]["managedFields"] = [{"time": 12}, "x", {"time": "1969-12-31T00:00:00Z"}]
    [event] = Shaper(CONFIG, GetOnlyCluster([])).observe_object("ADDED", obj, SCALED).events
    assert event.ts_ms == SCALED


async def test_a_relist_after_a_restart_stamps_changes_with_their_evidence() -> None:
    # first run: the Deployment with 3 replicas, observed in time
    first_bus = FakeBus()
    cluster = FakeCluster()
    before = deployment(5, 3)
    cluster.objects["Deployment"] = [copy.deepcopy(before)]
    first = Watcher(CONFIG, cluster, first_bus, Metrics(), settings=FAST, clock=lambda: SCALED + 200)
    await run_until(first, first_bus.events)
    # while the watcher is away, the Deployment is scaled (kubectl writes at 00:01:00); 10 min later
    # the watcher restarts
    later = deployment(9, 5)
    later["metadata"]["managedFields"][1]["time"] = "2026-01-01T00:01:00Z"
    cluster.objects["Deployment"] = [later]
    bus = FakeBus()
    restarted = Watcher(CONFIG, cluster, bus, Metrics(), settings=FAST, clock=lambda: SCALED + 600_000)
    restarted.restore(first_bus.compacted("kubetape.state"), {})
    await run_until(restarted, lambda: any(e.type is EventType.APPLIED for e in bus.events()))
    [applied] = [e for e in bus.events() if e.type is EventType.APPLIED]
    assert applied.ts_ms == CREATED + 60_000
    assert applied.obj is not None
    assert applied.obj["spec"]["replicas"] == 5
    assert applied.obj["metadata"]["annotations"][TIME_SOURCE_ANNOTATION] == "managedFields"


def restarted(shaper: Shaper) -> Shaper:
    """A new watcher's shaper restored from what ``shaper`` published on the state topic."""
    state = {
        str(key): encode_event(
            Event.applied(p.ts_ms, key, p.obj, p.spec_hash, uid=p.uid, resource_version=p.resource_version)
        )
        for key, p in shaper.index.items()
    }
    fresh = Shaper(CONFIG, GetOnlyCluster([]))
    fresh.restore(state, {})
    return fresh


def test_evidence_in_the_same_second_as_the_last_event_dates_the_change_at_that_event() -> None:
    # first seen at 00:00:30.700; scaled again at 00:00:30.900 while the watcher was down. The
    # managedFields time is truncated to 00:00:30, which reads as before the first event
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", deployment(5, 3), SCALED + 700)
    [event] = restarted(shaper).observe_object("MODIFIED", deployment(6, 4), SCALED + 900_000).events
    assert event.ts_ms == SCALED + 700, "not before the previous event, and not at the late observation"
    assert event.obj is not None
    assert event.obj["metadata"]["annotations"][TIME_SOURCE_ANNOTATION] == "managedFields"


def test_a_value_only_write_seen_in_time_keeps_its_observed_time() -> None:
    # An HPA scales through /scale: the apiserver moves a managedFields entry's time only when its set
    # of fields changes, so the Deployment still shows the times the watcher saw on the last version.
    # Seen in time, 46 s after that version, the change is at its observation, not dated back.
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", deployment(5, 3), SCALED + 300)
    [event] = shaper.observe_object("MODIFIED", deployment(6, 4), SCALED + 46_000).events
    assert event.ts_ms == SCALED + 46_000
    assert event.obj is not None
    assert TIME_SOURCE_ANNOTATION not in event.obj["metadata"]["annotations"]


def test_an_update_seen_in_time_is_not_dated_by_the_objects_creation() -> None:
    # no managedFields at all (a client that strips them, an old apiserver): creationTimestamp is the
    # only evidence, and it is of the creation, not of this later change
    first, second = deployment(5, 3), deployment(6, 4)
    del first["metadata"]["managedFields"], second["metadata"]["managedFields"]
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", first, CREATED + 400)
    [event] = shaper.observe_object("MODIFIED", second, CREATED + 46_000).events
    assert event.ts_ms == CREATED + 46_000
    assert event.obj is not None
    assert TIME_SOURCE_ANNOTATION not in event.obj["metadata"]["annotations"]


def test_a_new_managed_fields_time_still_dates_a_late_update() -> None:
    # the watcher saw the version of 00:00:30; a new manager wrote at 00:01:00 while the watch was
    # away and the change was observed 10 minutes later: the new entry is evidence of this change
    shaper = Shaper(CONFIG, GetOnlyCluster([]))
    shaper.observe_object("ADDED", deployment(5, 3), SCALED + 300)
    later = deployment(6, 4)
    later["metadata"]["managedFields"].append(
        {"manager": "ops", "operation": "Update", "time": "2026-01-01T00:01:00Z"}
    )
    [event] = shaper.observe_object("MODIFIED", later, SCALED + 600_000).events
    assert event.ts_ms == CREATED + 60_000
    assert event.obj is not None
    assert event.obj["metadata"]["annotations"][TIME_SOURCE_ANNOTATION] == "managedFields"
