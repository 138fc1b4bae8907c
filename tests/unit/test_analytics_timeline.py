"""The per-second timeline fold: what a recording and a replay's observed cluster look like per second."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.analytics.pod_requests import parse_quantity
from pipeline.analytics.snapshots import SnapshotEvents, strip_prefix
from pipeline.analytics.timeline import MAX_IDLE_S, TimelineFolder, fold_events
from pipeline.analytics.timeline_rows import CLUSTER_OWNER, TimelineRow
from pipeline.formats.trace import initial_events, read_trace
from pipeline.model.errors import FormatError
from pipeline.model.events import TS_MAX_MS, Event
from pipeline.model.keys import ObjectKey, key_of
from tests.data import SIMKUBE_TRACES

T0 = 1_800_000_000_000


def pod(
    name: str,
    *,
    phase: str | None = None,
    node: str | None = None,
    owner: str | None = None,
    cpu: str = "250m",
    memory: str = "64Mi",
    namespace: str = "web",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "controller": True}
        ]
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    }
    if node:
        obj["spec"]["nodeName"] = node
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def applied(at_s: float, obj: dict[str, Any]) -> Event:
    return Event.applied(T0 + round(at_s * 1000), key_of(obj), obj, 0)


def cluster(rows: list[TimelineRow]) -> dict[int, TimelineRow]:
    return {row.second: row for row in rows if row.owner == CLUSTER_OWNER}


def test_quantities_parse_as_kubernetes_writes_them() -> None:
    assert parse_quantity("250m") == pytest.approx(0.25)
    assert parse_quantity("2") == 2.0
    assert parse_quantity("128Mi") == 128 * 2**20
    assert parse_quantity("1G") == 1e9
    assert parse_quantity("1e3") == 1000.0
    assert parse_quantity(3) == 3.0
    assert parse_quantity("lots") is None
    assert parse_quantity(True) is None


def test_recorded_bare_pods_run_exactly_their_recorded_seconds() -> None:
    folded = fold_events(initial_events(read_trace(SIMKUBE_TRACES / "bare-pods.sktrace"), time_ordered=True))
    per_second = cluster(folded.rows)
    # recorded: pod 1 runs 0–12 s, pod 2 is created at 42 s and runs 43–73 s, pod 3 103–133 s, pod 4 163 s–
    running = [s for s, row in sorted(per_second.items()) if row.running]
    assert running[:12] == list(range(12))
    assert per_second[12].running == 0
    assert per_second[42].pending == 1  # the recorded pod object exists a second before it starts
    assert per_second[43].running == 1
    assert per_second[72].running == 1
    assert per_second[73].running == 0
    assert per_second[163].running == 1
    assert sum(row.running for row in per_second.values()) == 12 + 30 + 30 + 1
    delays = {p.pod.rsplit("/", 1)[1]: p.scheduling_delay_s for p in folded.pods}
    assert delays["bare-pod-1781282509"] == 1.0
    # each bare pod is its own owner, as SimKube counts them
    owners = {row.owner for row in folded.rows} - {CLUSTER_OWNER}
    assert len(owners) == 4


def test_replayed_pods_are_counted_by_phase_under_their_deployment() -> None:
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-abc",
            "namespace": "web",
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "controller": True}
            ],
        },
    }
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    events = [
        applied(0, node),
        applied(0, rs),
        applied(0.5, pod("web-abc-1", owner="web-abc")),
        applied(0.5, pod("web-abc-2", owner="web-abc")),
        applied(2.2, pod("web-abc-1", owner="web-abc", phase="Running", node="n1")),
        applied(3.1, pod("web-abc-2", owner="web-abc", phase="Running", node="n1")),
    ]
    folder = TimelineFolder(origin_ms=T0)
    folder.add_all(events)
    rows = folder.finish(T0 + 5000)
    deployment = {r.second: r for r in rows if r.owner == "apps/Deployment/web/web"}
    assert [(deployment[s].pending, deployment[s].running) for s in range(5)] == [
        (2, 0),
        (2, 0),
        (1, 1),
        (0, 2),
        (0, 2),
    ]
    assert deployment[4].cpu_requested_m == 500
    assert deployment[4].memory_requested_bytes == 128 * 2**20
    assert deployment[4].nodes_used == 1
    assert cluster(rows)[0].nodes == 1
    delays = sorted(p.scheduling_delay_s or 0 for p in folder.pod_times())
    assert delays == [pytest.approx(1.7), pytest.approx(2.6)]


def test_lifecycle_pods_request_what_their_owners_template_requests() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "web"},
        "spec": {"template": {"spec": pod("x", cpu="1", memory="1Gi")["spec"]}},
    }
    owner = ObjectKey("apps/Deployment/web/web")
    events = [
        applied(0, deployment),
        *(
            Event.pod_lifecycle(
                T0 + 1000,
                ObjectKey(f"core/Pod/web/web-{i}"),
                owner_key=owner,
                pod_spec_hash=1,
                start_ms=T0 + 1000,
                end_ms=T0 + 3000,
            )
            for i in range(3)
        ),
    ]
    rows = fold_events(events, origin_ms=T0, end_ms=T0 + 4000).rows
    by_second = {r.second: r for r in rows if r.owner == owner}
    assert by_second[1].running == 3
    assert by_second[1].cpu_requested_m == 3000
    assert by_second[3].running == 0
    assert by_second[3].succeeded == 3
    assert by_second[3].cpu_requested_m == 0  # finished pods hold nothing


def test_a_fold_resumed_from_its_state_ends_where_one_pass_ends() -> None:
    events = initial_events(read_trace(SIMKUBE_TRACES / "bare-pods.sktrace"), time_ordered=True)
    whole = TimelineFolder()
    whole.add_all(events)
    expected = whole.advance() + whole.finish()

    first = TimelineFolder()
    first.add_all(events[:3])
    rows = first.advance()
    resumed = TimelineFolder.from_state(first.to_state())
    resumed.add_all(events[3:])
    rows += resumed.advance() + resumed.finish()
    assert rows == expected


def test_an_unknown_state_version_is_refused_with_what_to_do() -> None:
    with pytest.raises(FormatError, match=r"version 99 .*delete it"):
        TimelineFolder.from_state({"version": 99}, "state.json")


def test_snapshots_become_applies_and_deletes_with_recorded_namespaces() -> None:
    snapshots = SnapshotEvents(strip_prefix("run1"))
    listed = [{"metadata": {"name": "a", "namespace": "run1-web"}, "status": {"phase": "Running"}}]
    first = snapshots.observe(T0, "v1", "Pod", listed)
    assert [(e.type.value, e.key) for e in first] == [("applied", "core/Pod/web/a")]
    second = snapshots.observe(T0 + 1000, "v1", "Pod", [])
    assert [(e.type.value, e.key) for e in second] == [("deleted", "core/Pod/web/a")]
    nameless = snapshots.observe(T0 + 2000, "v1", "Pod", [{"metadata": {}}])
    assert nameless == []
    assert snapshots.skipped == 1


def test_a_terminating_pod_leaves_the_counts_when_its_deletion_starts() -> None:
    terminating = pod("a", phase="Running", node="n1")
    terminating["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:02Z"
    events = [applied(0, pod("a", phase="Running", node="n1")), applied(2, terminating)]
    per_second = cluster(fold_events(events, origin_ms=T0, end_ms=T0 + 4000).rows)
    assert [per_second[s].running for s in range(4)] == [1, 1, 0, 0]


def test_an_object_of_odd_shape_is_skipped_and_the_fold_goes_on() -> None:
    odd = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "odd", "namespace": "web"}, "spec": []}
    odd_owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": ["not", "a", "map"]}
    folder = TimelineFolder(origin_ms=T0)
    folder.add(Event.applied(T0, ObjectKey("core/Pod/web/odd"), odd, 0))
    folder.add(Event.applied(T0, ObjectKey("apps/ReplicaSet/web/rs"), odd_owner, 0))
    folder.add(applied(0.5, pod("fine", phase="Running")))
    per_second = cluster(folder.finish(T0 + 1000))
    assert per_second[0].running == 1
    assert per_second[0].pending == 1  # the odd pod still exists, without requests or node
    assert folder.skipped == 1


def test_a_lifecycle_published_after_its_pod_object_still_counts_from_its_start() -> None:
    # the exported trace of the scripted workload: the pod object (status Pending, as created) is
    # recorded just after the start its lifecycle reports, and the lifecycle arrives once it finished
    key = ObjectKey("core/Pod/shop/batch-a")
    events = [
        Event.applied(T0 + 1100, key, pod("batch-a", phase="Pending", namespace="shop"), 0),
        Event.pod_lifecycle(
            T0 + 5200, key, owner_key=key, pod_spec_hash=1, start_ms=T0 + 1000, end_ms=T0 + 5000
        ),
    ]
    per_second = cluster(fold_events(events, origin_ms=T0, end_ms=T0 + 7000).rows)
    assert [per_second[s].running for s in range(7)] == [0, 1, 1, 1, 1, 0, 0]
    assert per_second[5].succeeded == 1


# ---- events dated far ahead: bounded work ---------------------------------------------------------
YEAR_MS = 365 * 86_400_000


def test_a_live_fold_sets_aside_an_event_dated_past_the_horizon_and_goes_on() -> None:
    """A skewed clock a year ahead: the event is counted and left out, and rows keep following the
    real events instead of waiting a year for the watermark it would have set."""
    now_ms = T0 + 10_000
    folder = TimelineFolder(clock_ms=lambda: now_ms)
    folder.add(applied(0, pod("a", phase="Running", node="n1")))
    folder.add(applied(YEAR_MS / 1000, pod("skewed", phase="Running", node="n1")))
    skewed_key = ObjectKey("core/Pod/web/late-end")
    folder.add(  # a lifecycle whose end is far ahead is just as skewed
        Event.pod_lifecycle(
            T0 + 1000, skewed_key, owner_key=skewed_key, pod_spec_hash=1, start_ms=T0, end_ms=T0 + YEAR_MS
        )
    )
    folder.add(applied(5, pod("b", phase="Running", node="n1")))
    assert folder.future_dated == 2
    assert folder.watermark_ms == T0 + 5000
    per_second = cluster(folder.advance())
    assert sorted(per_second) == [0, 1, 2, 3, 4]
    assert [per_second[s].running for s in range(5)] == [1, 1, 1, 1, 1]
    folder.add(applied(6, pod("c", phase="Running", node="n1")))
    assert cluster(folder.advance())[5].running == 2  # the pod of second 5 counts


def test_an_event_within_the_horizon_is_folded() -> None:
    folder = TimelineFolder(clock_ms=lambda: T0, horizon_ms=60_000)
    folder.add(applied(0, pod("a", phase="Running")))
    folder.add(applied(59, pod("b", phase="Running")))
    folder.add(applied(61, pod("c", phase="Running")))
    assert folder.future_dated == 1
    assert folder.watermark_ms == T0 + 59_000


@pytest.mark.parametrize("ahead_ms", [YEAR_MS, TS_MAX_MS - T0])
def test_an_offline_fold_over_a_huge_quiet_stretch_costs_a_bounded_number_of_rows(ahead_ms: int) -> None:
    """Without a clock every event is folded, but after ``max_idle_s`` quiet seconds the identical rows
    stop: a year (or everything up to year 9999) is not walked second by second."""
    events = [applied(0, pod("a", phase="Running")), applied(ahead_ms / 1000, pod("b", phase="Running"))]
    folded = fold_events(events, origin_ms=T0)  # before: 31 million (or 250 billion) seconds walked
    per_second = cluster(folded.rows)
    assert len(per_second) <= MAX_IDLE_S + 3
    assert all(per_second[s].running == 1 for s in range(MAX_IDLE_S))
    ahead_s = ahead_ms // 1000
    assert per_second[ahead_s].running == 2  # the rows resume at the next change, with it applied
    assert max(per_second) == ahead_s  # and end where the fold ends (the second after the last event)


def test_a_lifecycle_ending_in_year_9999_does_not_hang_finish() -> None:
    key = ObjectKey("core/Pod/web/forever")
    folder = TimelineFolder(origin_ms=T0, max_idle_s=10)
    folder.add(Event.pod_lifecycle(T0, key, owner_key=key, pod_spec_hash=1, start_ms=T0, end_ms=TS_MAX_MS))
    per_second = cluster(folder.finish())
    assert [per_second[s].running for s in range(11)] == [1] * 11  # the start, then 10 quiet seconds
    end_s = (TS_MAX_MS - T0) // 1000
    assert sorted(per_second)[11:] == [end_s]  # nothing between: the pod runs, unchanged
    assert per_second[end_s].succeeded == 1


def test_quiet_rows_stop_and_resume_across_advances_and_restarts() -> None:
    """The quiet count survives ``advance`` calls and a restart from the saved state."""
    folder = TimelineFolder(origin_ms=T0, max_idle_s=3)
    folder.add(applied(0, pod("a", phase="Running")))
    assert sorted(cluster(folder.advance(T0 + 2000))) == [0, 1]
    resumed = TimelineFolder.from_state(folder.to_state(), max_idle_s=3)
    assert sorted(cluster(resumed.advance(T0 + 10_000))) == [2, 3]  # seconds 1..3 are quiet: 3 rows
    resumed.add(applied(20.5, pod("b", phase="Running")))
    rows = cluster(resumed.advance(T0 + 30_000))
    assert sorted(rows) == [20, 21, 22, 23]
    assert rows[20].running == 2


def test_the_metrics_consumer_counts_future_dated_events_and_keeps_its_gauges_current() -> None:
    from pipeline.analytics.builtin_metrics import MetricsConsumer
    from pipeline.analytics.consumer import BatchContext

    now_s = (T0 + 10_000) / 1000
    consumer = MetricsConsumer(clock=lambda: now_s)
    batch = [applied(0, pod("a", phase="Running")), applied(YEAR_MS / 1000, pod("skewed", phase="Running"))]
    consumer.on_batch(batch, BatchContext("memory", 0, 0))
    consumer.on_batch([applied(5, pod("b", phase="Running"))], BatchContext("memory", 0, 0))
    text = consumer.metrics.render()
    assert "kubetape_analytics_future_dated_events_total 1" in text
    assert 'kubetape_analytics_pods{phase="Running"} 1' in text  # second 4 is the last complete one
    assert consumer.metrics.value("event_age_seconds") == pytest.approx(5.0)


def deployment(name: str, replicas: int | None, namespace: str = "web") -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c"}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}  # fmt: skip


def by_owner(rows: list[TimelineRow], owner: str) -> dict[int, TimelineRow]:
    return {row.second: row for row in rows if row.owner == owner}


def test_a_trace_without_pods_says_what_each_deployment_asked_for_second_by_second() -> None:
    web, api = deployment("web", 3), deployment("api", None)  # unset replicas: Kubernetes makes it 1
    events = [
        applied(0, web),
        applied(0.5, api),
        applied(2, deployment("web", 5)),
        applied(3, deployment("web", 0)),
        Event.deleted(T0 + 4_000, key_of(web), web),
    ]
    rows = fold_events(events, origin_ms=T0, end_ms=T0 + 6_000).rows
    web_rows, api_rows = by_owner(rows, str(key_of(web))), by_owner(rows, str(key_of(api)))
    assert {s: r.desired for s, r in web_rows.items()} == {0: 3, 1: 3, 2: 5}  # 0 and deleted: no row
    assert all(r.running == 0 and r.pending == 0 for r in web_rows.values())  # nothing ran in the trace
    assert {s: r.desired for s, r in api_rows.items()} == dict.fromkeys(range(6), 1)
    assert {s: r.desired for s, r in cluster(rows).items()} == {0: 4, 1: 4, 2: 6, 3: 1, 4: 1, 5: 1}


def test_a_deployments_pods_count_under_it_and_its_replicaset_asks_for_nothing_twice() -> None:
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": "web",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                          "controller": True}]},
        "spec": {"replicas": 2},
    }  # fmt: skip
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "web"},
           "spec": {"parallelism": 4}}  # fmt: skip
    events = [
        applied(0, deployment("web", 2)),
        applied(0, rs),
        applied(0, job),
        applied(0.2, pod("web-1-a", phase="Running", node="n1", owner="web-1")),
        applied(0.2, pod("bare", phase="Running", node="n1")),
    ]
    rows = fold_events(events, origin_ms=T0, end_ms=T0 + 2_000).rows
    web = by_owner(rows, str(key_of(deployment("web", 2))))
    assert (web[1].desired, web[1].running) == (2, 1)  # asked for 2, one recorded running
    assert str(key_of(rs)) not in {r.owner for r in rows}
    assert str(key_of(job)) not in {r.owner for r in rows}  # a Job's pods' run time is not in its spec
    assert by_owner(rows, str(key_of(pod("bare"))))[1].desired == 1
    assert cluster(rows)[1].desired == 3


def test_a_fold_resumed_mid_change_keeps_what_owners_asked_for() -> None:
    events = [
        applied(0, deployment("web", 3)),
        applied(5, deployment("web", 7)),
        applied(9, deployment("x", 1)),
    ]
    whole = fold_events(events, origin_ms=T0, end_ms=T0 + 10_000).rows
    first = TimelineFolder(T0)
    first.add_all(events[:2])
    rows = first.advance(T0 + 2_000)  # the change at 5 s is still queued
    resumed = TimelineFolder.from_state(first.to_state())
    resumed.add_all(events[2:])
    rows += resumed.finish(T0 + 10_000)
    assert rows == whole


def test_a_state_written_before_desired_existed_still_resumes() -> None:
    folder = TimelineFolder(T0)
    folder.add(applied(0, pod("bare", phase="Running", node="n1")))
    folder.add(applied(3, pod("other", phase="Pending")))
    state = folder.to_state()
    del state["desired"]
    state["queue"] = [entry[:8] for entry in state["queue"]]  # the queue's 8 fields of version 1
    resumed = TimelineFolder.from_state(state)
    rows = cluster(resumed.finish(T0 + 4_000))
    assert (rows[3].running, rows[3].pending) == (1, 1)
