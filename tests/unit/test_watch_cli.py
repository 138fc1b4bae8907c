"""``kubetape watch`` finds its cluster as kubectl does, and inside a pod through its service account."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli import build_parser
from services.commands.watch import settings_from_args


def settings_for(*argv: str) -> Path | None:
    return settings_from_args(build_parser().parse_args(["watch", *argv])).kubeconfig


def test_inside_a_pod_without_a_kubeconfig_the_service_account_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert settings_for() is None  # kube_api(None) loads the in-cluster config


def test_an_explicit_kubeconfig_or_the_environment_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "env.yaml"))
    assert settings_for() == tmp_path / "env.yaml"
    assert settings_for("--kubeconfig", str(tmp_path / "flag.yaml")) == tmp_path / "flag.yaml"


def test_outside_a_pod_the_default_is_the_users_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert settings_for() == Path("~/.kube/config").expanduser()


def test_the_cluster_id_comes_from_the_flag_or_the_environment_else_the_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def cluster_id(*argv: str) -> str | None:
        return settings_from_args(build_parser().parse_args(["watch", *argv])).cluster_id

    monkeypatch.delenv("KUBETAPE_CLUSTER_ID", raising=False)
    assert cluster_id() is None  # the service reads the kube-system namespace UID
    monkeypatch.setenv("KUBETAPE_CLUSTER_ID", "prod-eu")
    assert cluster_id() == "prod-eu"
    assert cluster_id("--cluster-id", "prod-us") == "prod-us"


def test_the_sink_records_the_cluster_its_watcher_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.commands.sink import settings_from_args as sink_settings

    def sink(*argv: str) -> tuple[object, str, str]:
        s = sink_settings(
            build_parser().parse_args(["sink", "--bootstrap", "b:9092", "--segment-store", "/s", *argv])
        )
        return s.cluster, str(s.segment_store), s.group_id

    monkeypatch.delenv("KUBETAPE_CLUSTER_ID", raising=False)
    assert sink() == (None, "/s", "kubetape-sink")  # the topic's only cluster, found when it starts
    monkeypatch.setenv("KUBETAPE_CLUSTER_ID", "prod-eu")
    assert sink() == ("prod-eu", "/s", "kubetape-sink.prod-eu")  # its sub-store: clusters/prod-eu/
    assert sink("--cluster", "default") == ("default", "/s", "kubetape-sink")


def test_usage_is_sampled_every_15_s_unless_told_and_a_bad_interval_is_refused() -> None:
    from pipeline.model.errors import ConfigError

    def every(*argv: str) -> float:
        return settings_from_args(build_parser().parse_args(["watch", *argv])).usage_every_s

    assert every() == 15.0
    assert every("--usage-every", "0") == 0.0  # off
    assert every("--usage-every", "30") == 30.0
    for bad in ("-1", "0.1", "nan", "100000"):
        with pytest.raises(ConfigError, match="--usage-every"):
            every("--usage-every", bad)
