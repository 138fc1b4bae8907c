"""Env values never reach a trace by default: every tracked kind, every container list, the shipped configs.

Each object carries one distinct env value per container list; the objects go through the watcher's
shaper (what is published on kubetape.events and kubetape.state), and no value may be in any record.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from pipeline.model.keys import GroupVersionKind
from pipeline.model.pointer import parse_pointer
from pipeline.model.tracer_config import (
    CONTAINER_LISTS,
    REDACTED,
    TracerConfig,
    load_tracer_config,
)
from pipeline.watch.shaper import Shaper

REPO = Path(__file__).resolve().parents[2]
SHIPPED = [REPO / "examples" / "tracer.yaml", REPO / "k8s" / "prod" / "tracer.yaml"]


class NoCluster:
    async def resolve(self, gvk: GroupVersionKind) -> None:
        return None

    def list_pages(self, res: Any) -> Any:
        raise AssertionError("not used")

    async def get_object(self, res: Any, namespace: str | None, name: str) -> None:
        return None

    def watch_objects(self, res: Any, since: Any) -> Any:
        raise AssertionError("not used")


def pod_spec(tag: str) -> dict[str, Any]:
    """A PodSpec whose every container list has a container with a secret env value marked ``tag``."""
    spec: dict[str, Any] = {}
    for lst in CONTAINER_LISTS:
        spec[lst] = [
            {
                "name": f"{lst}-c",
                "image": "busybox:1",
                "env": [
                    {"name": "TOKEN", "value": f"secret-{tag}-{lst}"},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                ],
            }
        ]
    return spec


def set_at(doc: dict[str, Any], pointer: str, value: Any) -> None:
    """Create ``pointer`` (no wildcards) in ``doc`` and put ``value`` there."""
    segments = parse_pointer(pointer)
    node = doc
    for seg in segments[:-1]:
        node = node.setdefault(seg, {})
    node[segments[-1]] = value


def object_of(gvk: GroupVersionKind, template_paths: tuple[str, ...]) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"{gvk.group}/{gvk.version}" if gvk.group else gvk.version,
        "kind": gvk.kind,
        "metadata": {"name": "o", "namespace": "team", "uid": "u1", "resourceVersion": "5"},
    }
    for path in template_paths:
        tag = f"{gvk.kind}{path}"
        if path == "":
            obj["spec"] = pod_spec(tag)
        else:
            set_at(obj, path.replace("/*/", "/0/"), {"metadata": {}, "spec": pod_spec(tag)})
    return obj


def fix_arrays(obj: dict[str, Any]) -> None:
    """set_at builds dicts; a ``/0/`` step in a custom resource's path must become a list."""
    spec = obj.get("spec")
    if isinstance(spec, dict) and "replicaSpecs" in spec:
        spec["replicaSpecs"] = [spec["replicaSpecs"]["0"]]


def published_bytes(config: TracerConfig, obj: dict[str, Any]) -> bytes:
    shaped = Shaper(config, NoCluster()).observe_object("ADDED", copy.deepcopy(obj), 1_000)
    assert shaped.events, f"{obj['kind']} was not published"
    return b"".join(r.value or b"" for r in shaped.records)


def configs() -> list[tuple[str, TracerConfig]]:
    return [("default", TracerConfig.default())] + [(p.name, load_tracer_config(p)) for p in SHIPPED]


@pytest.mark.parametrize(("name", "config"), configs(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_env_value_of_any_tracked_kind_is_published(name: str, config: TracerConfig) -> None:
    assert config.tracked, name
    for entry in config.tracked:
        obj = object_of(entry.gvk, entry.pod_spec_template_paths)
        data = published_bytes(config, obj)
        assert b"secret-" not in data, f"{name}: an env value of {entry.gvk} leaked"
        if not entry.pod_spec_template_paths:
            continue  # no pod template, no env to mask (a HorizontalPodAutoscaler)
        assert REDACTED.encode() in data, f"{name}: {entry.gvk} has no masked value"
        # names and references stay: the replayed pod spec keeps its shape
        assert b"TOKEN" in data
        assert b"secretKeyRef" in data


def test_every_container_list_is_masked_and_the_rest_kept() -> None:
    config = TracerConfig.default()
    gvk = GroupVersionKind("batch", "v1", "CronJob")
    obj = object_of(gvk, ("/spec/jobTemplate/spec/template",))
    shaped = Shaper(config, NoCluster()).observe_object("ADDED", obj, 1_000)
    published = shaped.events[0].obj
    assert published is not None
    spec = published["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    for lst in CONTAINER_LISTS:
        env = spec[lst][0]["env"]
        assert env[0] == {"name": "TOKEN", "value": REDACTED}, lst
        assert env[1] == {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}


def test_custom_resource_templates_and_replicasets_are_covered() -> None:
    config = TracerConfig.from_mapping(
        {
            "trackedObjects": {
                "example.com/v1.TrainingJob": {"podSpecTemplatePaths": ["/spec/replicaSpecs/*/template"]},
                "apps/v1.ReplicaSet": {},
                "apps/v1.DaemonSet": {},
            }
        },
        "inline",
    )
    crd = object_of(GroupVersionKind("example.com", "v1", "TrainingJob"), ("/spec/replicaSpecs/*/template",))
    fix_arrays(crd)
    assert b"secret-" not in published_bytes(config, crd)
    # SimKube names the ReplicaSetSpec itself as the template path; the real template is under it
    rs = object_of(GroupVersionKind("apps", "v1", "ReplicaSet"), ("/spec/template",))
    assert b"secret-" not in published_bytes(config, rs)
    ds = object_of(GroupVersionKind("apps", "v1", "DaemonSet"), ("/spec/template",))
    assert b"secret-" not in published_bytes(config, ds)


def test_secret_data_never_enters_a_trace() -> None:
    config = TracerConfig.from_mapping({"trackedObjects": {"v1.Secret": {}}}, "inline")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "team", "uid": "u", "resourceVersion": "1"},
        "type": "Opaque",
        "data": {"k": "c2VjcmV0LWRhdGE="},
        "stringData": {"k": "secret-string"},
    }
    data = published_bytes(config, secret)
    assert b"c2VjcmV0LWRhdGE=" not in data
    assert b"secret-string" not in data


def test_redact_env_false_keeps_values_and_the_setting_round_trips() -> None:
    off = TracerConfig.from_mapping({"trackedObjects": {"v1.Pod": {}}, "redactEnv": False}, "inline")
    pod = object_of(GroupVersionKind("", "v1", "Pod"), ("",))
    assert b"secret-" in published_bytes(off, pod)
    assert TracerConfig.from_mapping(off.to_mapping(), "again") == off
    on = TracerConfig.from_mapping({"trackedObjects": {"v1.Pod": {}}}, "inline")
    assert "redact" not in on.to_mapping(), "derived rules are not written back as configured ones"
    assert TracerConfig.from_mapping(on.to_mapping(), "again") == on


def test_bad_redact_env_value_is_a_clear_error() -> None:
    from pipeline.model.errors import ConfigError

    with pytest.raises(ConfigError, match="redactEnv"):
        TracerConfig.from_mapping({"trackedObjects": {}, "redactEnv": "yes"}, "inline")
