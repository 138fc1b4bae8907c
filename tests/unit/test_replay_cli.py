"""``kubetape replay`` argument handling: clear errors for bad input, before touching any cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.model.errors import ConfigError
from pipeline.replay.inputs import parse_nodes
from services.cli import main


def test_nodes_flag_reads_a_skeleton_and_a_count(tmp_path: Path) -> None:
    skeleton = tmp_path / "node.yaml"
    skeleton.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: big}\n")
    node, count = parse_nodes(f"{skeleton}:10")
    assert node["metadata"]["name"] == "big"
    assert count == 10


@pytest.mark.parametrize("text", ["node.yaml", "node.yaml:0", "node.yaml:x", ":3"])
def test_nodes_flag_rejects_malformed_values(text: str) -> None:
    with pytest.raises(ConfigError, match=r"SKELETON\.yaml:N"):
        parse_nodes(text)


def test_nodes_flag_rejects_a_non_node_skeleton(tmp_path: Path) -> None:
    skeleton = tmp_path / "pod.yaml"
    skeleton.write_text("apiVersion: v1\nkind: Pod\n")
    with pytest.raises(ConfigError, match="kind: Node"):
        parse_nodes(f"{skeleton}:2")


def test_missing_trace_is_a_clear_error_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", "--trace", str(tmp_path / "nope.sktrace"), "--kubeconfig", str(tmp_path / "k")])
    assert code == 2
    assert "nope.sktrace: cannot read the trace" in capsys.readouterr().err


def test_non_positive_speed_is_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["replay", "--trace", "t", "--kubeconfig", "k", "--speed", "0"])
    assert code == 2
    assert "--speed must be positive" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--segments", "d"], "pass --from"),
        (["--topic", "t", "--bootstrap", "b"], "pass --from"),
        (["--topic", "t", "--from=-1h"], "--topic needs --bootstrap"),
        (["--trace", "t", "--from=-1h"], "not of a --trace file"),
        (["--trace", "t", "--follow"], "pass --topic and --bootstrap"),
        (["--topic", "t", "--bootstrap", "b", "--follow", "--speed", "10"], "at speed 1"),
        (["--trace", "t", "--sample-interval", "0"], "--sample-interval must be positive"),
    ],
)
def test_source_arguments_that_do_not_fit_together_are_rejected(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", *argv, "--kubeconfig", "k"]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_segment_store_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--segments", str(tmp_path / "none"), "--from=-1h", "--kubeconfig", "k"]
    assert main(argv) == 2
    assert "segment store" in capsys.readouterr().err


def test_an_unreachable_trace_url_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    # port 9 on loopback: nothing listens there
    assert main(["replay", "--trace", "http://127.0.0.1:9/t.sktrace", "--kubeconfig", "k"]) == 1
    assert "cannot download the trace" in capsys.readouterr().err


def test_a_negative_settle_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--trace", "t", "--kubeconfig", "k", "--settle", "-1"]) == 2
    assert "--settle must be 0 or more" in capsys.readouterr().err


def test_a_non_positive_max_lag_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--trace", "t", "--kubeconfig", "k", "--max-lag", "0"]) == 2
    assert "--max-lag must be positive" in capsys.readouterr().err


def test_speed_max_needs_the_governor(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["replay", "--trace", "t", "--kubeconfig", "k", "--speed", "max"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--speed max runs as fast as the simulated cluster keeps up" in err
    assert "add --max-lag SECONDS" in err


def test_a_speed_that_is_neither_a_number_nor_max_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["replay", "--trace", "t", "--kubeconfig", "k", "--speed", "fast"])
    assert exited.value.code == 2
    assert "'fast' is neither a number (e.g. 10) nor 'max'" in capsys.readouterr().err


def test_a_crd_file_that_holds_no_crd_is_refused_before_any_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "crd.yaml"
    bad.write_text("kind: ConfigMap\n")
    code = main(["replay", "--trace", "t", "--kubeconfig", "k", "--crd", str(bad)])
    assert code == 2
    assert "--crd: document 0 of" in capsys.readouterr().err
