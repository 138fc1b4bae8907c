"""Stack provisioning logic that needs no running component."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipeline.model.errors import MissingToolError, StackError
from pipeline.stack import kafka, kwok
from pipeline.stack.processes import require_tool
from pipeline.stack.stack import LocalStack, StackState
from pipeline.stack.versions import StackVersions, kube_bin_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("tool", ["java", "mvn", "go"])
def test_missing_tool_error_names_the_tool(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MissingToolError, match=f"`{tool}` is not on PATH") as info:
        require_tool(tool, "build the stack")
    assert "install" in str(info.value)


def test_build_without_go_fails_naming_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBETAPE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", "/nonexistent")
    from pipeline.stack.build import ensure_kube_binaries

    with pytest.raises(MissingToolError, match="`go`"):
        ensure_kube_binaries(StackVersions(), lambda _: None)


def test_cache_is_keyed_by_versions(tmp_path: Path) -> None:
    a = kube_bin_dir(StackVersions(), tmp_path)
    b = kube_bin_dir(StackVersions(kubernetes="v1.36.1"), tmp_path)
    assert a != b
    assert "v1.36.1" in b.name


def test_kafka_listens_on_loopback_only(tmp_path: Path) -> None:
    layout = kafka.KafkaLayout(tmp_path, broker_port=19092, controller_port=19093)
    kafka.write_server_properties(layout)
    props = dict(line.split("=", 1) for line in layout.properties.read_text().splitlines() if "=" in line)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == str(tmp_path / "data")


def test_kwokctl_config_binds_loopback_and_uses_local_binaries(tmp_path: Path) -> None:
    cluster = kwok.KwokCluster("sim", tmp_path / "kwok", tmp_path / "bin")
    documents = list(yaml.safe_load_all(kwok.write_kwokctl_config(cluster).read_text()))
    config = documents[0]
    options = config["options"]
    assert options["bindAddress"] == "127.0.0.1"
    binaries = {k: v for k, v in options.items() if k.endswith("Binary")}
    assert len(binaries) == 6
    assert all(v.startswith(str(tmp_path / "bin")) for v in binaries.values())  # nothing downloaded
    stages = {d["metadata"]["name"] for d in documents[1:]}
    # Custom stages replace kwokctl's defaults: the node stages must be there or nodes never get Ready.
    assert {"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-delete"} <= stages
    assert "pod-complete-after-lifetime" in stages


def test_unreadable_state_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{not json")
    with pytest.raises(StackError, match=r"state\.json"):
        StackState.load(path)


def test_invalid_cluster_name_is_rejected_before_anything_starts(tmp_path: Path) -> None:
    from pipeline.stack.stack import _validate_cluster_name

    with pytest.raises(StackError, match="cluster name"):
        _validate_cluster_name("bad name")
    assert LocalStack(tmp_path).status()["clusters"] == {}


def test_docker_compose_parses_and_has_the_pipeline_topology() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"kafka", "kwok-source", "kwok-sim"} <= set(services)
    for service in services.values():
        assert "image" in service or "build" in service
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{port} must bind loopback"


def test_docker_compose_config_is_valid_where_the_plugin_exists() -> None:
    import shutil
    import subprocess

    docker = shutil.which("docker")
    probe = (
        subprocess.run([docker, "compose", "version"], capture_output=True, check=False) if docker else None
    )
    if probe is None or probe.returncode != 0:
        pytest.skip("docker compose plugin not installed; the YAML check above covers parsing")
    result = subprocess.run(
        [docker, "compose", "-f", str(REPO_ROOT / "docker-compose.yml"), "config", "-q"],  # type: ignore[list-item]
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_default_profile_adds_nothing_to_the_cluster_config(tmp_path: Path) -> None:
    cluster = kwok.KwokCluster("sim", tmp_path / "kwok", tmp_path / "bin")
    documents = list(yaml.safe_load_all(kwok.write_kwokctl_config(cluster).read_text()))
    assert [d["kind"] for d in documents if d["kind"] != "Stage"] == ["KwokctlConfiguration"]
    assert "kubeSchedulerConfig" not in documents[0]["options"]
    assert {p["name"] for p in documents[0]["componentsPatches"]} == {"etcd", "kube-apiserver"}


@pytest.mark.parametrize("name", ["large", "large-sampled"])
def test_the_large_profiles_configure_controllers_scheduler_and_kwok(tmp_path: Path, name: str) -> None:
    cluster = kwok.KwokCluster("sim", tmp_path / "kwok", tmp_path / "bin", kwok.profile_named(name))
    documents = list(yaml.safe_load_all(kwok.write_kwokctl_config(cluster).read_text()))
    config = documents[0]
    patches = {p["name"]: {a["key"]: a["value"] for a in p["extraArgs"]} for p in config["componentsPatches"]}
    assert patches["kube-controller-manager"]["concurrent-deployment-syncs"] == "25"
    assert patches["etcd"]["unsafe-no-fsync"] == "true"  # the profile adds to the defaults, never drops
    assert patches["kube-apiserver"]["service-cluster-ip-range"] == "10.96.0.0/16"
    scheduler = yaml.safe_load(Path(config["options"]["kubeSchedulerConfig"]).read_text())
    assert (scheduler["apiVersion"], scheduler["kind"]) == (
        "kubescheduler.config.k8s.io/v1",
        "KubeSchedulerConfiguration",
    )
    assert scheduler["parallelism"] == 32
    (kwok_config,) = [d for d in documents if d["kind"] == "KwokConfiguration"]
    assert kwok_config["options"]["podPlayStageParallelism"] == 16
    assert {d["metadata"]["name"] for d in documents if d["kind"] == "Stage"} >= {
        "node-initialize",
        "pod-ready",
    }
    # only the sampled profile changes where pods can land, and it says so
    sampled = name == "large-sampled"
    assert ("percentageOfNodesToScore" in scheduler) is sampled
    assert bool(cluster.profile.changes_scheduling) is sampled
    stated = kwok.profile_configmap(cluster.profile)["data"]
    assert stated["profile"] == name
    assert json.loads(stated["changesScheduling"]) == list(cluster.profile.changes_scheduling)


def test_an_unknown_profile_is_a_clear_error_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"unknown stack profile 'huge': choose one of default, large"):
        LocalStack(tmp_path).up(["sim"], profile="huge")
    assert not (tmp_path / "state.json").exists()


def test_the_replayer_reads_the_profile_where_the_stack_states_it() -> None:
    from pipeline.replay.setup import PROFILE_CONFIGMAP

    assert kwok.PROFILE_CONFIGMAP == PROFILE_CONFIGMAP
    stated = kwok.profile_configmap(kwok.profile_named("large"))["metadata"]
    assert (stated["namespace"], stated["name"]) == PROFILE_CONFIGMAP


@pytest.mark.parametrize("name", ["large", "large-sampled"])
def test_k8s_sim_mirrors_each_stack_profile(name: str) -> None:
    """Users' own simulation clusters get the same settings as the stack's (k8s/sim/profiles/NAME)."""
    profile = kwok.profile_named(name)
    folder = REPO_ROOT / "k8s" / "sim" / "profiles" / name
    stated = (folder / "cluster-profile.yaml").read_text()
    assert yaml.safe_load(stated) == kwok.profile_configmap(profile)
    assert yaml.safe_load((folder / "kube-scheduler.yaml").read_text()) == kwok.scheduler_configuration(
        profile
    )
    assert yaml.safe_load((folder / "kwok.yaml").read_text())["options"] == profile.kwok_options
    flags = " ".join(f"--{k}={v}" for k, v in profile.controller_manager_args.items())
    assert f"#   kube-controller-manager: {flags}\n" in stated
