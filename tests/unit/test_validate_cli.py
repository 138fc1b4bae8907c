"""``kubetape validate`` and ``kubetape transform`` as a user (or CI) runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.formats.assemble import simkube_to_trace
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import SimkubeEvent, SimkubeTrace, read_simkube_trace
from pipeline.validate.tracefile import encode_trace
from services.cli import main


def test_validate_fix_transform_revalidate(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = str(simkube_traces / "simkube-validation-trace.json")
    fix, fixed = tmp_path / "fix.yaml", tmp_path / "fixed.sktrace"
    assert main(["validate", trace, "--fix", str(fix)]) == 1  # errors found: CI fails
    table = capsys.readouterr().out
    assert "E0002   0      1709241485  Deployment default/test-deployment" in table
    assert "11 findings: 10 errors, 1 warning" in table
    assert "kubetape transform" in fix.read_text()
    assert main(["transform", trace, str(fix), "-o", str(fixed)]) == 0
    assert "7 created" in capsys.readouterr().out
    assert main(["validate", str(fixed)]) == 0
    assert "no findings" in capsys.readouterr().out


def test_validate_json_output(simkube_traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(simkube_traces / "simkube-validation-trace.json"), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["errors"], report["warnings"]) == (10, 1)
    first = report["findings"][0]
    assert first["code"] == "W0000"
    assert first["event_index"] == 0
    assert first["object"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "namespace": "default",
        "name": "test-deployment",
    }
    assert first["fixes"][0]["operations"][0]["remove"] == ["/status"]


def test_warnings_pass_unless_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "a"},
        "status": {"phase": "Running"},
    }
    path = tmp_path / "t.json"
    path.write_bytes(
        encode_trace(SimkubeTrace(2, {"trackedObjects": {}}, [SimkubeEvent(5, [pod])], {}, {}), as_json=True)
    )
    assert main(["validate", str(path)]) == 0
    assert main(["validate", str(path), "--strict"]) == 1
    assert "1 finding: 0 errors, 1 warning" in capsys.readouterr().out


def test_validate_time_range(simkube_traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(simkube_traces / "simkube-validation-trace.json")
    assert main(["validate", trace, "--start", "1s"]) == 0
    assert main(["validate", trace, "--start", "@1709241485", "--end", "10s"]) == 1
    assert main(["validate", trace, "--start", "soon"]) == 2
    assert "invalid time 'soon'" in capsys.readouterr().err


def test_explain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "explain", "E0002"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("E0002 envvar_secret_missing (error)")
    assert main(["validate", "explain"]) == 0
    assert "KE0008  error    pod_pinned_to_node" in capsys.readouterr().out
    assert main(["validate", "explain", "E42"]) == 2
    assert "unknown rule code 'E42'" in capsys.readouterr().err


def test_bad_transform_and_bad_trace_fail_clearly(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "fix.yaml"
    bad.write_text("version: 1\noperations:\n  - select: {kind: Deployment}\n    remove: [status]\n")
    out = tmp_path / "out.sktrace"
    trace = str(simkube_traces / "cronjob.sktrace")
    assert main(["transform", trace, str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: operations[0].remove[0]: JSON pointer 'status' must be empty or start with '/'" in err
    assert not out.exists()
    assert main(["transform", trace, str(bad), "-o", trace]) == 2
    assert "refusing to overwrite the input trace" in capsys.readouterr().err
    garbage = tmp_path / "garbage.sktrace"
    garbage.write_bytes(b"\xc1\xc1\xc1")
    assert main(["validate", str(garbage)]) == 2
    assert "garbage.sktrace" in capsys.readouterr().err


def test_kubetape_traces_are_validated_too(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sk = read_simkube_trace(simkube_traces / "simkube-validation-trace.json")
    path = tmp_path / "trace.kttrace"
    path.write_bytes(encode_segment(simkube_to_trace(sk)))
    assert main(["validate", str(path), "--format", "json"]) == 1
    codes = sorted(f["code"] for f in json.loads(capsys.readouterr().out)["findings"])
    assert codes == [
        "E0001", "E0002", "E0002", "E0003", "E0003", "E0004", "E0005", "KE0009", "KE0010", "KE0011", "W0000"
    ]  # fmt: skip


def test_every_shared_trace_in_one_ci_run(simkube_traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A directory stands for its trace files (README.md is skipped); errors in one trace fail the run.
    assert main(["validate", str(simkube_traces)]) == 1
    out = capsys.readouterr().out
    assert out.endswith(
        "6 traces:\n"
        f"{simkube_traces}/bare-pods.sktrace                 no findings: the trace passes every rule\n"
        f"{simkube_traces}/cronjob.sktrace                   no findings: the trace passes every rule\n"
        f"{simkube_traces}/simkube-trace.json                1 finding: 0 errors, 1 warning\n"
        f"{simkube_traces}/simkube-v3-trace.json             1 finding: 0 errors, 1 warning\n"
        f"{simkube_traces}/simkube-v3-validation-trace.json  11 findings: 10 errors, 1 warning\n"
        f"{simkube_traces}/simkube-validation-trace.json     11 findings: 10 errors, 1 warning\n"
    )
    clean = [
        str(simkube_traces / name) for name in ("bare-pods.sktrace", "cronjob.sktrace", "simkube-trace.json")
    ]
    assert main(["validate", *clean]) == 0  # a warning alone passes ...
    assert main(["validate", *clean, "--strict"]) == 1  # ... unless --strict


def test_an_unreadable_trace_is_reported_and_the_others_still_checked(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.sktrace"
    broken.write_bytes(b"\xc1 not msgpack")
    good = str(simkube_traces / "cronjob.sktrace")
    assert main(["validate", str(broken), good, "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert "broken.sktrace" in captured.err
    report = json.loads(captured.out)
    assert report["exit_code"] == 2
    unreadable, checked = report["traces"]
    assert unreadable["trace"] == str(broken)
    assert "broken.sktrace" in unreadable["unreadable"]
    assert (checked["trace"], checked["findings"], checked["errors"]) == (good, [], 0)


def test_validate_arguments_that_cannot_work_fail_before_any_work(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fix = tmp_path / "fix.yaml"
    assert main(["validate", str(simkube_traces), "--fix", str(fix)]) == 2
    assert "--fix writes the repairs of one trace; got 6 traces" in capsys.readouterr().err
    assert not fix.exists()
    assert main(["validate", str(tmp_path)]) == 2
    assert "no trace files in this directory" in capsys.readouterr().err
    assert main(["validate", "explain", "E0001", "E0002"]) == 2
    assert "at most one rule code" in capsys.readouterr().err


def test_ignored_rules_are_left_out_of_output_exit_code_and_fix_file(
    simkube_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = str(simkube_traces / "simkube-validation-trace.json")
    fix = tmp_path / "fix.yaml"
    ignored = [
        "--ignore",
        "W0000",
        "--ignore",
        "e0002,E0003,E0004,E0005",
        "--ignore",
        "E0001,KE0009,ke0010,KE0011",
    ]
    assert main(["validate", trace, *ignored, "--fix", str(fix), "--format", "json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert (report["findings"], report["errors"]) == ([], 0)
    assert report["ignored_rules"] == [
        "E0001", "E0002", "E0003", "E0004", "E0005", "KE0009", "KE0010", "KE0011", "W0000"
    ]  # fmt: skip
    assert "deprecated" not in captured.err  # the current codes, given as they are now
    assert "operations: []" in fix.read_text()
    assert main(["validate", trace, "--ignore", "W0000"]) == 1  # the errors still fail the run
    assert "(findings of W0000 left out: --ignore)" in capsys.readouterr().out
    assert main(["validate", trace, "--ignore", "W0001"]) == 2
    assert "unknown rule code 'W0001'" in capsys.readouterr().err


def test_former_codes_still_work_and_name_the_rules_code_now(
    simkube_traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = str(simkube_traces / "simkube-validation-trace.json")
    assert main(["validate", trace, "--ignore", "E0010", "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ignored_rules"] == ["KE0010"]
    assert "warning: --ignore E0010: E0010 is deprecated: selector_mismatch is KE0010 now" in captured.err
    assert "KE0010" not in {f["code"] for f in json.loads(captured.out)["findings"]}
    # E0004 was kubetape's missing PVC; it is SimKube's missing Secret volume now, and says so
    assert main(["validate", trace, "--ignore", "E0004", "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ignored_rules"] == ["E0004"]
    assert (
        "note: --ignore E0004: E0004 is SimKube's volume_secret_missing (as in skctl validate); "
        "kubetape's pvc_missing, which was E0004 before, is KE0004"
    ) in captured.err
    assert main(["validate", "explain", "W0006"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("KW0006 unknown_kind (warning)")
    assert "W0006 is deprecated: unknown_kind is KW0006 now" in captured.err


def test_the_table_shows_a_name_with_control_characters_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p\x1b[2J\nE0001  fake", "namespace": "a"},
        "status": {"phase": "Running"},
    }
    path = tmp_path / "t.json"
    path.write_bytes(
        encode_trace(SimkubeTrace(2, {"trackedObjects": {}}, [SimkubeEvent(5, [pod])], {}, {}), as_json=True)
    )
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Pod a/p\\x1b[2J\\nE0001  fake" in out
    assert "\x1b" not in out
    assert [line.split()[0] for line in out.splitlines() if line.startswith(("W", "E"))] == ["W0000"]
