"""Rules KE0009–KW0014: shapes the apiserver refuses, keys missing from objects of the trace, image pull
Secrets; each with its repairs, which must clear the finding and leave already-valid versions alone."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from pipeline.formats.simkube import SimkubeEvent, SimkubeTrace
from pipeline.validate.apply import apply_transform
from pipeline.validate.findings import Finding, Fix
from pipeline.validate.fixes import PLACEHOLDER_IMAGE, render_fix_file
from pipeline.validate.rules import validate_trace
from pipeline.validate.transform import parse_transform
from services.cli import main

CONFIG = {"trackedObjects": {"apps/v1.Deployment": {"podSpecTemplatePaths": ["/spec/template"]}}}


def _trace(*events: list[dict[str, Any]]) -> SimkubeTrace:
    return SimkubeTrace(2, CONFIG, [SimkubeEvent(10 * i, objs, []) for i, objs in enumerate(events)], {}, {})


def _workload(
    pod_spec: dict[str, Any],
    *,
    kind: str = "Deployment",
    labels: dict[str, str] | None = None,
    selector: Any = "same",
) -> dict[str, Any]:
    labels = {"app": "web"} if labels is None else labels
    spec: dict[str, Any] = {"template": {"metadata": {"labels": labels}, "spec": pod_spec}}
    if selector == "same":
        spec["selector"] = {"matchLabels": labels}
    elif selector is not None:
        spec["selector"] = selector
    meta = {"name": "web", "namespace": "apps"}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}


def _core(kind: str, name: str, **rest: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "apps"}, **rest}


def _container(name: str = "main", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", **fields}


def _only(findings: list[Finding], code: str) -> Finding:
    assert [f.code for f in findings] == [code], [f.message for f in findings]
    return findings[0]


def _fixed(trace: SimkubeTrace, fix: Fix) -> SimkubeTrace:
    transform = parse_transform({"version": 1, "operations": list(fix.operations)}, "test")
    return apply_transform(trace, transform)[0]


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


# ---- KE0009 envFrom entries with several sources ---------------------------------------------------
def test_env_from_entry_with_two_sources_is_split_keeping_prefix_and_other_entries() -> None:
    both = {"prefix": "APP_", "configMapRef": {"name": "cm"}, "secretRef": {"name": "s"}}
    other = {"configMapRef": {"name": "extra"}}
    broken = _workload({"containers": [_container("sidecar"), _container(envFrom=[other, both])]})
    objects = [_core("ConfigMap", "cm"), _core("ConfigMap", "extra"), _core("Secret", "s")]
    trace = _trace([*objects, broken])
    finding = _only(validate_trace(trace), "KE0009")
    assert finding.message == "envFrom entry 1 of container main names configMapRef cm and secretRef s"
    assert finding.paths == (
        "/spec/template/spec/containers/1/envFrom/1/configMapRef",
        "/spec/template/spec/containers/1/envFrom/1/secretRef",
    )
    fixed = _fixed(trace, finding.fixes[0])
    assert validate_trace(fixed) == []
    containers = _pod_spec(fixed.events[0].applied_objs[-1])["containers"]
    assert "envFrom" not in containers[0]  # the other container is left alone
    assert containers[1]["envFrom"] == [
        other,
        {"prefix": "APP_", "configMapRef": {"name": "cm"}},
        {"prefix": "APP_", "secretRef": {"name": "s"}},
    ]


def test_env_from_split_leaves_versions_without_the_combined_entry_unchanged() -> None:
    both = {"configMapRef": {"name": "cm"}, "secretRef": {"name": "s"}}
    valid = [{"configMapRef": {"name": "cm"}}]
    objects = [_core("ConfigMap", "cm"), _core("Secret", "s")]
    trace = _trace(
        [*objects, _workload({"containers": [_container(envFrom=[both])]})],
        [_workload({"containers": [_container(envFrom=valid)]})],
    )
    fixed = _fixed(trace, _only(validate_trace(trace), "KE0009").fixes[0])
    assert _pod_spec(fixed.events[1].applied_objs[0])["containers"][0]["envFrom"] == valid


# ---- KE0010 selectors ------------------------------------------------------------------------------
def test_missing_selector_is_set_to_the_template_labels() -> None:
    trace = _trace([_workload({"containers": [_container()]}, kind="StatefulSet", selector=None)])
    finding = _only(validate_trace(trace), "KE0010")
    assert finding.message == "spec.selector is missing (the apiserver requires one)"
    assert finding.paths == ("/spec/selector", "/spec/template/metadata/labels")
    fixed = _fixed(trace, finding.fixes[0])
    assert validate_trace(fixed) == []
    assert fixed.events[0].applied_objs[0]["spec"]["selector"] == {"matchLabels": {"app": "web"}}


def test_missing_selector_and_labels_get_an_app_label_on_both() -> None:
    trace = _trace([_workload({"containers": [_container()]}, labels={}, selector={})])
    fixed = _fixed(trace, _only(validate_trace(trace), "KE0010").fixes[0])
    assert validate_trace(fixed) == []
    spec = fixed.events[0].applied_objs[0]["spec"]
    assert spec["selector"] == {"matchLabels": {"app": "web"}}
    assert spec["template"]["metadata"]["labels"] == {"app": "web"}


def test_mismatched_selector_labels_the_template_or_selects_the_template_labels() -> None:
    selector = {"matchLabels": {"tier": "front"}}
    trace = _trace([_workload({"containers": [_container()]}, kind="DaemonSet", selector=selector)])
    finding = _only(validate_trace(trace), "KE0010")
    assert finding.message == "spec.selector does not match the pod template labels {app=web}"
    add_labels, replace_selector = finding.fixes
    labelled = _fixed(trace, add_labels).events[0].applied_objs[0]["spec"]
    assert labelled["selector"] == selector
    assert labelled["template"]["metadata"]["labels"] == {"app": "web", "tier": "front"}
    reselected = _fixed(trace, replace_selector).events[0].applied_objs[0]["spec"]
    assert reselected["selector"] == {"matchLabels": {"app": "web"}}
    for fix in finding.fixes:
        assert validate_trace(_fixed(trace, fix)) == []


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]},
            "spec.selector does not match the pod template labels {app=web} (its matchExpressions "
            "exclude them)",
        ),
        ({"matchLabels": ["app"]}, "spec.selector.matchLabels: must map label names to string values"),
    ],
)
def test_unsatisfiable_or_invalid_selectors_are_replaced(selector: dict[str, Any], message: str) -> None:
    trace = _trace([_workload({"containers": [_container()]}, selector=selector)])
    finding = _only(validate_trace(trace), "KE0010")
    assert finding.message == message
    assert len(finding.fixes) == 1
    assert validate_trace(_fixed(trace, finding.fixes[0])) == []


def test_selectors_of_jobs_and_bare_pods_are_not_checked() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "apps"},
        "spec": {"template": {"spec": {"containers": [_container()], "restartPolicy": "Never"}}},
    }
    assert validate_trace(_trace([job])) == []


# ---- KE0011 images ---------------------------------------------------------------------------------
def test_containers_without_an_image_get_the_placeholder_only_where_it_is_missing() -> None:
    init = {"name": "init"}  # no image at all
    main_container = _container(image="")
    trace = _trace(
        [_workload({"initContainers": [init], "containers": [main_container]})],
        [_workload({"initContainers": [{**init, "image": "real:1"}], "containers": [_container()]})],
    )
    findings = validate_trace(trace)
    assert [(f.code, f.paths, f.message) for f in findings] == [
        ("KE0011", ("/spec/template/spec/initContainers/0/image",), "container init has no image"),
        ("KE0011", ("/spec/template/spec/containers/0/image",), "container main has no image"),
    ]
    fixed = _fixed(trace, Fix("both", tuple(op for f in findings for op in f.fixes[0].operations)))
    assert validate_trace(fixed) == []
    first, later = (_pod_spec(e.applied_objs[0]) for e in fixed.events)
    assert first["initContainers"][0]["image"] == PLACEHOLDER_IMAGE
    assert first["containers"][0]["image"] == PLACEHOLDER_IMAGE
    # a version that has its images keeps them
    assert later["initContainers"][0]["image"] == "real:1"
    assert later["containers"][0]["image"] == "busybox"


# ---- KE0012 / KE0013 keys missing from objects of the trace -----------------------------------------
def _key_reader(kind: str, name: str, key: str, item_key: str) -> dict[str, Any]:
    ref_field, volume_field, name_field = (
        ("configMapKeyRef", "configMap", "name")
        if kind == "ConfigMap"
        else ("secretKeyRef", "secret", "secretName")
    )
    env = [{"name": "X", "valueFrom": {ref_field: {"name": name, "key": key}}}]
    volume = {"name": "v", volume_field: {name_field: name, "items": [{"key": item_key, "path": "f"}]}}
    return _workload({"containers": [_container(env=env)], "volumes": [volume]})


def test_keys_missing_from_a_configmap_are_reported_with_their_pointers_and_added() -> None:
    config = _core("ConfigMap", "cfg", data={"present": "1"}, binaryData={"blob": "AA=="})
    later_config = _core(
        "ConfigMap", "cfg", data={"present": "1", "host": "db.internal"}, binaryData={"blob": "AA=="}
    )
    trace = _trace([config, _key_reader("ConfigMap", "cfg", "host", "port")], [later_config])
    finding = _only(validate_trace(trace), "KE0012")
    assert finding.message == "ConfigMap apps/cfg has no key host, port"
    assert finding.paths == (
        "/spec/template/spec/containers/0/env/0/valueFrom/configMapKeyRef/key",
        "/spec/template/spec/volumes/0/configMap/items/0/key",
    )
    add_keys, mark_optional = finding.fixes
    fixed = _fixed(trace, add_keys)
    assert validate_trace(fixed) == []
    assert fixed.events[0].applied_objs[0]["data"] == {
        "present": "1",
        "host": "placeholder",
        "port": "placeholder",
    }
    # a version that holds a key keeps its value
    assert fixed.events[1].applied_objs[0]["data"]["host"] == "db.internal"
    optional = _fixed(trace, mark_optional)
    assert validate_trace(optional) == []
    spec = _pod_spec(optional.events[0].applied_objs[1])
    assert spec["containers"][0]["env"][0]["valueFrom"]["configMapKeyRef"]["optional"] is True
    assert spec["volumes"][0]["configMap"]["optional"] is True


def test_binary_data_keys_count_and_secrets_without_recorded_data_are_not_judged() -> None:
    config = _core("ConfigMap", "cfg", binaryData={"host": "AA==", "port": "AA=="})
    sanitized_secret = _core("Secret", "creds", type="Opaque")  # kubetape never records Secret data
    trace = _trace(
        [config, sanitized_secret, _key_reader("ConfigMap", "cfg", "host", "port")],
        [_key_reader("Secret", "creds", "password", "token")],
    )
    assert validate_trace(trace) == []


def test_keys_missing_from_a_secret_with_data_get_base64_placeholders() -> None:
    secret = _core("Secret", "creds", data={"user": "dQ=="}, stringData={"token": "t"})
    trace = _trace([secret, _key_reader("Secret", "creds", "password", "token")])
    finding = _only(validate_trace(trace), "KE0013")
    assert finding.message == "Secret apps/creds has no key password"
    fixed = _fixed(trace, finding.fixes[0])
    assert validate_trace(fixed) == []
    data = fixed.events[0].applied_objs[0]["data"]
    assert base64.b64decode(data["password"]) == b"placeholder"
    assert "token" not in data  # it is in stringData: adding it to data too would change its value


# ---- KW0014 image pull Secrets ---------------------------------------------------------------------
def test_missing_image_pull_secret_is_a_warning_with_a_valid_placeholder() -> None:
    pulls = [{"name": "registry"}, {"name": "present"}]
    trace = _trace(
        [_core("Secret", "present"), _workload({"containers": [_container()], "imagePullSecrets": pulls})]
    )
    finding = _only(validate_trace(trace), "KW0014")
    assert finding.severity.value == "warning"
    assert finding.paths == ("/spec/template/spec/imagePullSecrets/0/name",)
    placeholder, drop = finding.fixes
    created = _fixed(trace, placeholder).events[0].applied_objs[0]
    assert created["type"] == "kubernetes.io/dockerconfigjson"
    assert base64.b64decode(created["data"][".dockerconfigjson"]) == b'{"auths":{}}'
    assert validate_trace(_fixed(trace, placeholder)) == []
    dropped = _fixed(trace, drop)
    assert _pod_spec(dropped.events[0].applied_objs[1])["imagePullSecrets"] == [{"name": "present"}]
    assert validate_trace(dropped) == []


# ---- the fix file and the CLI ---------------------------------------------------------------------
def test_fix_file_for_all_new_rules_round_trips_through_yaml_and_clears_everything() -> None:
    both = {"configMapRef": {"name": "cfg"}, "secretRef": {"name": "s"}}
    spec = {
        "containers": [{"name": "main", "envFrom": [both]}],
        "imagePullSecrets": [{"name": "registry"}],
    }
    workload = _workload(spec, selector={"matchLabels": {"tier": "x"}})
    reader = _key_reader("ConfigMap", "cfg", "k", "k")
    reader["metadata"]["name"] = "reader"
    trace = _trace([_core("ConfigMap", "cfg", data={}), _core("Secret", "s"), workload, reader])
    findings = validate_trace(trace)
    assert sorted(f.code for f in findings) == ["KE0009", "KE0010", "KE0011", "KE0012", "KW0014"]
    fix_file = render_fix_file(findings, "t.json")
    fixed = apply_transform(trace, parse_transform(yaml.safe_load(fix_file), "fix.yaml"))[0]
    assert validate_trace(fixed) == []


@pytest.mark.parametrize("code", ["KE0009", "KE0010", "KE0011", "KE0012", "KE0013", "KW0014"])
def test_every_new_rule_is_explained(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "explain", code]) == 0
    out = capsys.readouterr().out
    assert out.startswith(code)
    assert "Fix:" in out
