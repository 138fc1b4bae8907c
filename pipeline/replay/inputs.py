"""What a replay, a sweep and a Simulation read from files beside the trace (node skeletons, Karpenter
NodePools, prices, instance types): one home for ``kubetape replay``, ``kubetape sweep`` and
``kubetape sim run``. Each error names the flag and the file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pipeline.model.errors import ConfigError

if TYPE_CHECKING:  # the CLI reads these files before it imports the replay's modules
    from pipeline.replay.plan import ReplayPlan


def parse_nodes(text: str) -> tuple[dict[str, Any], int]:
    """``skeleton.yaml:10`` → (the Node skeleton, 10); ConfigError saying what is wrong otherwise."""
    path_text, sep, count_text = text.rpartition(":")
    if not sep or not path_text or not count_text.isdigit() or int(count_text) < 1:
        raise ConfigError(f"--nodes {text!r}: expected SKELETON.yaml:N with N ≥ 1, e.g. node.yaml:10")
    path = Path(path_text)
    try:
        skeleton = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"--nodes: cannot read node skeleton {path} ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--nodes: node skeleton {path} is not valid YAML ({exc})") from None
    if not isinstance(skeleton, dict) or skeleton.get("kind") != "Node":
        raise ConfigError(f"--nodes: {path} must hold one object of kind: Node")
    return skeleton, int(count_text)


def _yaml_documents(path: Path, flag: str, kind: str) -> list[Any]:
    """The documents of the YAML file ``path`` given to ``flag``, at least one; a ConfigError naming
    the flag and the file when it cannot be read, is not YAML or holds no ``kind``."""
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot read {path} ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{flag}: {path} is not valid YAML ({exc})") from None
    if not documents:
        raise ConfigError(f"{flag}: {path} holds no {kind}")
    return documents


def read_crds(path: Path) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of one ``--crd`` file (YAML, several documents allowed)."""
    documents = _yaml_documents(path, "--crd", "CustomResourceDefinition")
    for index, document in enumerate(documents):
        if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
            raise ConfigError(
                f"--crd: document {index} of {path} is not a CustomResourceDefinition "
                f"(kind: {document.get('kind') if isinstance(document, dict) else type(document).__name__})"
            )
    return documents


def read_node_pools(path: Path) -> list[dict[str, Any]]:
    """The NodePools of one ``--nodepool`` file, as written."""
    documents = _yaml_documents(path, "--nodepool", "NodePool")
    for index, document in enumerate(documents):
        if not isinstance(document, dict):
            raise ConfigError(f"--nodepool: document {index} of {path} is not a mapping")
    return documents


def scale_node_pools(
    pools: list[dict[str, Any]], speed: float, source: str, provider: str = "karpenter"
) -> tuple[list[dict[str, Any]], list[Any]]:
    """``pools`` with their time settings divided by ``speed``, and every setting as given and applied."""
    from pipeline.replay.autoscale.provider import autoscaler_provider

    scaled_pools: list[dict[str, Any]] = []
    settings: list[Any] = []
    for index, document in enumerate(pools):
        pool, scaled = autoscaler_provider(provider).scale_pool(
            document, speed, f"--nodepool {source} (document {index})"
        )
        scaled_pools.append(pool)
        settings += scaled
    return scaled_pools, settings


def load_node_pools(path: Path, speed: float) -> tuple[list[dict[str, Any]], list[Any]]:
    """The NodePools of one ``--nodepool`` file with their time settings divided by ``speed``."""
    return scale_node_pools(read_node_pools(path), speed, str(path))


def load_prices(path: Path) -> dict[str, float]:
    """``--prices``: a YAML mapping of instance type to $/hour."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--prices: cannot read {path} as YAML ({exc})") from None
    if not isinstance(raw, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in raw.values()
    ):
        raise ConfigError(
            f"--prices: {path} must map instance types to non-negative $/hour numbers, "
            f"e.g. 'kwok-standard-4: 0.192'"
        )
    return {str(k): float(v) for k, v in raw.items()}


def instance_types_for(path: Path | None, plan: ReplayPlan | None, prices: Mapping[str, float] | None) -> Any:
    """The instance types an autoscaled replay offers: ``--instance-types FILE`` (the KWOK provider's
    JSON), else those of the Nodes ``plan`` recorded (instance-type, zone and capacity labels), else None
    (the local Karpenter keeps the types it runs with). ``source`` says which, for the report."""
    from pipeline.replay.autoscale.instance_types import instance_types_from_nodes

    if path is not None:
        try:
            types = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"--instance-types: cannot read {path} as JSON ({exc}); give the KWOK provider's "
                f"instance-types file (see pipeline/stack/resources/karpenter-instance-types.json)"
            ) from None
        return {"source": f"file {path}", "types": types}
    if plan is None:  # following a live topic: no recorded Nodes to derive them from
        return None
    nodes = [
        step.payload.obj
        for step in plan.steps
        if step.payload.obj is not None and step.payload.obj.get("kind") == "Node"
    ]
    derived = instance_types_from_nodes(nodes, prices)
    if not derived.instance_types:
        return None
    source = f"derived from {len(nodes)} recorded Node event(s)"
    if derived.unpriced:
        source += f"; priced 0 for want of a price: {', '.join(derived.unpriced)}"
    if derived.without_capacity:
        source += f"; not offered, no recorded capacity: {', '.join(derived.without_capacity)}"
    return {"source": source, "types": derived.instance_types}
