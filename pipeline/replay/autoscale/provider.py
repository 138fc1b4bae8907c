"""The seam for autoscalers in the loop: what a replay, a sweep and the local stack's restart need of
one, with Karpenter (its KWOK provider) as the one implementation.

An autoscaler provisions nodes for pending pods from *pools* the replay creates (Karpenter's
NodePools), labels the nodes it makes with their pool (so the replay can tell them from fixed nodes and
from a recording's), and has time settings in its pools and in its process that a replay at speed S
divides by S (the report lists both, as given and as applied).

Cluster Autoscaler would plug in here: its KWOK cloud provider (``--cloud-provider=kwok``) groups
template Nodes into node groups by a label (``fromNodeLabelKey`` in its ``kwok-provider-config``
ConfigMap), so its pools are template Nodes in the ``kwok-provider-templates`` ConfigMap (no time
settings of their own), its node label is that key, and its process timers are ``--scan-interval``
(10 s), ``--scale-down-unneeded-time`` and ``--scale-down-delay-after-add`` (10 min each). It is not on
the Go module proxy here (every version answers 403), so the local stack cannot build it; clusters
with a registry run its image (``k8s/sim/autoscalers/cluster-autoscaler``). Pure logic, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from pipeline.model.errors import ConfigError
from pipeline.replay.autoscale.figures import NODEPOOL_LABEL
from pipeline.replay.autoscale.settings import ScaledSetting, scale_karpenter_timers, scale_nodepool


@runtime_checkable
class AutoscalerProvider(Protocol):
    @property
    def name(self) -> str:
        """As ``--autoscaler`` names it."""
        ...

    @property
    def node_pool_label(self) -> str:
        """The label on every node the autoscaler made, whose value names its pool."""
        ...

    def scale_pool(
        self, pool: Mapping[str, Any], speed: float, source: str
    ) -> tuple[dict[str, Any], list[ScaledSetting]]:
        """A copy of one pool object with its time settings divided by ``speed``, and each setting."""
        ...

    def process_timers(self, speed: float) -> tuple[dict[str, float], list[ScaledSetting]]:
        """The process's timers in seconds divided by ``speed`` (by name), and each setting."""
        ...


class Karpenter:
    """Karpenter with its KWOK provider: NodePools, nodes labelled ``karpenter.sh/nodepool``."""

    name = "karpenter"
    node_pool_label = NODEPOOL_LABEL

    def scale_pool(
        self, pool: Mapping[str, Any], speed: float, source: str
    ) -> tuple[dict[str, Any], list[ScaledSetting]]:
        return scale_nodepool(pool, speed, source=source)

    def process_timers(self, speed: float) -> tuple[dict[str, float], list[ScaledSetting]]:
        timers, settings = scale_karpenter_timers(speed)
        return {
            "batch_idle_s": timers.batch_idle_s,
            "batch_max_s": timers.batch_max_s,
            "polling_period_s": timers.polling_period_s,
            "validation_delay_s": timers.validation_delay_s,
        }, settings


PROVIDERS: Mapping[str, AutoscalerProvider] = {"karpenter": Karpenter()}


def autoscaler_provider(name: str) -> AutoscalerProvider:
    """The provider ``--autoscaler NAME`` names; ConfigError listing the known ones otherwise."""
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ConfigError(
            f"--autoscaler {name!r} is not supported; use one of {', '.join(sorted(PROVIDERS))} "
            f"(Cluster Autoscaler: see pipeline/replay/autoscale/provider.py and k8s/sim/autoscalers)"
        ) from None
