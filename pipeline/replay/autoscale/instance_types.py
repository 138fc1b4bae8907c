"""Instance types for Karpenter's KWOK provider, derived from the Nodes a trace recorded.

Without an instance-types file, an autoscaled replay can offer the simulated Karpenter what the
recorded cluster ran: one instance type per ``node.kubernetes.io/instance-type`` label, its resources
from the Nodes' capacity, its architecture and OS from their labels, and one offering per zone
(``topology.kubernetes.io/zone``) and capacity type (``karpenter.sh/capacity-type``, on-demand when
absent) seen. The price of an offering comes from the user's price table, else from the price label
the KWOK provider puts on its nodes, else it is 0 and the type is named in ``unpriced``. Nodes without
an instance-type label cannot be offered and are counted, as are types whose Nodes never recorded a
CPU and memory capacity. The output is the provider's JSON format
(``INSTANCE_TYPES_FILE_PATH``; see ``pipeline/stack/resources/karpenter-instance-types.json``). Pure
logic, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.model.node_labels import ZONE_LABEL
from pipeline.replay.autoscale.figures import INSTANCE_TYPE_LABEL, PRICE_LABEL

CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")
DEFAULT_ZONE = "kwok-zone-a"


@dataclass(slots=True)
class DerivedInstanceTypes:
    instance_types: list[dict[str, Any]] = field(default_factory=list)
    unpriced: list[str] = field(default_factory=list)
    """Types priced 0: neither the price table nor a node's price label gave a price."""
    unlabelled_nodes: int = 0
    """Recorded Nodes without an instance-type label (not offered)."""
    without_capacity: list[str] = field(default_factory=list)
    """Types whose Nodes never recorded a CPU and memory capacity (not offered: nothing to fit pods to)."""


def _label_price(labels: Mapping[str, Any]) -> float | None:
    try:
        return float(labels[PRICE_LABEL])
    except (KeyError, TypeError, ValueError):
        return None


def instance_types_from_nodes(
    nodes: Iterable[Mapping[str, Any]], prices: Mapping[str, float] | None = None
) -> DerivedInstanceTypes:
    """The KWOK provider's instance types offered by the recorded ``nodes`` (see the module doc)."""
    derived = DerivedInstanceTypes()
    by_type: dict[str, dict[str, Any]] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        name = labels.get(INSTANCE_TYPE_LABEL)
        if not name:
            derived.unlabelled_nodes += 1
            continue
        entry = by_type.setdefault(
            str(name), {"labels": labels, "capacity": {}, "offerings": set(), "price": None}
        )
        capacity = (node.get("status") or {}).get("capacity") or {}
        for resource in RESOURCES:
            if resource in capacity:
                entry["capacity"].setdefault(resource, str(capacity[resource]))
        zone = str(labels.get(ZONE_LABEL, DEFAULT_ZONE))
        entry["offerings"].add((zone, str(labels.get(CAPACITY_TYPE_LABEL, "on-demand"))))
        if entry["price"] is None:
            entry["price"] = _label_price(labels)
    for name, entry in sorted(by_type.items()):
        if not {"cpu", "memory"} <= entry["capacity"].keys():
            derived.without_capacity.append(name)
            continue
        price = (prices or {}).get(name, entry["price"])
        if price is None:
            derived.unpriced.append(name)
            price = 0.0
        derived.instance_types.append(
            {
                "name": name,
                "offerings": [
                    {
                        "Price": float(price),
                        "Available": True,
                        "Requirements": [
                            {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity_type]},
                            {"key": ZONE_LABEL, "operator": "In", "values": [zone]},
                        ],
                    }
                    for zone, capacity_type in sorted(entry["offerings"])
                ],
                "architecture": str(entry["labels"].get("kubernetes.io/arch", "amd64")),
                "operatingSystems": [str(entry["labels"].get("kubernetes.io/os", "linux"))],
                "resources": entry["capacity"],
            }
        )
    return derived
