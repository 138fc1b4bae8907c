"""The stack's first build fetches the jars beside the cluster build, and a failed fetch is said at once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.model.errors import StackError
from pipeline.stack import s3, stack
from pipeline.stack.stack import LocalStack


def test_the_jars_are_fetched_while_the_cluster_binaries_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jars_started = threading.Event()

    def fetch_kafka(versions: object, report: object) -> Path:
        jars_started.set()
        return tmp_path / "libs"

    def build_kube(versions: object, report: object) -> Path:
        # the cluster build runs first on this thread: the jars arrive meanwhile, not after it
        assert jars_started.wait(timeout=30), "the jars waited for the cluster build"
        return tmp_path / "bin"

    monkeypatch.setattr(stack, "ensure_kafka", fetch_kafka)
    monkeypatch.setattr(s3, "ensure_s3proxy", lambda versions, report: tmp_path / "s3proxy.jar")
    monkeypatch.setattr(stack, "ensure_kube_binaries", build_kube)
    assert LocalStack(tmp_path / "stack").build() == (tmp_path / "libs", tmp_path / "bin")


def test_a_failed_fetch_is_said_before_the_cluster_build_ends_and_then_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    failure_said = threading.Event()

    def report(message: str) -> None:
        said.append(message)
        if "fetching the jars failed" in message:
            failure_said.set()

    def fetch_kafka(versions: object, report: object) -> Path:
        raise StackError("mvn is not installed")

    def build_kube(versions: object, report: object) -> Path:
        assert failure_said.wait(timeout=30), f"the failed fetch was not said during the build: {said}"
        return tmp_path / "bin"

    monkeypatch.setattr(stack, "ensure_kafka", fetch_kafka)
    monkeypatch.setattr(stack, "ensure_kube_binaries", build_kube)
    with pytest.raises(StackError, match="mvn is not installed"):
        LocalStack(tmp_path / "stack", report=report).build()
