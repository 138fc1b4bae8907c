"""The per-second timeline fold: what a recording and a replay's observed cluster look like per second."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.analytics.snapshots import SnapshotEvents, strip_prefix
from pipeline.analytics.timeline import (
    CLUSTER_OWNER,
    TimelineFolder,
    TimelineRow,
    fold_events,
    parse_quantity,
)
from pipeline.analytics.tracefile import read_trace, trace_events
from pipeline.model.errors import FormatError
from pipeline.model.events import Event
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
    folded = fold_events(trace_events(read_trace(SIMKUBE_TRACES / "bare-pods.sktrace")))
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
    events = trace_events(read_trace(SIMKUBE_TRACES / "bare-pods.sktrace"))
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
