"""What a controller's replayer Job runs: its repetition's replay document, read by ``kubetape replay
--spec`` as the Job's container reads it from the ConfigMap's mount."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.controller.objects import REPLAY_SPEC_FILE, REPLAY_SPEC_MOUNT, replay_config_map
from pipeline.controller.settings import ControllerSettings
from pipeline.controller.spec import SimulationSpec
from pipeline.replay.spec import ReplaySpec
from services.cli import build_parser
from services.commands.replay import args_from_document_file, spec_from_args
from tests.fakes.cluster import MemoryCluster


def job_document(name: str, index: int, spec: SimulationSpec) -> dict[str, Any]:
    """The document's ``spec`` (its keys and values) the Job of repetition ``index`` runs."""
    import yaml

    text = _config_map_text(name, index, spec)
    document: dict[str, Any] = yaml.safe_load(text)
    return dict(document["spec"])


def job_args(name: str, index: int, spec: SimulationSpec) -> argparse.Namespace:
    """The parsed flags ``kubetape replay --spec`` runs with in that Job."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / REPLAY_SPEC_FILE
        path.write_text(_config_map_text(name, index, spec))
        args = build_parser().parse_args(["replay", "--spec", str(path)])
        return args_from_document_file(args)


def job_replay(name: str, index: int, spec: SimulationSpec) -> ReplaySpec:
    """The :class:`ReplaySpec` that Job's replay runs."""
    return spec_from_args(job_args(name, index, spec))


def _config_map_text(name: str, index: int, spec: SimulationSpec) -> str:
    simulation = {"metadata": {"name": name, "uid": "u-1"}}
    config_map = replay_config_map(simulation, index, spec, ControllerSettings(identity="c"))
    text: str = config_map["data"][REPLAY_SPEC_FILE]
    return text


def mounted_document(cluster: MemoryCluster, job: Mapping[str, Any]) -> dict[str, Any]:
    """The replay document ``job``'s container runs: its command must be ``replay --spec`` of the file
    its ``replay-spec`` volume mounts, from a ConfigMap that exists in ``cluster``."""
    import yaml

    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == ["replay", "--spec", f"{REPLAY_SPEC_MOUNT}/{REPLAY_SPEC_FILE}"]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == REPLAY_SPEC_MOUNT)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    namespace = job["metadata"]["namespace"]
    config_map = cluster.find("v1", "ConfigMap", namespace, volume["configMap"]["name"])
    assert config_map is not None, f"the Job mounts ConfigMap {volume['configMap']['name']}, which is missing"
    document: dict[str, Any] = yaml.safe_load(config_map["data"][REPLAY_SPEC_FILE])
    return document


def mounted_args(cluster: MemoryCluster, job: Mapping[str, Any]) -> argparse.Namespace:
    """The parsed flags ``kubetape replay --spec`` runs with in ``job``'s pod."""
    import yaml

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / REPLAY_SPEC_FILE
        path.write_text(yaml.safe_dump(mounted_document(cluster, job)))
        return args_from_document_file(build_parser().parse_args(["replay", "--spec", str(path)]))
