"""Validation rules: what ``kubetape validate`` reports, for the shared fixture and for each rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.formats.simkube import SimkubeEvent, SimkubeTrace
from pipeline.model.errors import ConfigError
from pipeline.validate.apply import apply_transform
from pipeline.validate.findings import Finding, Fix
from pipeline.validate.fixes import PLACEHOLDER_IMAGE, fix_transform, render_fix_file
from pipeline.validate.rules import RULES, rule, validate_trace
from pipeline.validate.tracefile import read_trace_file
from pipeline.validate.transform import parse_transform

DEPLOYMENT_CONFIG = {"trackedObjects": {"apps/v1.Deployment": {"podSpecTemplatePaths": ["/spec/template"]}}}


def _trace(*events: tuple[int, list[dict[str, Any]], list[dict[str, Any]]]) -> SimkubeTrace:
    return SimkubeTrace(2, DEPLOYMENT_CONFIG, [SimkubeEvent(ts, a, d) for ts, a, d in events], {}, {})


def _obj(
    kind: str, name: str, namespace: str | None = "apps", api_version: str = "v1", **rest: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **rest}


def _deployment(name: str, pod_spec: dict[str, Any], namespace: str = "apps") -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": name}}, "spec": pod_spec}
    spec = {"selector": {"matchLabels": {"app": name}}, "template": template}
    return _obj("Deployment", name, namespace, "apps/v1", spec=spec)


def _container(**fields: Any) -> dict[str, Any]:
    return {"name": "main", "image": "busybox", **fields}


def _summary(findings: list[Finding]) -> set[tuple[str, str, str]]:
    return {(f.code, f.obj.describe(), f.message) for f in findings}


def _apply_fixes(trace: SimkubeTrace, fixes: list[Fix]) -> SimkubeTrace:
    ops = [op for fix in fixes for op in fix.operations]
    fixed, _stats = apply_transform(trace, parse_transform({"version": 1, "operations": ops}, "test"))
    return fixed


# ---- the shared SimKube validation fixture --------------------------------------------------------
def test_shared_validation_trace_yields_the_expected_findings(simkube_traces: Path) -> None:
    trace = read_trace_file(simkube_traces / "simkube-validation-trace.json")
    findings = validate_trace(trace)
    deployment = "Deployment default/test-deployment"
    assert _summary(findings) == {
        ("W0000", deployment, "status is populated"),
        ("E0001", deployment, "ServiceAccount default/the-service-account is not in the trace"),
        ("E0002", deployment, "Secret default/a-secret is not in the trace"),
        ("E0002", deployment, "Secret default/another-secret is not in the trace"),
        ("E0004", deployment, "Secret default/the-secret is not in the trace"),
        ("E0003", deployment, "ConfigMap default/a-config-map is not in the trace"),
        ("E0003", deployment, "ConfigMap default/another-config-map is not in the trace"),
        ("E0005", deployment, "ConfigMap default/the-config-map is not in the trace"),
        (
            "KE0009",
            deployment,
            "envFrom entry 0 of container test-container names configMapRef another-config-map "
            "and secretRef another-secret",
        ),
        ("KE0010", deployment, "spec.selector is missing (the apiserver requires one)"),
        ("KE0011", deployment, "container test-container has no image"),
    }
    assert {f.event_index for f in findings} == {0}
    by_message = {f.message: f for f in findings}
    secret = by_message["Secret default/a-secret is not in the trace"]
    assert secret.paths == ("/spec/template/spec/containers/0/env/2/valueFrom/secretKeyRef/name",)
    account = by_message["ServiceAccount default/the-service-account is not in the trace"]
    assert set(account.paths) == {
        "/spec/template/spec/serviceAccountName",
        "/spec/template/spec/serviceAccount",
    }
    by_code = {f.code: f for f in findings}
    assert by_code["KE0009"].paths == (
        "/spec/template/spec/containers/0/envFrom/0/configMapRef",
        "/spec/template/spec/containers/0/envFrom/0/secretRef",
    )
    assert by_code["KE0010"].paths == ("/spec/selector", "/spec/template/metadata/labels")
    assert by_code["KE0011"].paths == ("/spec/template/spec/containers/0/image",)


def test_recommended_fixes_from_the_fix_file_clear_every_finding(simkube_traces: Path) -> None:
    trace = read_trace_file(simkube_traces / "simkube-validation-trace.json")
    findings = validate_trace(trace)
    transform = parse_transform(yaml.safe_load(render_fix_file(findings, "trace.json")), "fix.yaml")
    fixed, stats = apply_transform(trace, transform)
    assert validate_trace(fixed) == []
    assert stats.objects_created == 7  # one ServiceAccount, three ConfigMaps, three Secrets
    placeholders = {(o["kind"], o["metadata"]["name"]): o for o in fixed.events[0].applied_objs}
    # The placeholders carry the keys the pods read, so key lookups succeed too.
    assert placeholders[("ConfigMap", "a-config-map")]["data"] == {"cm-key": "placeholder"}
    assert set(placeholders[("Secret", "a-secret")]["data"]) == {"secret-key"}
    # ... and the Deployment is one the apiserver accepts (the e2e test applies it for real).
    deployment = placeholders[("Deployment", "test-deployment")]
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "test-app"}}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [
        {"configMapRef": {"name": "another-config-map"}},
        {"secretRef": {"name": "another-secret"}},
    ]
    assert container["image"] == PLACEHOLDER_IMAGE


def test_alternative_fixes_drop_references_and_their_volume_mounts(simkube_traces: Path) -> None:
    trace = read_trace_file(simkube_traces / "simkube-validation-trace.json")
    findings = validate_trace(trace)
    fixed = _apply_fixes(trace, [f.fixes[-1] for f in findings])
    assert validate_trace(fixed) == []
    spec = fixed.events[0].applied_objs[0]["spec"]["template"]["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["empty-dir-volume"]
    assert [m["name"] for m in spec["containers"][0]["volumeMounts"]] == ["empty-dir-volume"]
    assert spec["containers"][0]["env"] == [{"name": "env1", "value": "foo"}]
    assert "serviceAccountName" not in spec
    assert "serviceAccount" not in spec


def test_a_name_written_to_inject_yaml_stays_in_its_fix_file_comment() -> None:
    name = "web\nversion: 1\noperations: [{drop: true}]\nx: |\n  "
    pod_spec = {"containers": [_container()], "serviceAccountName": "robot"}
    bystander = _deployment("bystander", {"containers": [_container()]})
    trace = _trace((10, [_deployment(name, pod_spec), bystander], []))
    fix_file = render_fix_file(validate_trace(trace), "trace\r\n.json")
    assert (
        "# E0001 event 0 Deployment apps/web\\nversion: 1\\noperations: [{drop: true}]\\nx: |\\n  : "
        in fix_file
    )
    fixed, stats = apply_transform(trace, parse_transform(yaml.safe_load(fix_file), "fix.yaml"))
    assert stats.objects_dropped == 0
    assert [o["metadata"]["name"] for o in fixed.events[0].applied_objs] == ["robot", name, "bystander"]
    assert validate_trace(fixed) == []


# ---- references are looked up by name ------------------------------------------------------------
def test_env_var_keys_are_not_treated_as_resource_names() -> None:
    env = [
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "db-host"}}},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
    ]
    pod_spec = {"containers": [_container(env=env)]}
    # SimKube looks up "db-host" and "password" as object names: it reports both as missing here ...
    settings = _obj("ConfigMap", "settings", data={"db-host": "db"})
    present = [settings, _obj("Secret", "creds"), _deployment("web", pod_spec)]
    assert validate_trace(_trace((10, present, []))) == []
    # ... and misses the real problem here, where only objects named like the keys exist.
    decoys = [_obj("ConfigMap", "db-host"), _obj("Secret", "password"), _deployment("web", pod_spec)]
    assert _summary(validate_trace(_trace((10, decoys, [])))) == {
        ("E0003", "Deployment apps/web", "ConfigMap apps/settings is not in the trace"),
        ("E0002", "Deployment apps/web", "Secret apps/creds is not in the trace"),
    }


def test_projected_volume_and_pvc_references_are_checked() -> None:
    sources = [
        {"configMap": {"name": "bundle"}},
        {"secret": {"name": "certs"}},
        {"serviceAccountToken": {"path": "t"}},
    ]
    volumes = [
        {"name": "p", "projected": {"sources": sources}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
    ]
    trace = _trace((10, [_deployment("web", {"containers": [_container()], "volumes": volumes})], []))
    findings = validate_trace(trace)
    assert {(f.code, f.paths) for f in findings} == {
        ("E0005", ("/spec/template/spec/volumes/0/projected/sources/0/configMap/name",)),
        ("E0004", ("/spec/template/spec/volumes/0/projected/sources/1/secret/name",)),
        ("KE0004", ("/spec/template/spec/volumes/1/persistentVolumeClaim/claimName",)),
    }
    dropped = _apply_fixes(trace, [f.fixes[-1] for f in findings])
    assert validate_trace(dropped) == []
    spec = dropped.events[0].applied_objs[0]["spec"]["template"]["spec"]
    assert spec["volumes"] == [
        {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}
    ]
    pvc = next(f for f in findings if f.code == "KE0004")
    fixed = _apply_fixes(trace, [pvc.fixes[0]])
    volume = fixed.events[0].applied_objs[0]["spec"]["template"]["spec"]["volumes"][1]
    assert volume == {"name": "data", "emptyDir": {}}


def test_implicit_and_optional_references_are_not_reported() -> None:
    pod_spec = {
        "serviceAccountName": "default",
        "containers": [
            _container(
                env=[
                    {
                        "name": "A",
                        "valueFrom": {"secretKeyRef": {"name": "maybe", "key": "k", "optional": True}},
                    }
                ],
                envFrom=[{"configMapRef": {"name": "opt", "optional": True}}],
            )
        ],
        "volumes": [{"name": "ca", "configMap": {"name": "kube-root-ca.crt"}}],
    }
    assert validate_trace(_trace((10, [_deployment("web", pod_spec)], []))) == []


def test_objects_exist_from_their_apply_until_their_delete() -> None:
    pod_spec = {"containers": [_container(envFrom=[{"configMapRef": {"name": "cfg"}}])]}
    cfg = _obj("ConfigMap", "cfg")
    trace = _trace(
        (10, [cfg, _deployment("same-event", pod_spec)], []),
        (20, [], [cfg]),
        (30, [_deployment("after-delete", pod_spec)], []),
    )
    findings = validate_trace(trace)
    assert [(f.event_index, f.obj.name, f.code) for f in findings] == [(2, "after-delete", "E0003")]
    other_namespace = _trace((10, [cfg, _deployment("web", pod_spec, namespace="other")], []))
    assert [f.message for f in validate_trace(other_namespace)] == ["ConfigMap other/cfg is not in the trace"]


def test_bare_pods_are_checked_at_their_own_spec() -> None:
    pod = _obj("Pod", "p", spec={"serviceAccountName": "robot", "containers": [_container()]})
    findings = validate_trace(_trace((10, [pod], [])))
    assert [(f.code, f.paths) for f in findings] == [("E0001", ("/spec/serviceAccountName",))]


def test_time_range_limits_reported_events_but_not_state() -> None:
    pod_spec = {"containers": [_container(envFrom=[{"secretRef": {"name": "s"}}])]}
    trace = _trace(
        (100, [_obj("Secret", "s")], []),
        (150, [_deployment("early", pod_spec)], []),
        (200, [], [_obj("Secret", "s")]),
        (250, [_deployment("late", pod_spec)], []),
    )
    assert [f.obj.name for f in validate_trace(trace, start=200)] == ["late"]
    assert validate_trace(trace, start=100, end=200) == []


# ---- placement rules -----------------------------------------------------------------------------
def test_cluster_scoped_and_unknown_kinds_are_reported() -> None:
    crd = _obj(
        "CustomResourceDefinition",
        "widgets.example.com",
        None,
        "apiextensions.k8s.io/v1",
        spec={"group": "example.com", "names": {"kind": "Widget"}},
    )
    objects = [
        _obj("Node", "node-1", None),
        crd,
        _obj("Widget", "w", api_version="example.com/v1"),
        _obj("Gadget", "g", api_version="example.com/v1"),
    ]
    findings = validate_trace(_trace((10, objects, [])))
    assert {(f.code, f.obj.describe()) for f in findings} == {
        ("KE0005", "Node node-1"),
        ("KE0005", "CustomResourceDefinition widgets.example.com"),
        ("KW0006", "Gadget apps/g"),
    }
    fixed = _apply_fixes(_trace((10, objects, [])), [f.fixes[0] for f in findings])
    assert [o["kind"] for o in fixed.events[0].applied_objs] == ["Widget"]


def test_namespace_references_outside_the_trace_are_reported() -> None:
    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "topologyKey": "zone",
        "namespaces": ["apps", "ghost"],
    }
    pod_spec = {
        "containers": [_container()],
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    }
    binding = _obj(
        "RoleBinding",
        "rb",
        api_version="rbac.authorization.k8s.io/v1",
        subjects=[
            {"kind": "ServiceAccount", "name": "x", "namespace": "elsewhere"},
            {"kind": "ServiceAccount", "name": "y", "namespace": "apps"},
        ],
    )
    trace = _trace((10, [_deployment("web", pod_spec), binding], []))
    findings = validate_trace(trace)
    assert {(f.code, f.obj.describe(), f.paths) for f in findings} == {
        (
            "KW0007",
            "Deployment apps/web",
            (
                "/spec/template/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/0/namespaces",
            ),
        ),
        ("KW0007", "RoleBinding apps/rb", ("/subjects",)),
    }
    fixed = _apply_fixes(trace, [f.fixes[0] for f in findings])
    assert validate_trace(fixed) == []
    assert fixed.events[0].applied_objs[1]["subjects"] == [
        {"kind": "ServiceAccount", "name": "y", "namespace": "apps"}
    ]


def test_pods_pinned_to_nodes_are_reported_and_unpinned() -> None:
    pod_spec = {
        "containers": [_container()],
        "nodeName": "ip-10-0-0-1",
        "nodeSelector": {"kubernetes.io/hostname": "ip-10-0-0-1", "disk": "ssd"},
    }
    trace = _trace((10, [_deployment("web", pod_spec)], []))
    (finding,) = validate_trace(trace)
    assert finding.code == "KE0008"
    assert finding.paths == (
        "/spec/template/spec/nodeName",
        "/spec/template/spec/nodeSelector/kubernetes.io~1hostname",
    )
    spec = _apply_fixes(trace, list(finding.fixes)).events[0].applied_objs[0]["spec"]["template"]["spec"]
    assert "nodeName" not in spec
    assert spec["nodeSelector"] == {"disk": "ssd"}


# ---- rule registry -------------------------------------------------------------------------------
def test_every_rule_has_a_unique_code_and_an_explanation() -> None:
    assert len(RULES) == 17
    for code, r in RULES.items():
        assert r.code == code
        assert code.removeprefix("K")[0] == ("E" if r.severity.value == "error" else "W")
        assert r.explanation
    assert rule("e0002").name == "envvar_secret_missing"
    with pytest.raises(ConfigError, match="unknown rule code 'E9999'; known codes: W0000"):
        rule("E9999")


# SimKube's code table (sk-cli/src/validation/rules/README.md in acrlabs/simkube): code -> rule name.
SIMKUBE_CODES = {
    "W0000": "status_field_populated",
    "E0001": "service_account_missing",
    "E0002": "envvar_secret_missing",
    "E0003": "envvar_configmap_missing",
    "E0004": "volume_secret_missing",
    "E0005": "volume_configmap_missing",
}


def test_simkubes_rules_have_simkubes_codes_and_kubetapes_own_have_k_codes() -> None:
    assert {code: r.name for code, r in RULES.items() if not code.startswith("K")} == SIMKUBE_CODES


def test_secret_and_configmap_references_are_told_apart_by_where_they_are_as_simkube_does() -> None:
    pod_spec = {
        "containers": [_container(envFrom=[{"secretRef": {"name": "s"}}, {"configMapRef": {"name": "c"}}])],
        "volumes": [
            {"name": "sv", "secret": {"secretName": "s"}},
            {"name": "cv", "configMap": {"name": "c"}},
        ],
    }
    trace = _trace((10, [_deployment("web", pod_spec)], []))
    findings = validate_trace(trace)
    assert {(f.code, f.message) for f in findings} == {
        ("E0002", "Secret apps/s is not in the trace"),
        ("E0003", "ConfigMap apps/c is not in the trace"),
        ("E0004", "Secret apps/s is not in the trace"),
        ("E0005", "ConfigMap apps/c is not in the trace"),
    }
    # each finding's removal repairs its own references; together they repair all
    by_code = {f.code: f for f in findings}
    env_only = _apply_fixes(trace, [by_code["E0002"].fixes[-1], by_code["E0003"].fixes[-1]])
    assert {f.code for f in validate_trace(env_only)} == {"E0004", "E0005"}
    assert validate_trace(_apply_fixes(trace, [f.fixes[-1] for f in findings])) == []
    # the placeholder the environment and the volume findings both offer is created once
    creates = [op["create"] for op in fix_transform(findings)["operations"] if "create" in op]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in creates) == [
        ("ConfigMap", "c"),
        ("Secret", "s"),
    ]


def test_repeated_problems_are_reported_once_and_placeholders_merge_keys() -> None:
    def spec(key: str) -> dict[str, Any]:
        env = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "shared", "key": key}}}]
        return {"containers": [_container(env=env)]}

    trace = _trace(
        (10, [_deployment("web", spec("a"))], []),
        (20, [_deployment("web", spec("a"))], []),
        (30, [_deployment("web", spec("a")), _deployment("api", spec("b"))], []),
    )
    findings = validate_trace(trace)
    assert [(f.obj.name, f.event_index, f.repeated_at) for f in findings] == [
        ("web", 0, (1, 2)),
        ("api", 2, ()),
    ]
    fix_file = render_fix_file(findings, "t")
    assert "&id" not in fix_file
    operations = yaml.safe_load(fix_file)["operations"]
    assert operations == [
        {
            "create": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "shared",
                    "namespace": "apps",
                    "annotations": {"kubetape.dev/placeholder": "true"},
                },
                "data": {"a": "placeholder", "b": "placeholder"},
            }
        }
    ]
    fixed, _ = apply_transform(trace, parse_transform(yaml.safe_load(fix_file), "fix"))
    assert validate_trace(fixed) == []
