"""The real node's configuration files (pipeline/stack/real_node.py): the settings without which its pods do
not start on this kind of machine, and the ones that keep everything it makes under its own directory."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from pipeline.stack import real_node


def _state(directory: Path) -> real_node.RealNodeState:
    return real_node.RealNodeState(
        cluster="c",
        node="c-real-node",
        directory=str(directory),
        cgroup_parent=real_node.cgroup_parent_for(directory),
        kubelet_port=40001,
        healthz_port=40002,
    )


def test_containerd_keeps_oom_scores_and_everything_under_the_node_directory(tmp_path: Path) -> None:
    layout = real_node.NodeLayout(tmp_path / "real-node")
    layout.cni_config_dir.mkdir(parents=True)
    real_node._write_containerd_config(layout)
    config = tomllib.loads(layout.containerd_config.read_text())
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    # root here lacks CAP_SYS_RESOURCE: without it runc fails every sandbox
    assert cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["sandbox_image"] == "kubetape.local/pause:3.10"
    paths = [config["root"], config["state"], config["grpc"]["address"], config["ttrpc"]["address"]]
    paths.append(cri["containerd"]["runtimes"]["runc"]["options"]["Root"])
    paths.append(cri["cni"]["conf_dir"])
    assert all(Path(p).is_relative_to(layout.directory) for p in paths), paths
    network = json.loads((layout.cni_config_dir / "10-no-route.conflist").read_text())
    assert [plugin["type"] for plugin in network["plugins"]] == ["loopback"]


def test_the_kubelet_accepts_cgroup_v1_binds_loopback_and_adds_no_iptables_rules(tmp_path: Path) -> None:
    state = _state(tmp_path / "real-node")
    layout = state.layout
    layout.directory.mkdir(parents=True)
    real_node._write_kubelet_config(layout, state, tmp_path / "ca.crt")
    config = json.loads(layout.kubelet_config.read_text())
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == state.cgroup_parent
    assert config["makeIPTablesUtilChains"] is False
    assert (config["address"], config["healthzBindAddress"], config["readOnlyPort"]) == (
        "127.0.0.1",
        "127.0.0.1",
        0,
    )
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert Path(config["podLogsDir"]).is_relative_to(layout.directory)


def test_each_stack_directory_gets_its_own_cgroup(tmp_path: Path) -> None:
    first = real_node.cgroup_parent_for(tmp_path / "a")
    assert first == real_node.cgroup_parent_for(tmp_path / "a")
    assert first != real_node.cgroup_parent_for(tmp_path / "b")
    assert first.startswith("/kubetape-")
