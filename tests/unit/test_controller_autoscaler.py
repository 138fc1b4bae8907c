"""A Simulation with ``spec.autoscaler``: its NodePools and prices reach each replayer Job as files and
flags (``kubetape replay --autoscaler karpenter --nodepool … --prices …``); a bad spec names its field.
The replay then parses the mounted files as ``kubetape replay`` does on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.controller.objects import NODE_POOLS_MOUNT, node_pools_config_map, replayer_job
from pipeline.controller.settings import ControllerSettings
from pipeline.controller.spec import SimulationSpecError, parse_spec
from pipeline.replay.inputs import load_node_pools, load_prices

NODEPOOL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "general"},
    "spec": {"disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}},
}


def simulation(**autoscaler: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubetape.dev/v1",
        "kind": "Simulation",
        "metadata": {"name": "burst", "uid": "u1"},
        "spec": {"source": {"traceURL": "https://example.com/t.kts"}, "speed": 10, "autoscaler": autoscaler},
    }


def test_the_autoscalers_pools_and_prices_reach_the_replayer_as_files_its_document_names(
    tmp_path: Path,
) -> None:
    from tests.fakes.replay_job import job_document

    sim = simulation(nodePools=[NODEPOOL], prices={"kwok-standard-4": 0.192})
    spec = parse_spec(sim)
    settings = ControllerSettings(identity="c")
    config_map = node_pools_config_map(sim, spec, settings)
    assert config_map is not None
    job = replayer_job(sim, 0, spec, settings)
    container = job["spec"]["template"]["spec"]["containers"][0]
    document = job_document("burst", 0, spec)
    assert document["autoscalers"] == ["karpenter"]
    (nodepool_path,), prices_path = document["nodepools"], document["prices"]
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {NODE_POOLS_MOUNT}
    # what the Job's pod finds under the mount is what `kubetape replay` reads from those paths
    for name, text in config_map["data"].items():
        (tmp_path / name).write_text(text)
    pools, scaled = load_node_pools(tmp_path / Path(nodepool_path).name, 10.0)
    assert pools[0]["spec"]["disruption"]["consolidateAfter"] == "3s"
    assert any(s.name.endswith("consolidateAfter") for s in scaled)
    assert load_prices(tmp_path / Path(prices_path).name) == {"kwok-standard-4": 0.192}


def test_a_simulation_without_an_autoscaler_asks_for_none() -> None:
    sim = simulation(nodePools=[NODEPOOL])
    del sim["spec"]["autoscaler"]
    spec = parse_spec(sim)
    assert spec.autoscaler is None
    assert node_pools_config_map(sim, spec, ControllerSettings(identity="c")) is None
    from tests.fakes.replay_job import job_document

    assert not {"autoscalers", "nodepools", "prices"} & set(job_document("burst", 0, spec))


@pytest.mark.parametrize(
    ("autoscaler", "message"),
    [
        (
            {"provider": "cluster-autoscaler", "nodePools": [NODEPOOL]},
            r"provider: 'cluster-autoscaler' is not",
        ),
        ({"nodePools": []}, r"nodePools: give at least one"),
        ({"nodePools": [{"kind": "Node"}]}, r"nodePools\[0\]: must be a NodePool"),
        ({"nodePools": [NODEPOOL], "prices": {"a": "cheap"}}, r"prices: must map instance types"),
    ],
)
def test_a_bad_autoscaler_spec_names_its_field(autoscaler: dict[str, Any], message: str) -> None:
    with pytest.raises(SimulationSpecError, match=f"spec.autoscaler.*{message}"):
        parse_spec(simulation(**autoscaler))


def test_an_autoscaler_needs_a_fixed_speed() -> None:
    sim = simulation(nodePools=[NODEPOOL])
    sim["spec"].update({"maxSpeed": True, "maxLag": "5s"})
    with pytest.raises(SimulationSpecError, match=r"spec.autoscaler: .* spec.maxSpeed"):
        parse_spec(sim)


def test_a_pod_autoscaler_reaches_the_replayer_in_its_document_which_the_replay_reads() -> None:
    from tests.fakes.replay_job import job_document, job_replay

    sim = simulation(nodePools=[NODEPOOL])
    sim["spec"]["podAutoscaler"] = {"loadModel": "per-pod"}
    document = job_document("sim", 0, parse_spec(sim))
    assert document["autoscalers"] == ["karpenter", "hpa"]
    assert document["loadModel"] == "per-pod"
    # without Karpenter (whose pools the Job reads from its mount), the Job's document asks
    # `kubetape replay` for the HPA with that model
    del sim["spec"]["autoscaler"]
    replay = job_replay("sim", 0, parse_spec(sim))
    assert replay.pod_autoscaling is not None
    assert replay.pod_autoscaling.load_model.value == "per-pod"
    assert replay.autoscaling is None


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"provider": "keda"}, "spec.podAutoscaler.provider: 'keda' is not supported"),
        ({"loadModel": "average"}, "spec.podAutoscaler.loadModel: 'average' is not a load model"),
        ("hpa", "spec.podAutoscaler: must be an object"),
    ],
)
def test_a_bad_pod_autoscaler_names_its_field(given: Any, problem: str) -> None:
    sim = simulation(nodePools=[NODEPOOL])
    del sim["spec"]["autoscaler"]
    sim["spec"]["podAutoscaler"] = given
    with pytest.raises(SimulationSpecError, match=problem.replace(".", r"\.")):
        parse_spec(sim)
