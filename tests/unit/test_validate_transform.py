"""The transform language: parsing errors that say where, operation semantics, recomputed hashes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.formats.simkube import SimkubeEvent, SimkubeLifecycle, SimkubeTrace
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.hashing import object_spec_hash, pod_spec_hash
from pipeline.model.sanitize import copy_json
from pipeline.validate.apply import apply_transform
from pipeline.validate.tracefile import encode_trace, read_trace_file
from pipeline.validate.transform import load_transform, obfuscated, parse_transform, transform_object

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "transforms"


def _transform(*operations: dict[str, Any]) -> Any:
    return parse_transform({"version": 1, "operations": list(operations)}, "fix.yaml")


def _pod(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "apps", "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


# ---- errors name the file and the offending path --------------------------------------------------
@pytest.mark.parametrize(
    ("operations", "message"),
    [
        ([{"remove": ["status"]}], r"fix\.yaml: operations\[0\]\.remove\[0\]: JSON pointer 'status' must"),
        ([{"remove": "/status"}, {"set": {"spec": 1}}], r"operations\[1\]\.set\['spec'\]: JSON pointer"),
        ([{"select": {"kind": "Pod"}}], r"operations\[0\]: needs an action: remove, set, add"),
        ([{"remove": "/x", "bogus": 1}], r"operations\[0\]: unknown field\(s\) \['bogus'\]"),
        (
            [{"select": {"kynd": "Pod"}, "remove": "/x"}],
            r"operations\[0\]\.select: unknown field\(s\) \['kynd'\]",
        ),
        ([{"select": {"kind": 3}, "remove": "/x"}], r"operations\[0\]\.select\.kind: must be a string"),
        ([{"drop": True, "at": "/spec"}], r"operations\[0\]\.drop: must be true, with only 'select'"),
        ([{"create": {"kind": "ConfigMap"}}], r"operations\[0\]\.create: must be a Kubernetes object"),
        ([{"create": _pod(), "select": {}}], r"operations\[0\]: 'create' stands alone"),
        (
            [{"select": {"labels": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}, "drop": True}],
            r"fix\.yaml: operations\[0\]\.select\.labels\.matchExpressions\[0\]\.operator: must be one of",
        ),
    ],
)
def test_malformed_operations_are_rejected_with_their_path(operations: list[Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_transform({"version": 1, "operations": operations}, "fix.yaml")


def test_wrong_version_and_bad_yaml_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"fix\.yaml: version: must be 1, got 2"):
        parse_transform({"version": 2, "operations": []}, "fix.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\noperations: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_transform(bad)
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read the transform file"):
        load_transform(tmp_path / "missing.yaml")


# ---- operation semantics -------------------------------------------------------------------------
def test_select_matches_kind_namespace_name_and_labels() -> None:
    t = _transform({"select": {"kind": ["Pod"], "namespace": "apps", "labels": {"app": "web"}}, "drop": True})
    assert transform_object(t, _pod("web")) == (None, True)
    assert transform_object(t, _pod("db")) == (_pod("db"), False)


def test_where_filters_list_elements_and_removal_keeps_the_others() -> None:
    env = [
        {"name": f"V{i}", "valueFrom": {"secretKeyRef": {"name": "s" if i % 2 else "t", "key": "k"}}}
        for i in range(5)
    ]
    pod = _pod(containers=[{"name": "main", "env": env}])
    t = _transform(
        {"at": "/spec/containers/*/env/*", "where": {"/valueFrom/secretKeyRef/name": "s"}, "remove": [""]}
    )
    out, changed = transform_object(t, pod)
    assert changed
    assert out is not None
    assert [v["name"] for v in out["spec"]["containers"][0]["env"]] == ["V0", "V2", "V4"]
    assert len(pod["spec"]["containers"][0]["env"]) == 5  # the input is never modified


def test_where_null_matches_missing_fields_so_add_fills_only_gaps() -> None:
    containers = [{"name": "a"}, {"name": "b", "image": "real:1"}, {"name": "c", "image": None}]
    t = _transform({"at": "/spec/containers/*", "where": {"/image": None}, "add": {"/image": "pause"}})
    out, changed = transform_object(t, _pod(containers=containers))
    assert changed
    assert out is not None
    assert [c["image"] for c in out["spec"]["containers"]] == ["pause", "real:1", "pause"]


def test_set_replaces_only_existing_values_and_add_creates() -> None:
    pod = _pod(
        containers=[{"name": "a", "env": [{"name": "X", "value": "secret"}, {"name": "Y", "valueFrom": {}}]}]
    )
    t = _transform(
        {"at": "/spec/containers/*/env/*", "set": {"/value": "<redacted>"}},
        {"add": {"/metadata/annotations/note": "hi", "/spec/tolerations/-": {"operator": "Exists"}}},
    )
    out, _changed = transform_object(t, pod)
    assert out is not None
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "X", "value": "<redacted>"},
        {"name": "Y", "valueFrom": {}},
    ]
    assert out["metadata"]["annotations"] == {"note": "hi"}
    assert out["spec"]["tolerations"] == [{"operator": "Exists"}]


def test_obfuscation_is_stable_so_references_still_match() -> None:
    pod = _pod(serviceAccountName="robot")
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": "apps"}}
    t = _transform({"obfuscate": ["/metadata/name", "/spec/serviceAccountName"]})
    out_pod, _ = transform_object(t, pod)
    out_sa, _ = transform_object(t, sa)
    assert out_pod is not None
    assert out_sa is not None
    assert out_pod["spec"]["serviceAccountName"] == out_sa["metadata"]["name"] == obfuscated("robot")
    assert "robot" not in str(out_pod)


# ---- whole traces: index and lifecycles recomputed ------------------------------------------------
def test_index_and_lifecycle_keys_follow_renames_and_template_changes(
    simkube_traces: Path, tmp_path: Path
) -> None:
    trace = read_trace_file(simkube_traces / "cronjob.sktrace")
    before = copy_json(trace.events[1].applied_objs[0])
    t = _transform(
        {"select": {"kind": "CronJob"}, "obfuscate": ["/metadata/name"]},
        {
            "select": {"kind": "CronJob"},
            "at": "/spec/jobTemplate/spec/template/spec/containers/*",
            "set": {"/image": "alpine"},
        },
    )
    fixed, stats = apply_transform(trace, t)
    cronjob = fixed.events[1].applied_objs[0]
    new_name = obfuscated("hello-simkube")
    assert cronjob["metadata"]["name"] == new_name
    assert fixed.events[2].deleted_objs[0]["metadata"]["name"] == new_name
    assert fixed.index == {"batch/v1.CronJob": {f"default/{new_name}": object_spec_hash(cronjob)}}
    new_hash = pod_spec_hash(cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    old_lifecycles = next(iter(trace.pod_lifecycles[("batch/v1.CronJob", "default/hello-simkube")].values()))
    assert fixed.pod_lifecycles == {("batch/v1.CronJob", f"default/{new_name}"): {new_hash: old_lifecycles}}
    assert trace.events[1].applied_objs[0] == before  # apply_transform is pure
    assert (stats.objects_seen, stats.objects_modified) == (2, 2)
    read_back = read_trace_file(_write(fixed, tmp_path, "cronjob-fixed.sktrace"))
    assert read_back.pod_lifecycles == fixed.pod_lifecycles


def _write(trace: SimkubeTrace, directory: Path, name: str) -> Path:
    path = directory / name
    path.write_bytes(encode_trace(trace, as_json=path.suffix == ".json"))
    return path


def test_dropping_an_owner_drops_its_index_entry_lifecycles_and_emptied_events() -> None:
    pod = _pod("lonely")
    trace = SimkubeTrace(
        2,
        {"trackedObjects": {"v1.Pod": {"podSpecTemplatePaths": [""], "trackLifecycle": True}}},
        [SimkubeEvent(10), SimkubeEvent(20, [pod]), SimkubeEvent(30, [], [pod])],
        {"v1.Pod": {"apps/lonely": object_spec_hash(pod), "apps/earlier": 7}},
        {("v1.Pod", "apps/lonely"): {pod_spec_hash(pod["spec"]): [SimkubeLifecycle(20, 25)]}},
    )
    fixed, stats = apply_transform(
        trace, _transform({"select": {"name": ["lonely", "earlier"]}, "drop": True})
    )
    assert [e.ts for e in fixed.events] == [10]  # the empty start marker stays; emptied events go
    assert fixed.index == {}
    assert fixed.pod_lifecycles == {}
    assert (stats.objects_dropped, stats.events_dropped) == (2, 2)


def test_created_objects_go_first_and_json_output_refuses_lifecycles(
    simkube_traces: Path, tmp_path: Path
) -> None:
    trace = read_trace_file(simkube_traces / "simkube-trace.json")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}}
    fixed, stats = apply_transform(trace, _transform({"create": cm}))
    assert fixed.events[0].applied_objs[0] == cm
    assert fixed.index["v1.ConfigMap"] == {"default/c": object_spec_hash(cm)}
    assert stats.objects_created == 1
    assert read_trace_file(_write(fixed, tmp_path, "x.json")).events[0].applied_objs[0] == cm
    with pytest.raises(FormatError, match="JSON cannot represent"):
        encode_trace(read_trace_file(simkube_traces / "cronjob.sktrace"), as_json=True)


# ---- the shipped examples ------------------------------------------------------------------------
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_example_transforms_parse_and_apply_to_the_simkube_traces(example: str, simkube_traces: Path) -> None:
    transform = load_transform(EXAMPLES / example)
    for name in ("cronjob.sktrace", "bare-pods.sktrace", "simkube-validation-trace.json"):
        fixed, _stats = apply_transform(read_trace_file(simkube_traces / name), transform)
        encode_trace(fixed, as_json=False)  # still a trace SimKube reads


def test_redaction_example_removes_env_values_and_obfuscation_hides_names(simkube_traces: Path) -> None:
    trace = read_trace_file(simkube_traces / "simkube-validation-trace.json")
    redacted, _ = apply_transform(trace, load_transform(EXAMPLES / "redact.yaml"))
    env = redacted.events[0].applied_objs[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[1] == {"name": "env1", "value": "<redacted>"}
    hidden, _ = apply_transform(
        read_trace_file(simkube_traces / "bare-pods.sktrace"),
        load_transform(EXAMPLES / "obfuscate-names.yaml"),
    )
    text = str(hidden)
    assert "bare-pod" not in text
    assert "testing" not in text


def test_add_through_wildcards_reaches_every_element() -> None:
    pod = _pod(containers=[{"name": "a"}, {"name": "b", "resources": {"limits": {"cpu": "2"}}}])
    t = _transform({"add": {"/spec/containers/*/resources/requests/cpu": "100m", "/spec/tolerations/*": {}}})
    out, changed = transform_object(t, pod)
    assert changed
    assert out is not None
    assert [c["resources"]["requests"] for c in out["spec"]["containers"]] == [{"cpu": "100m"}] * 2
    assert out["spec"]["containers"][1]["resources"]["limits"] == {"cpu": "2"}
    assert "tolerations" not in out["spec"]  # "*" over a missing list creates nothing
    t = _transform({"at": "/spec/containers", "add": {"/*": {"name": "same"}}})
    out, _ = transform_object(t, pod)
    assert out is not None
    assert out["spec"]["containers"] == [{"name": "same"}, {"name": "same"}]
