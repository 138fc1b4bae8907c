"""Owner references of what a replay writes: a cluster-scoped object is owned by the replay's root, a
cluster-scoped ``ReplayRoot``, never by a namespaced object (Kubernetes forbids it: the garbage collector
treats such a reference as unresolvable), and the root's deletion still takes it along."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.io.kube.types import ApiResource
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from tests.unit.test_replay_replayer import KINDS, MemoryCluster, applied, fast, obj, trace

WIDGET = "example.com/v1"
CLUSTER_SCOPED_KINDS = {
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ApiResource(
        "rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False
    ),
    ("storage.k8s.io/v1", "StorageClass"): ApiResource(
        "storage.k8s.io/v1", "StorageClass", "storageclasses", False
    ),
    (WIDGET, "ClusterWidget"): ApiResource(WIDGET, "ClusterWidget", "clusterwidgets", False),
    (WIDGET, "Widget"): ApiResource(WIDGET, "Widget", "widgets", True),
}


@pytest.fixture(autouse=True)
def _kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, resource in CLUSTER_SCOPED_KINDS.items():
        monkeypatch.setitem(KINDS, key, resource)


def _scope(api_version: str, kind: str) -> bool:
    """Whether the kind is namespaced, as the apiserver serves it."""
    return KINDS[(api_version, kind)].namespaced


def _owned(name: str, api_version: str, kind: str, owner: dict[str, Any]) -> dict[str, Any]:
    body = obj(api_version, kind, name, None)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": "recorded",
        }
    ]
    return body


async def test_every_cluster_scoped_object_a_replay_writes_is_owned_by_the_cluster_scoped_root_alone() -> (
    None
):
    cluster = MemoryCluster()
    recorded_namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}
    events = [
        applied(0, obj("scheduling.k8s.io/v1", "PriorityClass", "high", None)),
        applied(0, obj("rbac.authorization.k8s.io/v1", "ClusterRole", "reader", None)),
        applied(0, obj("storage.k8s.io/v1", "StorageClass", "fast", None)),
        applied(0, recorded_namespace),
        applied(10, obj("v1", "ConfigMap", "settings", "shop")),
    ]
    skeleton = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sk"}, "status": {}}
    settings = fast(keep=True, node_pools=((skeleton, 1),))
    replayer = Replayer(cluster, plan_replay(trace(events), speed=1000), settings)
    report = await replayer.run()
    assert report.failed == 0, report.summary()

    (root,) = [o for o in cluster.applies if o["kind"] == "ReplayRoot"]
    cluster_scoped = [
        o for o in cluster.applies if not _scope(o["apiVersion"], o["kind"]) and o["kind"] != "ReplayRoot"
    ]
    kinds = sorted({o["kind"] for o in cluster_scoped})
    assert kinds == ["ClusterRole", "Namespace", "Node", "PriorityClass", "StorageClass"]
    live_root = cluster.objects[("ReplayRoot", None, root["metadata"]["name"])]
    for written in cluster_scoped:
        refs = written["metadata"]["ownerReferences"]
        assert [(r["kind"], r["uid"]) for r in refs] == [("ReplayRoot", live_root["metadata"]["uid"])], (
            written
        )
        assert not any(_scope(r["apiVersion"], r["kind"]) for r in refs), written

    # and the replay's cleanup (the root's deletion) takes every one of them along
    await replayer.cleanup()
    assert report.cleanup.startswith("done"), report.cleanup
    assert cluster.objects == {}


async def test_a_cluster_scoped_object_keeps_a_replayed_cluster_scoped_owner_and_never_a_namespaced_one() -> (
    None
):
    cluster = MemoryCluster()
    parent = obj(WIDGET, "ClusterWidget", "parent", None)
    # a namespaced owner recorded without its namespace: its recorded key names none, as a
    # cluster-scoped one's does, so only the scope it was written with tells them apart
    namespaced = obj(WIDGET, "Widget", "w", None)
    child = _owned("child", WIDGET, "ClusterWidget", parent)
    orphan = _owned("orphan", WIDGET, "ClusterWidget", namespaced)
    events = [applied(0, parent), applied(0, namespaced), applied(10, child), applied(10, orphan)]
    report = await Replayer(cluster, plan_replay(trace(events), speed=1000), fast(keep=True)).run()
    assert report.failed == 0, report.summary()

    written = {o["metadata"]["name"]: o["metadata"] for o in cluster.applies}
    assert [r["kind"] for r in written["child"]["ownerReferences"]] == ["ReplayRoot", "ClusterWidget"]
    assert written["child"]["ownerReferences"][1]["uid"] == "uid-parent"
    assert [r["kind"] for r in written["orphan"]["ownerReferences"]] == ["ReplayRoot"]
