"""Tracer config: SimKube-compatible loading, kubetape's filters, errors naming the offending path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.formats.simkube import read_simkube_trace
from pipeline.model.errors import ConfigError
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import TracerConfig, load_tracer_config

DEPLOYMENT = GroupVersionKind("apps", "v1", "Deployment")
CRONJOB = GroupVersionKind("batch", "v1", "CronJob")

SIMKUBE_EXAMPLE = """\
trackedObjects:
  apps/v1.Deployment:
    podSpecTemplatePaths:
      - /spec/template
  batch/v1.CronJob:
    trackLifecycle: true
  v1.Pod:
    skipOwned: true
    trackLifecycle: true
  example.com/v1.TaskGroup:
    podSpecTemplatePaths: [/spec/tasks/*/template]
"""


def test_simkube_config_file_loads_with_builtin_defaults(tmp_path: Path) -> None:
    path = tmp_path / "tracer.yml"
    path.write_text(SIMKUBE_EXAMPLE)
    config = load_tracer_config(path)
    assert [t.gvk.format() for t in config.tracked] == [
        "apps/v1.Deployment",
        "batch/v1.CronJob",
        "v1.Pod",
        "example.com/v1.TaskGroup",
    ]
    cronjob = config.tracked_kind(CRONJOB)
    assert cronjob is not None
    assert cronjob.pod_spec_template_paths == ("/spec/jobTemplate/spec/template",)
    assert config.track_lifecycle_for(CRONJOB)
    assert not config.track_lifecycle_for(DEPLOYMENT)
    assert config.skip_owned_for(GroupVersionKind("", "v1", "Pod"))
    # kubetape defaults for its additions
    assert config.exclude_daemonset_owned
    assert config.is_namespace_allowed("anything")


def test_configs_stored_in_simkube_traces_load(simkube_traces: Path) -> None:
    for name in ("cronjob.sktrace", "bare-pods.sktrace", "simkube-trace.json"):
        config = read_simkube_trace(simkube_traces / name).tracer_config()
        assert config.tracked


def test_star_paths_find_every_array_element() -> None:
    config = TracerConfig.from_mapping(
        {
            "trackedObjects": {
                "example.com/v1.TaskGroup": {"podSpecTemplatePaths": ["/spec/tasks/*/template"]}
            }
        },
        "inline",
    )
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "TaskGroup",
        "spec": {"tasks": [{"template": {"n": 1}}, {"template": {"n": 2}}, {"other": 3}]},
    }
    assert config.pod_templates(obj) == [{"n": 1}, {"n": 2}]


def test_deprecated_singular_path_is_accepted_unless_the_plural_is_set() -> None:
    single = TracerConfig.from_mapping(
        {"trackedObjects": {"fake/v1.Resource": {"podSpecTemplatePath": "/foo/bar"}}}, "inline"
    )
    assert single.tracked[0].pod_spec_template_paths == ("/foo/bar",)
    both = TracerConfig.from_mapping(
        {
            "trackedObjects": {
                "fake/v1.Resource": {"podSpecTemplatePath": "/foo/bar", "podSpecTemplatePaths": ["/asdf"]}
            }
        },
        "inline",
    )
    assert both.tracked[0].pod_spec_template_paths == ("/asdf",)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (
            {"trackedObjects": {"batch/v1.CronJob": {"podSpecTemplatePaths": ["/bad"]}}},
            "trackedObjects.batch/v1.CronJob.podSpecTemplatePaths",
        ),
        (
            {"trackedObjects": {"apps/v1.Deployment": {"trackLifecycle": "yes"}}},
            "trackedObjects.apps/v1.Deployment.trackLifecycle",
        ),
        ({"trackedObjects": {"apps/v1.Deployment": {"typo": 1}}}, "trackedObjects.apps/v1.Deployment.typo"),
        ({"trackedObjects": {"Deployment": {}}}, "trackedObjects.Deployment"),
        (
            {"trackedObjects": {"x/v1.Y": {"podSpecTemplatePaths": ["no-slash"]}}},
            "trackedObjects.x/v1.Y.podSpecTemplatePaths[0]",
        ),
        ({"trackedObjects": {"v1.Pod": {}, "/v1.Pod": {}}}, "trackedObjects./v1.Pod"),
        ({"trackedObjects": {}, "namespaces": {"allow": "default"}}, "namespaces.allow"),
        (
            {
                "trackedObjects": {},
                "labels": {"deny": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]},
            },
            "labels.deny[0].matchExpressions[0].values",
        ),
        ({"trackedObjects": {}, "redact": [{"paths": ["data"]}]}, "redact[0].paths[0]"),
        ({"trackedObjects": {}, "redact": [{"paths": ["/data"], "action": "shred"}]}, "redact[0].action"),
        ({"trackedObjects": {}, "excludeDaemonSetOwned": "no"}, "excludeDaemonSetOwned"),
        ({"trackedObject": {}}, "trackedObject"),
    ],
)
def test_bad_config_fails_at_load_naming_source_and_path(data: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as info:
        TracerConfig.from_mapping(data, "tracer.yml")
    assert str(info.value).startswith(f"tracer config tracer.yml: {where}"), str(info.value)


def test_unreadable_and_invalid_yaml_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.yml: cannot read"):
        load_tracer_config(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("trackedObjects:\n  - [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yml: invalid YAML at line \d+"):
        load_tracer_config(bad)
    scalar = tmp_path / "scalar.yml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match=r"scalar\.yml: must be a mapping"):
        load_tracer_config(scalar)


def _pod(
    namespace: str, labels: dict[str, str] | None = None, owner_kind: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": namespace, "labels": labels or {}}
    if owner_kind:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": "o", "uid": "1"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def test_namespace_and_label_allow_and_deny_lists() -> None:
    config = TracerConfig.from_mapping(
        {
            "trackedObjects": {"v1.Pod": {"skipOwned": True}},
            "namespaces": {"allow": ["team-*", "default"], "deny": ["team-secret"]},
            "labels": {
                "allow": [
                    {"matchLabels": {"tier": "web"}},
                    {"matchExpressions": [{"key": "canary", "operator": "Exists"}]},
                ],
                "deny": [{"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}],
            },
        },
        "inline",
    )
    assert config.is_object_allowed(_pod("team-a", {"tier": "web"}))
    assert config.is_object_allowed(_pod("default", {"canary": ""}))
    assert not config.is_object_allowed(_pod("kube-system", {"tier": "web"}))  # not in the allow list
    assert not config.is_object_allowed(_pod("team-secret", {"tier": "web"}))  # denied
    assert not config.is_object_allowed(_pod("team-a", {"tier": "db"}))  # no allow selector matches
    assert not config.is_object_allowed(_pod("team-a", {"tier": "web", "env": "dev"}))  # deny selector
    assert not config.is_object_allowed(_pod("team-a", {"tier": "web"}, owner_kind="ReplicaSet"))  # skipOwned
    assert config.is_namespace_allowed(None)  # cluster-scoped objects have no namespace to filter


def test_daemonset_owned_objects_are_excluded_unless_disabled() -> None:
    pod = _pod("default", owner_kind="DaemonSet")
    assert not TracerConfig.default().is_object_allowed(pod)
    keep = TracerConfig.from_mapping({"trackedObjects": {}, "excludeDaemonSetOwned": False}, "inline")
    assert keep.is_object_allowed(pod)


def test_default_config_tracks_workloads_with_builtin_paths() -> None:
    config = TracerConfig.default()
    assert config.tracked_kind(DEPLOYMENT) is not None
    assert config.track_lifecycle_for(CRONJOB)


def test_mappings_round_trip_and_simkube_form_has_only_what_simkube_accepts() -> None:
    config = TracerConfig.from_mapping(
        {
            "trackedObjects": {
                "apps/v1.Deployment": {},
                "v1.ConfigMap": {},
                "v1.Pod": {"trackLifecycle": True},
            },
            "namespaces": {"deny": ["kube-system"]},
            "labels": {"deny": [{"matchLabels": {"a": "b"}}]},
            "excludeDaemonSetOwned": False,
            "redact": [{"kinds": ["v1.ConfigMap"], "paths": ["/data"], "action": "mask"}],
        },
        "inline",
    )
    assert TracerConfig.from_mapping(config.to_mapping(), "again") == config
    simkube = config.to_simkube_mapping()
    assert simkube == {
        "trackedObjects": {
            "apps/v1.Deployment": {"podSpecTemplatePaths": ["/spec/template"]},
            "v1.Pod": {"podSpecTemplatePaths": [""], "trackLifecycle": True},
        }
    }


def _owned_pod(api_version: str, kind: str) -> dict[str, Any]:
    pod = _pod("default")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": "o", "uid": "1"}]
    return pod


def test_skip_owned_leaves_out_only_what_an_owner_makes_again_on_replay() -> None:
    config = TracerConfig.from_mapping(
        {
            "trackedObjects": {
                "v1.Pod": {"skipOwned": True},
                "sparkoperator.k8s.io/v1beta2.SparkApplication": {"trackLifecycle": True},
                "example.com/v1.TrainingJob": {"podSpecTemplatePaths": ["/spec/template"]},
            }
        },
        "inline",
    )
    # built-in controllers run in the simulated cluster; a kind with pod templates has its operator there
    assert not config.is_object_allowed(_owned_pod("apps/v1", "ReplicaSet"))
    assert not config.is_object_allowed(_owned_pod("batch/v1", "Job"))
    assert not config.is_object_allowed(_owned_pod("example.com/v1", "TrainingJob"))
    # nothing makes these in a simulation: a templateless custom resource's pods (a Spark driver), the
    # pods a pod owns (Spark's executors), an untracked controller's pods
    assert config.is_object_allowed(_owned_pod("sparkoperator.k8s.io/v1beta2", "SparkApplication"))
    assert config.is_object_allowed(_owned_pod("v1", "Pod"))
    assert config.is_object_allowed(_owned_pod("example.com/v1", "Widget"))


def test_owners_that_make_their_dependents_again() -> None:
    config = TracerConfig.from_mapping(
        {"trackedObjects": {"example.com/v1.TrainingJob": {"podSpecTemplatePaths": ["/spec/template"]}}},
        "inline",
    )
    assert config.recreates_dependents("apps", "Deployment")
    assert config.recreates_dependents("", "Service")  # its EndpointSlices
    assert config.recreates_dependents("example.com", "TrainingJob")
    assert not config.recreates_dependents("", "Pod")
    assert not config.recreates_dependents("sparkoperator.k8s.io", "SparkApplication")
    assert not config.recreates_dependents("example.com", "Widget")
