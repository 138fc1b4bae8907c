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


def test_the_autoscalers_pools_and_prices_reach_the_replayer_as_files_and_flags(tmp_path: Path) -> None:
    sim = simulation(nodePools=[NODEPOOL], prices={"kwok-standard-4": 0.192})
    spec = parse_spec(sim)
    settings = ControllerSettings(identity="c")
    config_map = node_pools_config_map(sim, spec, settings)
    assert config_map is not None
    job = replayer_job(sim, 0, spec, settings)
    container = job["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--autoscaler") + 1] == "karpenter"
    nodepool_path, prices_path = args[args.index("--nodepool") + 1], args[args.index("--prices") + 1]
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {NODE_POOLS_MOUNT}
    # what the Job's pod finds under the mount is what `kubetape replay` reads from those flags
    for name, text in config_map["data"].items():
        (tmp_path / name).write_text(text)
    pools, scaled = load_node_pools(tmp_path / Path(nodepool_path).name, 10.0)
    assert pools[0]["spec"]["disruption"]["consolidateAfter"] == "3s"
    assert any(s.name.endswith("consolidateAfter") for s in scaled)
    assert load_prices(tmp_path / Path(prices_path).name) == {"kwok-standard-4": 0.192}


def test_a_simulation_without_an_autoscaler_gets_no_autoscaler_flags() -> None:
    sim = simulation(nodePools=[NODEPOOL])
    del sim["spec"]["autoscaler"]
    spec = parse_spec(sim)
    assert spec.autoscaler is None
    assert node_pools_config_map(sim, spec, ControllerSettings(identity="c")) is None
    args = replayer_job(sim, 0, spec, ControllerSettings(identity="c"))["spec"]["template"]["spec"]
    assert "--autoscaler" not in args["containers"][0]["args"]


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


def test_a_pod_autoscaler_reaches_the_replayer_as_the_hpa_flags_which_the_replay_reads() -> None:
    from services.cli import build_parser
    from services.commands.replay import spec_from_args

    sim = simulation(nodePools=[NODEPOOL])
    sim["spec"]["podAutoscaler"] = {"loadModel": "per-pod"}
    args = replayer_job(sim, 0, parse_spec(sim), ControllerSettings(identity="c"))["spec"]["template"][
        "spec"
    ]["containers"][0]["args"]
    assert [a for i, a in enumerate(args) if args[i - 1] == "--autoscaler"] == ["karpenter", "hpa"]
    assert args[args.index("--load-model") + 1] == "per-pod"
    # without Karpenter (whose pools the Job reads from its mount), the Job's command line asks
    # `kubetape replay` for the HPA with that model
    del sim["spec"]["autoscaler"]
    args = replayer_job(sim, 0, parse_spec(sim), ControllerSettings(identity="c"))["spec"]["template"][
        "spec"
    ]["containers"][0]["args"]
    replay = spec_from_args(build_parser().parse_args(args))
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
