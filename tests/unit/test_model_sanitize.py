"""Sanitizing objects as SimKube does, Secrets never keeping data, and redaction rules."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given

from pipeline.model.sanitize import deletion_stub, sanitize
from pipeline.model.tracer_config import TracerConfig
from tests.unit.test_model_events import k8s_objects


def _live_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "default",
            "uid": "0b7c",
            "resourceVersion": "812",
            "generation": 2,
            "creationTimestamp": "2024-02-16T17:02:23Z",
            "deletionTimestamp": "2024-02-16T17:05:00Z",
            "deletionGracePeriodSeconds": 30,
            "managedFields": [{"manager": "kubectl"}],
            "labels": {"app": "web"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                "deployment.kubernetes.io/revision": "3",
                "team": "a",
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "9"}],
        },
        "spec": {"nodeName": "node-3", "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": "Running"},
    }


def test_sanitize_removes_what_simkube_removes_and_keeps_the_rest() -> None:
    pod = _live_pod()
    before = copy.deepcopy(pod)
    clean = sanitize(pod)
    assert pod == before  # never mutates its input
    assert clean["metadata"] == {
        "name": "web-0",
        "namespace": "default",
        "labels": {"app": "web"},
        "annotations": {"team": "a"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "9"}],
    }
    assert clean["spec"] == {"containers": [{"name": "c", "image": "nginx"}]}  # nodeName removed
    assert clean["status"] == {"phase": "Running"}  # kept, as SimKube does


def test_missing_annotations_become_empty_as_in_simkube_traces() -> None:
    clean = sanitize({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}})
    assert clean["metadata"]["annotations"] == {}


def test_type_meta_is_filled_in_for_list_results() -> None:
    clean = sanitize({"metadata": {"name": "x"}}, api_version="apps/v1", kind="Deployment")
    assert (clean["apiVersion"], clean["kind"]) == ("apps/v1", "Deployment")


def test_secret_data_never_survives_even_without_config() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"},
        "type": "Opaque",
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"token": "t0k3n"},
    }
    for config in (None, TracerConfig.default()):
        clean = sanitize(secret, config)
        assert "data" not in clean
        assert "stringData" not in clean
        assert clean["type"] == "Opaque"


def test_redaction_rules_remove_or_mask_by_kind() -> None:
    config = TracerConfig.from_mapping(
        {
            "trackedObjects": {},
            "redact": [
                {"kinds": ["v1.ConfigMap"], "paths": ["/data"], "action": "remove"},
                {"paths": ["/spec/template/spec/containers/*/env"], "action": "mask"},
            ],
        },
        "inline",
    )
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    assert "data" not in sanitize(cm, config)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "data": {"untouched": "yes"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "a", "env": [{"name": "TOKEN", "value": "secret"}]},
                        {"name": "b", "env": [{"name": "PORT", "value": "80"}]},
                    ]
                }
            }
        },
    }
    clean = sanitize(deployment, config)
    containers = clean["spec"]["template"]["spec"]["containers"]
    assert containers[0]["env"] == [{"name": "<redacted>", "value": "<redacted>"}]
    assert containers[1]["env"] == [{"name": "<redacted>", "value": "<redacted>"}]
    assert containers[0]["name"] == "a"
    assert clean["data"] == {"untouched": "yes"}  # the ConfigMap rule does not apply to Deployments


@given(k8s_objects())
def test_sanitize_is_idempotent_and_pure(obj: dict[str, Any]) -> None:
    before = copy.deepcopy(obj)
    once = sanitize(obj)
    assert obj == before
    assert sanitize(once) == once


def test_deletion_stub_is_simkubes_deleted_object_form() -> None:
    assert deletion_stub(sanitize(_live_pod())) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default"},
    }
