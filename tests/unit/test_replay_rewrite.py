"""Rewriting recorded objects for the simulated cluster."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pipeline.model.errors import RewriteError
from pipeline.model.sanitize import copy_json
from pipeline.model.tracer_config import TracerConfig
from pipeline.replay.rewrite import (
    LIFETIME_ANNOTATION,
    REPLAY_LABEL,
    RewriteSettings,
    RootRef,
    deletion_target,
    format_lifetime,
    map_namespace,
    rewrite_object,
    virtual_nodes,
)

ROOT = RootRef("kubetape.dev/v1", "ReplayRoot", "kubetape-replay-r1", "uid-root")
SETTINGS = RewriteSettings(replay_name="r1")


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "uid": "u1",
            "resourceVersion": "42",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "x", "uid": "u0"}],
            "labels": {"app": "web"},
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "creationTimestamp": None},
                "spec": {
                    "nodeName": "prod-node-7",
                    "nodeSelector": {"pool": "blue"},
                    "tolerations": [{"key": "x", "operator": "Exists"}],
                    "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}],
                    "initContainers": [{"name": "i", "image": "busybox", "ports": [{"containerPort": 1}]}],
                },
            },
        },
        "status": {"replicas": 2},
    }


def test_deployment_is_mapped_pinned_owned_and_stripped() -> None:
    original = deployment()
    before = copy_json(original)
    out = rewrite_object(original, SETTINGS, ROOT, namespaced=True, lifetime_ms=4500)

    assert original == before, "the recorded object must not be modified"
    meta = out["metadata"]
    assert meta["namespace"] == "kubetape-shop"
    assert "uid" not in meta
    assert "resourceVersion" not in meta
    assert "creationTimestamp" not in meta
    # in a namespace of the replay's own, the namespace (owned by the root) takes it along on cleanup
    assert "ownerReferences" not in meta
    kept_names = RewriteSettings(replay_name="r1", namespace_prefix="")
    kept = rewrite_object(original, kept_names, ROOT, namespaced=True)
    assert kept["metadata"]["ownerReferences"] == [ROOT.owner_reference()]
    assert meta["labels"] == {"app": "web", REPLAY_LABEL: "r1"}
    assert "status" not in out
    template = out["spec"]["template"]
    spec = template["spec"]
    assert "nodeName" not in spec
    assert spec["nodeSelector"] == {"pool": "blue", "type": "kwok"}
    assert {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert {"key": "x", "operator": "Exists"} in spec["tolerations"]
    assert "ports" not in spec["containers"][0]
    assert "ports" not in spec["initContainers"][0]
    assert template["metadata"]["annotations"][LIFETIME_ANNOTATION] == "4.500s"
    assert template["metadata"]["labels"] == {"app": "web", REPLAY_LABEL: "r1"}
    assert out["spec"]["selector"] == {"matchLabels": {"app": "web"}}


def test_rewriting_twice_adds_the_toleration_once() -> None:
    once = rewrite_object(deployment(), SETTINGS, ROOT, namespaced=True)
    twice = rewrite_object(once, SETTINGS, ROOT, namespaced=True)
    tolerations = twice["spec"]["template"]["spec"]["tolerations"]
    assert len(tolerations) == 2
    assert LIFETIME_ANNOTATION not in twice["spec"]["template"]["metadata"]["annotations"]


def test_cronjob_template_and_bare_pod_are_found() -> None:
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}},
    }
    out = rewrite_object(cronjob, SETTINGS, ROOT, namespaced=True, lifetime_ms=3000)
    pod_tpl = out["spec"]["jobTemplate"]["spec"]["template"]
    assert pod_tpl["spec"]["nodeSelector"] == {"type": "kwok"}
    assert pod_tpl["metadata"]["annotations"][LIFETIME_ANNOTATION] == "3.000s"

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}
    out = rewrite_object(pod, SETTINGS, ROOT, namespaced=True, lifetime_ms=1200)
    assert out["metadata"]["namespace"] == "kubetape-default"
    assert out["metadata"]["annotations"][LIFETIME_ANNOTATION] == "1.200s"
    assert out["spec"]["nodeSelector"] == {"type": "kwok"}


def test_custom_template_path_from_the_tracer_config() -> None:
    config = TracerConfig.from_mapping(
        {"trackedObjects": {"example.com/v1.Runner": {"podSpecTemplatePaths": ["/spec/pods/*/template"]}}},
        "test",
    )
    runner = {
        "apiVersion": "example.com/v1",
        "kind": "Runner",
        "metadata": {"name": "r", "namespace": "ci"},
        "spec": {"pods": [{"template": {"spec": {"containers": [{"name": "a"}]}}}] * 2},
    }
    settings = RewriteSettings(replay_name="r1", config=config)
    out = rewrite_object(runner, settings, ROOT, namespaced=True)
    assert all(p["template"]["spec"]["nodeSelector"] == {"type": "kwok"} for p in out["spec"]["pods"])


def test_cluster_scoped_objects_keep_no_namespace() -> None:
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}}
    out = rewrite_object(pc, SETTINGS, ROOT, namespaced=False)
    assert "namespace" not in out["metadata"]
    assert out["metadata"]["ownerReferences"] == [ROOT.owner_reference()]


def test_namespace_mapping_rules() -> None:
    assert map_namespace("a", RewriteSettings("r", namespace_prefix="")) == "a"
    assert map_namespace("a", RewriteSettings("r", namespace_prefix="sim")) == "sim-a"
    assert map_namespace("a", RewriteSettings("r", namespace_map={"a": "b"})) == "b"
    with pytest.raises(RewriteError, match="namespace-prefix"):
        map_namespace("n" * 60, SETTINGS)
    stub = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"}}
    assert deletion_target(stub, SETTINGS, namespaced=True) == ("kubetape-x", "p")


def test_object_without_a_name_is_a_rewrite_error() -> None:
    with pytest.raises(RewriteError, match=r"metadata\.name"):
        rewrite_object({"apiVersion": "v1", "kind": "Pod", "metadata": {}}, SETTINGS, ROOT, namespaced=True)


def test_virtual_nodes_from_a_skeleton() -> None:
    skeleton = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "kwok-node", "labels": {"type": "kwok"}},
        "status": {"capacity": {"cpu": "8"}},
    }
    nodes = virtual_nodes(skeleton, 3, SETTINGS, ROOT)
    assert [n["metadata"]["name"] for n in nodes] == ["r1-kwok-node-0", "r1-kwok-node-1", "r1-kwok-node-2"]
    assert all(n["status"] == {"capacity": {"cpu": "8"}} for n in nodes)
    assert all(n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake" for n in nodes)
    assert all(n["metadata"]["labels"]["type"] == "kwok" for n in nodes)
    with pytest.raises(RewriteError, match="kind: Node"):
        virtual_nodes({"kind": "Pod"}, 1, SETTINGS, ROOT)


def test_lifetime_format_is_a_go_duration() -> None:
    assert format_lifetime(30_000) == "30.000s"
    assert format_lifetime(0) == "0.001s"


@pytest.mark.parametrize("suspended", [None, False, True])
def test_cronjobs_whose_jobs_were_recorded_are_replayed_suspended(suspended: bool | None) -> None:
    """Their recorded Jobs are replayed at their times; the CronJob must not add its own on the wall clock."""
    spec: dict[str, Any] = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {}}}}}
    if suspended is not None:
        spec["suspend"] = suspended
    cronjob: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "tick", "namespace": "ops"},
        "spec": spec,
    }
    settings = replace(SETTINGS, suspended_cronjobs=frozenset({"batch/CronJob/ops/tick"}))
    out = rewrite_object(cronjob, settings, ROOT, namespaced=True)
    assert out["spec"]["suspend"] is True
    assert out["spec"]["schedule"] == "* * * * *"
    assert cronjob["spec"].get("suspend") is suspended  # the recorded object is left as it was
    # without recorded Jobs (SimKube's default), the CronJob fires on the wall clock as recorded
    assert rewrite_object(cronjob, SETTINGS, ROOT, namespaced=True)["spec"].get("suspend") is suspended
    other = replace(SETTINGS, suspended_cronjobs=frozenset({"batch/CronJob/ops/other"}))
    assert rewrite_object(cronjob, other, ROOT, namespaced=True)["spec"].get("suspend") is suspended
