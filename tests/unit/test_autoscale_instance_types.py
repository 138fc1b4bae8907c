"""Instance types for the simulated Karpenter derived from recorded Nodes: one per instance-type label,
capacity from the Nodes, an offering per zone and capacity type seen, prices from the table or the
nodes' price label; what cannot be derived is said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.replay.autoscale.instance_types import instance_types_from_nodes

REPO_ROOT = Path(__file__).resolve().parents[2]


def node(
    name: str, kind: str | None, zone: str, *, price: str | None = None, spot: bool = False
) -> dict[str, Any]:
    labels = {"kubernetes.io/arch": "arm64", "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": zone}
    if kind is not None:
        labels["node.kubernetes.io/instance-type"] = kind
    if price is not None:
        labels["eks-node-viewer/instance-price"] = price
    if spot:
        labels["karpenter.sh/capacity-type"] = "spot"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }


def test_each_recorded_type_is_offered_in_every_zone_and_capacity_type_it_was_seen_in() -> None:
    derived = instance_types_from_nodes(
        [
            node("a", "m-4", "zone-b", price="0.2"),
            node("b", "m-4", "zone-a", price="0.2"),
            node("c", "m-4", "zone-a", spot=True),
            node("d", "c-4", "zone-a"),
            node("e", None, "zone-a"),
        ],
        prices={"c-4": 0.15},
    )
    by_name = {t["name"]: t for t in derived.instance_types}
    assert sorted(by_name) == ["c-4", "m-4"]
    m4 = by_name["m-4"]
    assert m4["resources"] == {"cpu": "4", "memory": "16Gi", "pods": "110"}
    assert m4["architecture"] == "arm64"
    assert m4["operatingSystems"] == ["linux"]
    offered = [({r["key"]: r["values"][0] for r in o["Requirements"]}, o["Price"]) for o in m4["offerings"]]
    assert offered == [
        ({"karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": "zone-a"}, 0.2),
        ({"karpenter.sh/capacity-type": "spot", "topology.kubernetes.io/zone": "zone-a"}, 0.2),
        ({"karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": "zone-b"}, 0.2),
    ]
    assert by_name["c-4"]["offerings"][0]["Price"] == 0.15  # the price table wins
    assert derived.unpriced == []
    assert derived.unlabelled_nodes == 1


def test_a_type_without_any_price_is_priced_zero_and_named() -> None:
    derived = instance_types_from_nodes([node("a", "x-2", "z")])
    assert derived.instance_types[0]["offerings"][0]["Price"] == 0.0
    assert derived.unpriced == ["x-2"]


def test_the_derived_types_have_the_shape_of_the_stacks_own_instance_types_file() -> None:
    shipped = json.loads((REPO_ROOT / "pipeline/stack/resources/karpenter-instance-types.json").read_text())
    derived = instance_types_from_nodes([node("a", "m-4", "z", price="0.1")]).instance_types[0]
    assert set(derived) == set(shipped[0])
    assert set(derived["offerings"][0]) == set(shipped[0]["offerings"][0])


def test_a_type_whose_nodes_never_recorded_a_capacity_is_not_offered() -> None:
    bare = node("a", "y-8", "z", price="0.3")
    del bare["status"]
    derived = instance_types_from_nodes([bare, node("b", "m-4", "z", price="0.1")])
    assert [t["name"] for t in derived.instance_types] == ["m-4"]
    assert derived.without_capacity == ["y-8"]
