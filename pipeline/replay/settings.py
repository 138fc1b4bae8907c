"""Every knob of one replay (:class:`ReplaySettings`), with the defaults ``kubetape replay`` uses."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.model.lifecycle_delays import LifecycleDelays
from pipeline.model.speed import check_speed
from pipeline.replay.autoscale.settings import ScaledSetting
from pipeline.replay.report.settle import default_settle_ms, default_settle_source

if TYPE_CHECKING:
    from pipeline.replay.hpa.replay import HpaReplay

NodePool = tuple[Mapping[str, Any], int]
"""A pool of virtual nodes: a Node skeleton and how many nodes to make of it."""


@dataclass(frozen=True, slots=True)
class ReplaySettings:
    """Every knob of one replay; defaults are what ``kubetape replay`` uses without flags."""

    speed: float = 1.0
    """Trace seconds per wall second (10 = ten times faster than recorded)."""
    replay_name: str = ""
    """Names the root and labels every object (default: ``replay-<8 hex>``)."""
    namespace_prefix: str = "kubetape"
    duration_ms: int | None = None
    """Trace time to replay: shorter cuts the trace, longer keeps the simulation running after it."""
    max_in_flight: int = 32
    """Objects applied concurrently at most."""
    qps: float | None = None
    """Client-side limit of apiserver writes per second (None: unlimited)."""
    apply_retries: int = 3
    """Retries of a write the apiserver answered with 429/5xx or did not answer."""
    node_pools: tuple[NodePool, ...] = ()
    """(skeleton, count) pools of virtual nodes, created in this order (one per ``--nodes``)."""
    keep: bool = False
    """Leave the simulated objects in the cluster (no cleanup)."""
    sample_interval_s: float = 0.5
    """Wall seconds between two samples of the replay's pods (the report's timelines). Half the default
    resolution: samples a full resolution apart would make every bit of timer jitter a gap beyond it,
    and the verdict degraded, on a replay that held."""
    fidelity_resolution_s: float = 1.0
    """Wall seconds the replayer's writes may run late, and the samples be apart, before the machine
    counts as not keeping up (a reason for a ``degraded`` verdict; see pipeline.replay.report.fidelity)."""
    settle_s: float | None = None
    """Trace seconds a replayed owner's pods may trail the recording by and still count as right
    (``--settle``); None: :meth:`settle` chooses."""
    max_lag_s: float | None = None
    """Convergence-aware time scaling: hold the trace clock while the simulated cluster is more than
    this many trace seconds behind the recording (see :mod:`pipeline.replay.clock.governor`); None: never."""
    max_hold_s: float = 60.0
    """Wall seconds a hold may go on without the owners behind getting closer to the recording before
    they are given up on."""
    max_lag_tolerance: int = 1
    """Pods an owner may be off the recording without holding the clock (the fidelity bound)."""
    expect_profile: str | None = None
    """Refuse to replay unless the simulated cluster states this profile (``--expect-profile``)."""
    max_speed: bool = False
    """``--speed max``: ``speed`` is only where the trace clock starts; it speeds up while the cluster
    keeps up and slows down at each convergence hold (needs ``max_lag_s``); see
    :class:`~pipeline.replay.clock.sampler.SpeedSeeker`."""
    cleanup_timeout_s: float = 180.0
    cleanup_progress_every_s: float = 5.0
    """How often a long cleanup logs how far it is (thousands of pods take minutes)."""
    node_ready_timeout_s: float = 30.0
    node_settle_s: float = 1.0
    """Wait after the virtual nodes are Ready, before trace time starts (see
    :meth:`~pipeline.replay.setup.ReplaySetup.create_virtual_nodes`)."""
    namespace_ready_timeout_s: float = 10.0
    autoscaler_node_pools: tuple[Mapping[str, Any], ...] = ()
    """Karpenter NodePools (time settings already scaled, see ``autoscale_settings``) created for the
    replay; Karpenter must run against the cluster. Empty: fixed node pools only."""
    autoscaler_settings: tuple[ScaledSetting, ...] = ()
    """The autoscaler's time settings as given and as applied, for the report."""
    crds: tuple[Mapping[str, Any], ...] = ()
    """CustomResourceDefinitions (``--crd``) for the custom kinds the trace holds without their CRD."""
    prices: Mapping[str, float] | None = None
    """$/hour by instance type for the autoscaled run's cost (default: the nodes' price labels)."""
    pod_autoscaling: HpaReplay | None = None
    """The simulated HPA decides the recorded HPAs' owners (``--autoscaler hpa``): made by
    :meth:`pipeline.replay.run.ReplayRun.prepare` from the trace and its recorded load."""
    lifecycle_delays: LifecycleDelays = field(default_factory=LifecycleDelays)
    """SimKube's image-pull and pod-startup delays, in trace time; the pods' annotations carry them
    divided by ``speed`` (at ``max_speed``, the speed the clock starts at): :mod:`pipeline.replay.delays`."""

    def __post_init__(self) -> None:
        # the one check of the speed rules for every replay (the commands, the benchmarks, the tests)
        check_speed(
            self.speed,
            max_speed=self.max_speed,
            max_lag_s=self.max_lag_s,
            autoscaled=bool(self.autoscaler_node_pools) or self.pod_autoscaling is not None,
        )

    def settle(self, span_ms: float) -> tuple[float, str]:
        """The settle in trace ms, and where it comes from: ``settle_s`` when given, else ``max_lag_s``
        (the lag the governor keeps while the clock moves), else the default for a trace ``span_ms``
        long at the speed (:func:`~pipeline.replay.report.settle.default_settle_ms`)."""
        if self.settle_s is not None:
            return self.settle_s * 1000.0, "--settle"
        if self.max_lag_s is not None:
            return self.max_lag_s * 1000.0, "--max-lag"
        return default_settle_ms(self.speed, span_ms), default_settle_source(self.speed, span_ms)

    def resolved_name(self) -> str:
        return self.replay_name or f"replay-{uuid.uuid4().hex[:8]}"
