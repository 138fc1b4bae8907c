"""What one replay is asked to do (:class:`ReplaySpec`): the source, the simulated cluster, the
replayer's settings, the autoscalers, the hooks and the report; checked when it is made (the speed rules
of :mod:`pipeline.model.speed`, the sources' ranges), before anything is read or any cluster touched.
:class:`pipeline.replay.run.ReplayRun` does it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.formats.segment.content import Segment
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import ConfigError
from pipeline.model.keys import ClusterId
from pipeline.model.speed import check_speed
from pipeline.model.usage import UsageSample
from pipeline.replay.hooks import Hooks
from pipeline.replay.hpa.load import LoadModel
from pipeline.replay.hpa.overrides import HpaOverride
from pipeline.replay.settings import ReplaySettings


# ---- where the trace comes from ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TraceFile:
    """A kubetape trace or segment, or a SimKube trace: a local path or an http(s):// URL."""

    location: str

    def describe(self) -> str:
        return self.location


@dataclass(frozen=True, slots=True)
class LoadedTrace:
    """A trace already in memory (a benchmark's, a sweep's)."""

    trace: Segment
    name: str = "trace"

    def describe(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class SegmentRange:
    """``[start, end)`` of a sink's segment store (a directory or s3://bucket/prefix), assembled as
    ``kubetape export`` does. Times as ``--from``/``--to`` take them: -30m, now, epoch ms, ISO-8601."""

    store: str
    start: str
    end: str | None = None
    cluster: ClusterId | None = None
    config: Path | None = None
    """Tracer config (None: the built-in one)."""

    def describe(self) -> str:
        return f"segments {self.store} [{self.start}, {self.end or 'now'})"


@dataclass(frozen=True, slots=True)
class TopicRange:
    """``[start, end)`` of the events topic, read without a consumer group."""

    kafka: KafkaSettings
    topic: str
    start: str
    end: str | None = None
    cluster: ClusterId | None = None
    config: Path | None = None

    def describe(self) -> str:
        return f"topic {self.topic} on {self.kafka.bootstrap} [{self.start}, {self.end or 'now'})"


@dataclass(frozen=True, slots=True)
class TopicFollow:
    """The live topic shadowed ``lag_s`` behind, at speed 1, until stopped or past ``end``."""

    kafka: KafkaSettings
    topic: str
    lag_s: float = 30.0
    end: str | None = None
    cluster: ClusterId | None = None
    config: Path | None = None

    def __post_init__(self) -> None:
        if self.lag_s < 0:
            raise ConfigError(f"--lag must not be negative, got {self.lag_s}")

    def describe(self) -> str:
        return f"topic {self.topic} on {self.kafka.bootstrap}, following {self.lag_s:g} s behind"


ReplaySource = TraceFile | LoadedTrace | SegmentRange | TopicRange | TopicFollow


# ---- the rest of the spec -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TargetCluster:
    """The simulated cluster: its kubeconfig (None: the pod's service account, inside a cluster) and
    context (None: the current one)."""

    kubeconfig: Path | None = None
    context: str | None = None


@dataclass(frozen=True, slots=True)
class Autoscaling:
    """An autoscaler provisions the replay's nodes: its pools as written (their time settings are
    divided by the speed when the run starts), the prices for the report's cost, and the instance
    types it may launch (``instance_types_file``, else those of the Nodes the trace
    recorded, else the ones its process runs with)."""

    provider: str
    node_pool_files: tuple[Path, ...] = ()
    """``--nodepool`` files (YAML, several documents allowed), read when the run is prepared."""
    node_pools: tuple[tuple[str, tuple[Mapping[str, Any], ...]], ...] = ()
    """Pools in memory (a sweep's variants), in groups with where each came from."""
    prices: Mapping[str, float] | None = None
    instance_types_file: Path | None = None

    def __post_init__(self) -> None:
        if not self.node_pool_files and not any(pools for _, pools in self.node_pools):
            raise ConfigError(
                f"--autoscaler {self.provider} needs at least one --nodepool POOL.yaml (see examples/)"
            )


@dataclass(frozen=True, slots=True)
class PodAutoscaling:
    """The simulated HPA decides (``--autoscaler hpa``): the trace's HPAs are applied with their timers
    divided by the speed, the replicas production's HPA wrote are not replayed, and the recorded load
    drives the autoscaled owners' pods' usage under ``load_model`` (see :mod:`pipeline.replay.hpa`)."""

    load_model: LoadModel = LoadModel.CONSERVE
    usage: tuple[UsageSample, ...] = ()
    """Recorded load handed over beside the trace (a test's, a benchmark's); the trace's own samples
    are added to it (:func:`recorded_usage`)."""
    overrides: tuple[HpaOverride, ...] = ()
    """A what-if's settings for the recorded HPAs (a sweep's point: :mod:`pipeline.replay.hpa.overrides`)."""


def recorded_usage(trace: Segment, given: tuple[UsageSample, ...]) -> tuple[UsageSample, ...]:
    """The recorded load a replay drives the pods with: the trace's own usage samples (a trace file's,
    a store window's, a topic range's: each source reads them, see
    :func:`pipeline.replay.read_source.read_source`), and ``given`` beside them."""
    return (*trace.usage, *given)


@dataclass(frozen=True, slots=True)
class ReportOutput:
    """Where the report goes: ``json_path`` (None: printed only); ``require_fidelity``: the run fails
    unless the fidelity verdict is 'held'."""

    json_path: Path | None = None
    require_fidelity: bool = False


@dataclass(frozen=True, slots=True)
class ReplaySpec:
    """Everything one replay needs: the source, the simulated cluster, the replayer's settings (speed and
    clock, sampling, fixed node pools, names, writes), the autoscaler, the report. Made by the commands
    from their flags and by the benchmarks; checked here, once."""

    source: ReplaySource
    settings: ReplaySettings = field(default_factory=ReplaySettings)
    cluster: TargetCluster = field(default_factory=TargetCluster)
    autoscaling: Autoscaling | None = None
    report: ReportOutput = field(default_factory=ReportOutput)
    hooks: Hooks = field(default_factory=Hooks)
    """Commands run at SimKube's four hook points (:mod:`pipeline.replay.hooks`), by :meth:`ReplayRun.run`."""
    pod_autoscaling: PodAutoscaling | None = None
    """The simulated HPA decides the recorded HPAs' owners (``--autoscaler hpa``)."""

    def __post_init__(self) -> None:
        s = self.settings
        check_speed(
            s.speed,
            max_speed=s.max_speed,
            max_lag_s=s.max_lag_s,
            autoscaled=self.autoscaling is not None or self.pod_autoscaling is not None,
            follow=isinstance(self.source, TopicFollow),
        )
        if self.pod_autoscaling is not None and isinstance(self.source, TopicFollow):
            raise ConfigError(
                "--autoscaler hpa replays a recorded range (a trace, --segments or a topic range): "
                "following a live topic, production's HPA already decides the replicas it replays"
            )
