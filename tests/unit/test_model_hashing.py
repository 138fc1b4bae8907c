"""SimKube v2-compatible hashes, checked against hashes stored in SimKube's own traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.formats.simkube import read_simkube_trace
from pipeline.model.errors import FormatError
from pipeline.model.hashing import json_hash, object_spec_hash, pod_spec_hash, siphash13, stable_pod_spec


def test_siphash13_matches_reference_vectors() -> None:
    # Rust: DefaultHasher::new().finish() with nothing written (SipHash-1-3, keys 0/0)
    assert siphash13(b"") == 0xD1FBA762150C532C
    assert siphash13(bytes(range(8))) != siphash13(bytes(range(7)))  # length is mixed in


def test_cronjob_index_hash_is_reproduced(simkube_traces: Path) -> None:
    trace = read_simkube_trace(simkube_traces / "cronjob.sktrace")
    cronjob = trace.events[1].applied_objs[0]
    stored = trace.index["batch/v1.CronJob"]["default/hello-simkube"]
    assert stored == 17156035354639895998
    assert object_spec_hash(cronjob) == stored


def test_bare_pods_lifecycle_key_is_reproduced(simkube_traces: Path) -> None:
    trace = read_simkube_trace(simkube_traces / "bare-pods.sktrace")
    pods = [obj for event in trace.events for obj in event.applied_objs]
    assert len(pods) == 4
    for pod in pods:
        owner = ("v1.Pod", f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        assert list(trace.pod_lifecycles[owner]) == [2151974655102796215]
        assert pod_spec_hash(pod["spec"]) == 2151974655102796215


def test_pod_spec_hash_ignores_per_pod_noise() -> None:
    base: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}
    noisy: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "ports": [{"containerPort": 80}],
                "volumeMounts": [{"name": "kube-api-access-x1", "mountPath": "/var/run/secrets"}],
            }
        ],
        "restartPolicy": "Never",
        "nodeName": "node-7",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "volumes": [{"name": "kube-api-access-x1", "projected": {}}],
        "priorityClassName": None,
    }
    assert pod_spec_hash(noisy) == pod_spec_hash(base)
    assert pod_spec_hash({**base, "restartPolicy": "Always"}) != pod_spec_hash(base)
    # SimKube keeps the filtered lists as present-but-empty: the hash sees []
    assert stable_pod_spec(base)["volumes"] == []
    assert stable_pod_spec(base)["containers"][0]["volumeMounts"] == []


def test_pod_spec_hash_does_not_mutate_its_input() -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c", "ports": [{"containerPort": 1}]}], "nodeName": "n"}
    pod_spec_hash(spec)
    assert spec == {"containers": [{"name": "c", "ports": [{"containerPort": 1}]}], "nodeName": "n"}


def test_object_hash_sorts_keys_and_distinguishes_types() -> None:
    assert json_hash({"a": 1, "b": 2}) == json_hash({"b": 2, "a": 1})
    assert json_hash(1) != json_hash(1.0)
    assert json_hash(0.0) == json_hash(-0.0)
    assert json_hash(-1) == json_hash((1 << 64) - 1)  # both write the same 8 bytes, as in Rust
    assert json_hash(["ab"]) != json_hash(["a", "b"])  # strings are terminated by 0xFF
    assert object_spec_hash({"kind": "ConfigMap"}) == json_hash(None)


def test_non_json_values_raise_format_error() -> None:
    with pytest.raises(FormatError, match="bytes"):
        json_hash({"a": b"raw"})
