"""``kubetape validate --generate-skel``: the program repairs what the YAML fix repairs (removing references
where the YAML fix creates placeholders, as skctl's programs do), and the trace's text never becomes
program text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pipeline.formats.simkube import SimkubeEvent, SimkubeTrace
from pipeline.validate.apply import apply_transform
from pipeline.validate.comments import one_line
from pipeline.validate.findings import ObjectRef
from pipeline.validate.fixes import align_selector
from pipeline.validate.rules import validate_trace
from pipeline.validate.skel.ast import Literal, ResourceTest
from pipeline.validate.skel.generate import expressible, fix_skel, operation_statements
from pipeline.validate.skel.program import load_skel, parse_program
from pipeline.validate.tracefile import read_trace_file
from pipeline.validate.transform import parse_transform
from services.cli import main
from tests.unit.test_skel_transform import deployments

INJECTION = "web\ndelete(*);\n#"


# ---- SimKube's validation fixture ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["simkube-validation-trace.json", "simkube-v3-validation-trace.json"])
def test_the_generated_program_repairs_simkubes_validation_fixture_completely(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # 11 findings: W0000, E0001, E0002 x2, E0003 x2, E0004, E0005 (the rules skctl has too, whose
    # programs remove the references) and KE0009-KE0011 (apiserver refusals skctl does not check).
    trace, skel, fixed = simkube_traces / name, tmp_path / "fix.skel", tmp_path / "fixed.json"
    assert main(["validate", str(trace), "--generate-skel", str(skel), "--format", "json"]) == 1
    before = json.loads(capsys.readouterr().out)
    assert (before["errors"], before["warnings"]) == (10, 1)
    text = skel.read_text()
    assert "creating an object" not in text  # no placeholder left to the YAML fix
    assert main(["transform", str(trace), "--skel", str(skel), "-o", str(fixed)]) == 0
    capsys.readouterr()
    assert main(["validate", str(fixed), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
    spec = read_trace_file(fixed).events[0].applied_objs[0]["spec"]
    pod = spec["template"]["spec"]
    # the dangling references are gone, with the mounts of the volumes that used them; the rest stays
    assert pod["volumes"] == [{"name": "empty-dir-volume", "emptyDir": {}}]
    assert pod["containers"][0]["env"] == [{"name": "env1", "value": "foo"}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "empty-dir-volume", "mountPath": "/etc/foo"}]
    assert spec["selector"] == {"matchLabels": {"app": "test-app"}}


def test_a_finding_with_no_repair_skel_can_say_keeps_its_repair_as_a_comment() -> None:
    target = ObjectRef("apps/v1", "Deployment", "shop", "web")
    # two labels to write where the selector is absent: each statement would test the absence again
    op = align_selector(target, None, {}, {"app": "web", "tier": "db"}).operations[0]
    assert not expressible(op)
    # one label is one statement
    (statement,) = operation_statements(align_selector(target, None, {}, {"app": "web"}).operations[0])
    assert statement.endswith('&& !exists(spec.selector), spec.selector.matchLabels.app = "web");')


def test_a_map_added_where_a_value_was_replaces_it_as_the_yaml_add_does() -> None:
    op = {"select": {"kind": "Deployment"}, "add": {"/spec/strategy": {"type": "Recreate", "x": {"y": 1}}}}
    program = parse_program("\n".join(operation_statements(op)))
    obj = {"kind": "Deployment", "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {}}}}
    by_yaml, _ = parse_transform({"version": 1, "operations": [op]}, "fix.yaml").edit(obj, 0, 0)
    by_skel, _ = program.edit(obj, 0, 0)
    assert (
        by_skel
        == by_yaml
        == {"kind": "Deployment", "spec": {"strategy": {"type": "Recreate", "x": {"y": 1}}}}
    )


# ---- what the trace holds never becomes program text ----------------------------------------------------
def _deployment(name: str, namespace: str) -> dict[str, Any]:
    pod = {"serviceAccountName": "robot", "containers": [{"name": "main", "image": "busybox"}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a"}}, "spec": pod},
        },
        "status": {"replicas": 1},
    }


def _trace(objects: list[dict[str, Any]]) -> SimkubeTrace:
    config = {"trackedObjects": {"apps/v1.Deployment": {"podSpecTemplatePaths": ["/spec/template"]}}}
    return SimkubeTrace(2, config, [SimkubeEvent(10, objects)], {}, {})


def _decoy_names(name: str) -> set[str]:
    """Names a sloppy escape or a prefix match would confuse with ``name``."""
    variants = {
        name + "x",
        "x" + name,
        name[:-1],
        name.strip(),
        name.replace('"', ""),
        name.replace("\\", ""),
        name.replace("\n", "\\n"),
        name.replace("\r", "\n"),
        "web",
        "*",
    }
    return {v for v in variants if v and v != name}


TEXT = st.text(st.sampled_from('"\\\n\r\t*#;()$.=& ') | st.characters(codec="utf-8"), min_size=1, max_size=12)


@given(TEXT, TEXT)
@example(INJECTION, "default")
@example("web", 'de"fault')
@example("a\rb", "ns")
def test_generated_selectors_pick_exactly_the_object_whatever_its_name(name: str, namespace: str) -> None:
    target = _deployment(name, namespace)
    findings = validate_trace(_trace([target]))
    assert {f.code for f in findings} == {"W0000", "E0001"}
    text = fix_skel(findings, "trace.json")
    program = parse_program(text)  # whatever the names hold, the program parses

    # every statement tests the object's exact identity ...
    for command in program.commands:
        tests = {
            (c.path.text, c.rhs.value)
            for c in command.selector
            if isinstance(c, ResourceTest) and isinstance(c.rhs, Literal)
        }
        assert ("metadata.name", name) in tests
        assert ("metadata.namespace", namespace) in tests
    # ... so it changes that object and leaves every look-alike as it was
    decoys = [_deployment(n, namespace) for n in _decoy_names(name)]
    decoys += [_deployment(name, ns) for ns in _decoy_names(namespace)]
    for decoy in decoys:
        assert program.edit(decoy, 10, 10) == (decoy, False)
    edited, changed = program.edit(target, 10, 10)
    if '"' in name + namespace:  # SKEL strings have no escapes: such a name cannot be written at all
        assert program.commands == ()
        assert (edited, changed) == (target, False)
        assert "not expressible in SKEL (the string" in text
    else:
        assert edited is not None
        assert "status" not in edited
        assert "serviceAccountName" not in edited["spec"]["template"]["spec"]


def test_a_name_written_to_inject_a_statement_deletes_nothing(tmp_path: Path) -> None:
    target, bystander = _deployment(INJECTION, "default"), _deployment("bystander", "default")
    del bystander["status"]
    bystander["spec"]["template"]["spec"].pop("serviceAccountName")
    trace = _trace([target, bystander])
    skel = tmp_path / "fix.skel"
    skel.write_text(fix_skel(validate_trace(trace), "trace.json"))
    result, stats = apply_transform(trace, load_skel(skel))
    assert stats.objects_dropped == 0
    kept = result.events[0].applied_objs
    assert [o["metadata"]["name"] for o in kept] == [INJECTION, "bystander"]
    assert kept[1] == bystander
    assert "status" not in kept[0]
    assert "# W0000 event 0 Deployment default/web\\ndelete(*);\\n#: status is populated" in skel.read_text()


@given(st.text())
def test_a_comment_is_one_line_whatever_the_text(text: str) -> None:
    line = one_line(text)
    assert line.splitlines() == ([line] if line else [])
    assert not any(ch in line for ch in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
    assert line.encode("ascii", "backslashreplace").decode("unicode_escape") == text


def test_a_carriage_return_in_a_string_survives_the_file(tmp_path: Path) -> None:
    skel = tmp_path / "cr.skel"
    skel.write_bytes(b'delete(metadata.name == "a\rb");\r\n')
    (command,) = load_skel(skel).commands
    assert [c.rhs for c in command.selector if isinstance(c, ResourceTest)] == [Literal("a\rb")]


@given(deployments())
def test_the_generated_program_leaves_nothing_to_find_in_any_workload(obj: dict[str, Any]) -> None:
    trace = _trace([obj])
    findings = validate_trace(trace)
    program = parse_program(fix_skel(findings, "trace.json"))
    fixed, _stats = apply_transform(trace, program)
    assert [(f.code, f.message) for f in validate_trace(fixed)] == []
