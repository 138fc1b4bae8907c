"""k8s/sim/autoscalers: the Cluster Autoscaler and Karpenter options render with kustomize and their
objects pass a server-side dry-run on the real ``sim`` apiserver; the Karpenter option's node class is
the one the Simulation's NodePools (and the local stack) refer to."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline.stack.state import StackInfo

AUTOSCALERS = Path(__file__).resolve().parents[2] / "k8s" / "sim" / "autoscalers"
STACK_NODECLASS = (
    Path(__file__).resolve().parents[2] / "pipeline" / "stack" / "resources" / "karpenter-nodeclass.yaml"
)


def kubectl(stack_info: StackInfo, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(stack_info.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        input=stdin, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"kubectl {' '.join(args[:2])}: {done.stderr}"
    return done.stdout


@pytest.mark.parametrize("option", ["cluster-autoscaler", "karpenter"])
def test_each_autoscaler_option_renders_and_its_objects_pass_a_server_dry_run(
    stack_info: StackInfo, sim_kubeconfig: Path, option: str
) -> None:
    rendered = [
        d
        for d in yaml.safe_load_all(
            kubectl(stack_info, sim_kubeconfig, "kustomize", str(AUTOSCALERS / option))
        )
        if d
    ]
    kinds = {d["kind"] for d in rendered}
    assert kinds >= {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}, kinds
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    assert deployment["metadata"]["namespace"] == "kube-system"
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.rpartition(":")[2].startswith("v1."), image  # kustomize's images: took effect
    # the custom resources' CRDs come from the Karpenter module (see the kustomization), not from here
    core = [d for d in rendered if not d["apiVersion"].startswith("karpenter.")]
    out = kubectl(
        stack_info, sim_kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(core)
    )
    assert out.count("(server dry run)") == len(core), out


def test_the_karpenter_options_node_class_is_the_stacks() -> None:
    option = yaml.safe_load((AUTOSCALERS / "karpenter" / "nodeclass.yaml").read_text())
    assert option == yaml.safe_load(STACK_NODECLASS.read_text())


def test_the_cluster_autoscaler_templates_are_kwok_nodes_replayed_pods_can_use() -> None:
    config_maps = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all((AUTOSCALERS / "cluster-autoscaler" / "kwok-provider.yaml").read_text())
    }
    config = yaml.safe_load(config_maps["kwok-provider-config"]["data"]["config"])
    templates = yaml.safe_load(config_maps["kwok-provider-templates"]["data"][config["configmap"]["key"]])
    key = config["nodegroups"]["fromNodeLabelKey"]
    for node in templates["items"]:
        labels = node["metadata"]["labels"]
        assert key in labels
        assert labels["type"] == "kwok"  # replayed pods select type=kwok
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_the_autoscaled_example_simulation_passes_the_crds_schema_and_the_controllers_checks(
    stack_info: StackInfo, sim_kubeconfig: Path
) -> None:
    from pipeline.controller.spec import parse_spec
    from tests.polling import crd_established

    crd = AUTOSCALERS.parent / "simulation-crd.yaml"
    kubectl(stack_info, sim_kubeconfig, "apply", "-f", str(crd))
    crd_established(lambda *a: kubectl(stack_info, sim_kubeconfig, *a), "simulations.kubetape.dev")
    example = AUTOSCALERS.parent / "examples" / "simulation-autoscaled.yaml"
    out = kubectl(stack_info, sim_kubeconfig, "apply", "--dry-run=server", "-f", str(example))
    assert "(server dry run)" in out
    spec = parse_spec(yaml.safe_load(example.read_text()))
    assert spec.autoscaler is not None
    assert spec.autoscaler.node_pools[0]["metadata"]["name"] == "general"
    # and the schema refuses what the controller would refuse: a pool that is not a NodePool
    bad = yaml.safe_load(example.read_text())
    bad["spec"]["autoscaler"]["nodePools"][0]["kind"] = "Node"
    done = subprocess.run(
        [str(stack_info.bin_dir / "kubectl"), "--kubeconfig", str(sim_kubeconfig),
         "apply", "--dry-run=server", "-f", "-"],
        input=yaml.safe_dump(bad), capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "spec.autoscaler.nodePools[0].kind" in done.stderr, done.stderr
