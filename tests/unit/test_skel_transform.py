"""SKEL on whole traces: SimKube traces (v2, v3) and kubetape traces alike, hashes and index recomputed;
``kubetape transform --skel`` and ``kubetape export --transform FILE.skel``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pipeline.formats.assemble import simkube_to_trace
from pipeline.formats.segment.decode import read_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import read_simkube_trace
from pipeline.model.events import EventType
from pipeline.model.hashing import object_spec_hash
from pipeline.validate import fixes as fixes_module
from pipeline.validate.apply import apply_transform
from pipeline.validate.apply_segment import apply_transform_to_segment
from pipeline.validate.findings import ObjectRef
from pipeline.validate.skel.generate import operation_statements
from pipeline.validate.skel.program import load_skel, parse_program
from pipeline.validate.transform import parse_transform
from services.cli import main
from tests.unit.test_sink_cli import export_args, fill_store

REPO_ROOT = Path(__file__).resolve().parents[2]
SANITIZED_POD_SPEC = {
    "containers": [
        {
            "name": "test-container",
            "env": [{"name": "env1", "value": "foo"}],
            "envFrom": [],
            "volumeMounts": [{"name": "empty-dir-volume", "mountPath": "/etc/foo"}],
        }
    ],
    "volumes": [{"name": "empty-dir-volume", "emptyDir": {}}],
}


@pytest.fixture
def sanitize(simkube_traces: Path) -> Any:
    return load_skel(simkube_traces / "skel" / "sanitize.skel")


@pytest.mark.parametrize("name", ["simkube-validation-trace.json", "simkube-v3-validation-trace.json"])
def test_simkubes_sanitiser_on_its_validation_trace(simkube_traces: Path, sanitize: Any, name: str) -> None:
    trace = read_simkube_trace(simkube_traces / name)
    result, stats = apply_transform(trace, sanitize)
    (deployment,) = result.events[0].applied_objs
    assert deployment["spec"]["template"]["spec"] == SANITIZED_POD_SPEC
    assert "status" not in deployment
    assert result.version == trace.version  # v3 stays v3
    assert result.index["apps/v1.Deployment"]["default/test-deployment"] == object_spec_hash(deployment)
    assert (stats.objects_seen, stats.objects_modified) == (1, 1)


def test_the_same_program_gives_the_same_objects_on_a_kubetape_trace(
    simkube_traces: Path, sanitize: Any
) -> None:
    simkube = read_simkube_trace(simkube_traces / "simkube-v3-validation-trace.json")
    segment = simkube_to_trace(simkube)
    result, stats = apply_transform_to_segment(segment, sanitize)
    applied = [e for e in result.events if e.type is EventType.APPLIED]
    (deployment,) = [e for e in applied if e.obj and e.obj["kind"] == "Deployment"]
    assert deployment.obj is not None
    assert deployment.obj["spec"]["template"]["spec"] == SANITIZED_POD_SPEC
    assert deployment.spec_hash == object_spec_hash(deployment.obj)
    assert stats.objects_modified >= 1


def test_a_time_bound_delete_keeps_the_rest_of_the_object_and_its_lifecycles(simkube_traces: Path) -> None:
    # cronjob.sktrace: the CronJob is applied at the start and deleted 205 s later; its pods finished.
    trace = read_simkube_trace(simkube_traces / "cronjob.sktrace")
    program = parse_program("delete(@t >= 1m);")
    result, stats = apply_transform(trace, program)
    assert [len(e.deleted_objs) for e in result.events] == [0, 0]  # the deletion event is gone
    assert stats.events_dropped == 1
    assert result.index == trace.index
    assert result.pod_lifecycles == trace.pod_lifecycles

    segment = simkube_to_trace(trace)
    seg_result, _stats = apply_transform_to_segment(segment, program)
    types = [e.type for e in seg_result.events]
    assert EventType.DELETED not in types
    lifecycles = [e for e in segment.events if e.type is EventType.POD_LIFECYCLE]
    assert lifecycles
    assert [e for e in seg_result.events if e.type is EventType.POD_LIFECYCLE] == lifecycles


def test_a_delete_of_every_version_drops_the_index_entry_and_lifecycles(simkube_traces: Path) -> None:
    trace = read_simkube_trace(simkube_traces / "cronjob.sktrace")
    result, _stats = apply_transform(trace, parse_program('delete(metadata.name == "hello-simkube");'))
    assert result.index == {}
    assert result.pod_lifecycles == {}


def test_a_rename_by_modify_moves_the_index_entry_and_lifecycles(simkube_traces: Path) -> None:
    trace = read_simkube_trace(simkube_traces / "cronjob.sktrace")
    result, _stats = apply_transform(trace, parse_program('modify(metadata.name = "renamed");'))
    assert list(result.index["batch/v1.CronJob"]) == ["default/renamed"]
    assert list(result.pod_lifecycles) == [("batch/v1.CronJob", "default/renamed")]


# ---- the command line -------------------------------------------------------------------------------
def test_transform_takes_a_skel_file_as_skctl_does_or_with_skel(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = simkube_traces / "simkube-v3-validation-trace.json"
    skel = simkube_traces / "skel" / "sanitize.skel"
    assert main(["transform", str(trace), str(skel), "-o", str(tmp_path / "a.json")]) == 0
    assert main(["transform", str(trace), "--skel", str(skel), "-o", str(tmp_path / "b.json")]) == 0
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert "1 modified" in capsys.readouterr().out
    out = read_simkube_trace(tmp_path / "a.json")
    assert out.version == 3
    assert out.events[0].applied_objs[0]["spec"]["template"]["spec"] == SANITIZED_POD_SPEC
    assert (
        main(["transform", str(trace), str(skel), "--simkube-version", "2", "-o", str(tmp_path / "c.json")])
        == 0
    )
    assert read_simkube_trace(tmp_path / "c.json").version == 2


def test_transform_on_a_kubetape_trace(simkube_traces: Path, tmp_path: Path) -> None:
    segment = simkube_to_trace(read_simkube_trace(simkube_traces / "simkube-validation-trace.json"))
    (tmp_path / "in.kseg").write_bytes(encode_segment(segment))
    skel = simkube_traces / "skel" / "sanitize.skel"
    assert (
        main(["transform", str(tmp_path / "in.kseg"), "--skel", str(skel), "-o", str(tmp_path / "out.kseg")])
        == 0
    )
    out = read_segment(tmp_path / "out.kseg")
    specs = [e.obj["spec"]["template"]["spec"] for e in out.events if e.obj and e.obj["kind"] == "Deployment"]
    assert specs == [SANITIZED_POD_SPEC]


def test_a_bad_program_is_reported_with_its_position(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.skel"
    bad.write_text("remove(status);\nremove(spec.template spec);\n")
    trace = simkube_traces / "cronjob.sktrace"
    assert main(["transform", str(trace), "--skel", str(bad), "-o", str(tmp_path / "out.sktrace")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2:22: found 'spec'; expected" in err
    assert not (tmp_path / "out.sktrace").exists()
    assert main(["transform", str(trace), str(bad), "--skel", str(bad), "-o", str(tmp_path / "o")]) == 2
    assert "give one transform" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("program", "where"),
    [
        (
            "modify(spec.replicas = 99999999999999999999999999999);\n",
            "1:24: the number 99999999999999999999999999999 is out of range",
        ),
        (
            "modify(" + ".".join(["a"] * 3000) + " = 1);\n",
            "1:8: the path has 3000 parts; a SKEL path has at most 100",
        ),
    ],
)
def test_a_number_or_path_no_trace_can_hold_is_a_bad_program_not_a_traceback(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], program: str, where: str
) -> None:
    skel = tmp_path / "big.skel"
    skel.write_text(program)
    out = tmp_path / "out.sktrace"
    assert (
        main(["transform", str(simkube_traces / "simkube-trace.json"), "--skel", str(skel), "-o", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert f"kubetape: error: {skel}:{where}" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_export_applies_a_skel_program_and_writes_v3_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill_store(tmp_path / "segments")
    common = export_args(tmp_path)
    skel = tmp_path / "label.skel"
    skel.write_text(
        'modify(metadata.labels."kubetape.dev/exported" = "yes");\ndelete(metadata.name == "app-0");\n'
    )
    out = tmp_path / "out.sktrace"
    args = [
        *common,
        "--format",
        "simkube",
        "--simkube-version",
        "3",
        "--transform",
        str(skel),
        "-o",
        str(out),
    ]
    assert main(args) == 0
    trace = read_simkube_trace(out)
    assert trace.version == 3
    objects = [o for e in trace.events for o in e.applied_objs]
    assert objects
    assert all(o["metadata"]["labels"]["kubetape.dev/exported"] == "yes" for o in objects)
    names = {o["metadata"]["name"] for o in objects}
    assert "app-103" in names
    assert "app-0" not in names
    assert not any(name.endswith("/app-0") for name in trace.index["apps/v1.Deployment"])

    assert main([*common, "--format", "simkube", "-o", str(tmp_path / "v2.sktrace")]) == 0
    v2 = read_simkube_trace(tmp_path / "v2.sktrace")
    assert v2.version == 2  # v2 by default
    assert any(name.endswith("/app-0") for name in v2.index["apps/v1.Deployment"])


def test_export_refuses_an_unknown_simkube_version_naming_the_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill_store(tmp_path / "segments")
    args = [*export_args(tmp_path), "-o", str(tmp_path / "x")]
    assert main([*args, "--format", "simkube", "--simkube-version", "4"]) == 2
    err = capsys.readouterr().err
    assert "version 4 cannot be written; kubetape writes versions 2 and 3 (and reads 1, 2 and 3)" in err
    assert main([*args, "--simkube-version", "3"]) == 2
    assert "--simkube-version applies to --format simkube only" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# ---- SKEL and the YAML transform agree ----------------------------------------------------------------
NAMES = st.sampled_from(["a", "b", "c"])
ENV = st.one_of(
    st.builds(lambda n: {"name": "E", "value": n}, NAMES),
    st.builds(lambda n: {"name": "S", "valueFrom": {"secretKeyRef": {"name": n, "key": "k"}}}, NAMES),
    st.builds(lambda n: {"name": "C", "valueFrom": {"configMapKeyRef": {"name": n, "key": "k"}}}, NAMES),
)
VOLUME = st.one_of(
    st.builds(lambda v, n: {"name": v, "secret": {"secretName": n}}, NAMES, NAMES),
    st.builds(lambda v, n: {"name": v, "configMap": {"name": n}}, NAMES, NAMES),
    st.builds(lambda v: {"name": v, "emptyDir": {}}, NAMES),
)
CONTAINER = st.fixed_dictionaries(
    {"name": NAMES, "env": st.lists(ENV, max_size=4)},
    optional={
        "image": st.just("x"),
        "volumeMounts": st.lists(st.builds(lambda v: {"name": v, "mountPath": "/m"}, NAMES), max_size=3),
        "envFrom": st.lists(st.builds(lambda n: {"secretRef": {"name": n}}, NAMES), max_size=2),
    },
)


@st.composite
def deployments(draw: st.DrawFn) -> dict[str, Any]:
    # container names are unique in a pod (the apiserver requires it; the repairs pick containers by name)
    containers = draw(st.lists(CONTAINER, min_size=1, max_size=3, unique_by=lambda c: c["name"]))
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["volumes"] = draw(st.lists(VOLUME, max_size=3))
    if draw(st.booleans()):
        spec["serviceAccountName"] = "sa"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": draw(st.sampled_from(["web", "api"])), "namespace": "shop"},
        "spec": {"template": {"spec": spec}},
        "status": {"replicas": 1},
    }


@given(deployments(), st.sampled_from(["Secret", "ConfigMap"]), NAMES, st.lists(NAMES, max_size=2))
def test_generated_skel_does_what_the_yaml_repairs_do(
    obj: dict[str, Any], kind: str, name: str, volumes: list[str]
) -> None:
    target = ObjectRef("apps/v1", "Deployment", "shop", "web")
    pod_spec = "/spec/template/spec"
    fixes = [
        fixes_module.drop_env_references(target, pod_spec, kind, name),
        fixes_module.drop_volume_references(target, pod_spec, kind, name, volumes),
        fixes_module.drop_service_account(target, pod_spec),
        fixes_module.placeholder_image(target, f"{pod_spec}/containers", "a", None),
        fixes_module.mark_key_references_optional(target, pod_spec, kind, name),
        fixes_module.remove_fields(target, ["/status"], "remove status"),
    ]
    operations = [op for fix in fixes for op in fix.operations]
    program = parse_program("\n".join(s for op in operations for s in operation_statements(op)))
    by_yaml, _yaml_changed = parse_transform({"version": 1, "operations": operations}, "fix.yaml").edit(
        obj, 0, 0
    )
    by_skel, skel_changed = program.edit(obj, 0, 0)
    assert by_skel == by_yaml
    assert skel_changed == (by_yaml != obj)


@st.composite
def any_workload(draw: st.DrawFn) -> dict[str, Any]:
    containers = draw(
        st.lists(
            st.fixed_dictionaries(
                {"name": NAMES, "env": st.lists(ENV, max_size=3)},
                optional={"args": st.just(["--token", "t"])},
            ),
            min_size=1,
            max_size=2,
        )
    )
    kind = draw(st.sampled_from(["Deployment", "Job", "CronJob", "Pod", "Secret", "ConfigMap"]))
    meta: dict[str, Any] = {"name": "x", "namespace": "shop"}
    if draw(st.booleans()):
        meta["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"}
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": meta}
    pod_spec = {"containers": containers}
    if kind == "Pod":
        obj["spec"] = pod_spec
    elif kind == "CronJob":
        obj["apiVersion"] = "batch/v1"
        obj["spec"] = {"jobTemplate": {"spec": {"template": {"spec": pod_spec}}}}
    elif kind in ("Deployment", "Job"):
        obj["apiVersion"] = "apps/v1" if kind == "Deployment" else "batch/v1"
        obj["spec"] = {"template": {"spec": pod_spec}}
    else:
        obj["data"] = {"k": "v"}
        obj["stringData"] = {"k": "v"}
    return obj


@given(any_workload())
def test_the_example_redaction_as_skel_does_what_the_yaml_does(obj: dict[str, Any]) -> None:
    operations = yaml.safe_load((REPO_ROOT / "examples" / "transforms" / "redact.yaml").read_text())[
        "operations"
    ]
    program = parse_program("\n".join(s for op in operations for s in operation_statements(op)))
    by_yaml, _ = parse_transform({"version": 1, "operations": operations}, "redact.yaml").edit(obj, 0, 0)
    by_skel, _ = program.edit(obj, 0, 0)
    assert by_skel == by_yaml
