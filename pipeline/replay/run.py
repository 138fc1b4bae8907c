"""One replay, however it is asked for: :class:`ReplaySpec` says what to replay where and how,
:class:`ReplayRun` does it.

``kubetape replay`` and ``kubetape sweep`` only turn their flags into a spec; the Simulation controller's
Jobs run ``kubetape replay``; the benchmarks build specs of their own. So picking the source, restarting
the autoscaler with scaled timers, connecting, handling signals and judging the node counts happen here
once. The spec is checked when it is made (the speed rules of :mod:`pipeline.model.speed`, the sources'
ranges), before anything is read or any cluster touched.

A run has two phases: :meth:`ReplayRun.prepare` reads the source and plans the replay (an autoscaled
one drops the recorded autoscaler's nodes, keeping their counts as the reference, and has the
autoscaler's process restarted at the replay's speed); :meth:`ReplayRun.session` connects to the
simulated cluster and makes the :class:`~pipeline.replay.replayer.Replayer`, whose
:meth:`ReplaySession.run` replays and judges.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pipeline.formats.segment.content import Segment
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kube.client import KubeClient
from pipeline.model.errors import ConfigError
from pipeline.model.keys import ClusterId
from pipeline.model.speed import check_speed
from pipeline.model.usage import UsageSample
from pipeline.replay.autoscale.nodes import judge_node_counts, without_autoscaler_nodes
from pipeline.replay.autoscale.settings import ScaledSetting
from pipeline.replay.hooks import HookRunner, Hooks, run_environment
from pipeline.replay.hpa.load import LoadModel, RecordedLoad
from pipeline.replay.hpa.replay import HpaReplay
from pipeline.replay.hpa.targets import plan_hpas
from pipeline.replay.hpa.timing import unscaled_hpa_process_timers
from pipeline.replay.inputs import instance_types_for, read_node_pools, scale_node_pools
from pipeline.replay.plan import ReplayPlan, plan_replay
from pipeline.replay.ports import AutoscalerProcess, PodAutoscalerProcess
from pipeline.replay.replayer import Replayer
from pipeline.replay.report.report import ReplayProgress, ReplayReport
from pipeline.replay.settings import ReplaySettings
from pipeline.replay.sources import FollowSource, Warn


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


def recorded_usage(trace: Segment, given: tuple[UsageSample, ...]) -> tuple[UsageSample, ...]:
    """The recorded load a replay drives the pods with: ``given``, and the trace's usage samples once
    the trace carries them (issue 36's recording, which lands separately)."""
    return given


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


# ---- the run --------------------------------------------------------------------------------------
def _warn(message: str) -> None:
    print(f"kubetape: warning: {message}", file=sys.stderr)


Beside = Callable[[Replayer, KubeClient], Coroutine[Any, Any, None]]
"""Runs beside the replayer until it ends (the sweep's observer, a benchmark's sampler)."""


class ReplayRun:
    """One replay of ``spec``. ``autoscaler`` restarts the autoscaler's process at the replay's speed
    (None: its timers are reported as not scaled), ``pod_autoscaler`` the HPA's controller and
    metrics-server likewise; ``on_progress`` gets the replayer's progress."""

    def __init__(
        self,
        spec: ReplaySpec,
        *,
        autoscaler: AutoscalerProcess | None = None,
        pod_autoscaler: PodAutoscalerProcess | None = None,
        on_progress: Callable[[ReplayProgress], None] | None = None,
        warn: Warn = _warn,
    ) -> None:
        self.spec = spec
        self._autoscaler = autoscaler
        self._pod_autoscaler = pod_autoscaler
        self._on_progress = on_progress
        self._warn = warn
        # the name is fixed now so that the hooks and the replayer see the same one
        self.settings = dataclasses.replace(spec.settings, replay_name=spec.settings.resolved_name())
        """The replayer's settings as run: the spec's, with the autoscaler's scaled pools and timers."""
        self.hooks = HookRunner(spec.hooks, self._hook_environment())
        """The hooks' runner; its results go into the report."""
        self.trace: Segment | None = None
        """The trace read (None until :meth:`prepare`, and when following a live topic)."""
        self.plan: ReplayPlan | None = None
        self.recorded_nodes: list[tuple[int, int]] = []
        """The recorded autoscaler's node count over time (the reference of an autoscaled replay)."""
        self._follow: FollowSource | None = None

    @property
    def span_ms(self) -> int:
        """Trace time the replay covers: the duration asked for, else the trace's."""
        assert self.plan is not None, "prepare() first"
        if self.settings.duration_ms is not None:
            return self.settings.duration_ms
        return self.plan.end_ms - self.plan.start_ms

    async def prepare(self) -> ReplayPlan:
        """Read the source and plan the replay; scale the autoscaler's pools and restart its process."""
        source = self.spec.source
        pools, scaled = self._scaled_node_pools()  # bad pool files are reported before the trace is read
        if isinstance(source, TopicFollow):
            self._follow = FollowSource(
                source.kafka,
                source.topic,
                round(source.lag_s * 1000),
                config=_tracer_config(source.config),
                warn=self._warn,
                cluster=source.cluster,
            )
            plan = await self._follow.initial_plan()
            if self.spec.autoscaling is not None:
                await self._start_autoscaler(pools, scaled, None)
        else:
            self.trace = await self._read(source)
            plan = plan_replay(self.trace, self.settings.speed)
            if self.spec.autoscaling is not None:  # the simulated autoscaler makes the nodes
                await self._start_autoscaler(pools, scaled, plan)
                # the recorded autoscaler's nodes are the reference, not part of the replay
                plan, self.recorded_nodes = without_autoscaler_nodes(plan)
            if self.spec.pod_autoscaling is not None:
                plan = await self._hand_to_the_hpa(self.trace, plan, self.spec.pod_autoscaling)
        self.plan = plan
        return plan

    async def _hand_to_the_hpa(self, trace: Segment, plan: ReplayPlan, asked: PodAutoscaling) -> ReplayPlan:
        """The plan without the recorded HPAs' replica writes; the settings with the HPAs' plan, the
        recorded load and the process timers (restarted at the speed by ``pod_autoscaler``). The
        replay runs to the trace's end: the load goes on after the last recorded write."""
        speed = self.settings.speed
        steps, hpas = plan_hpas(plan.steps, speed)
        load = RecordedLoad.from_samples(recorded_usage(trace, asked.usage), hpas.owners)
        if self._pod_autoscaler is None:
            process = unscaled_hpa_process_timers(
                "not scaled: the simulated cluster's kube-controller-manager and metrics-server run as "
                "deployed"
            )
        else:  # restarting processes blocks: off the event loop
            process = await asyncio.to_thread(self._pod_autoscaler.restart_at, speed)
        self.settings = dataclasses.replace(
            self.settings,
            pod_autoscaling=HpaReplay(hpas, load, asked.load_model, tuple(process)),
            duration_ms=self.settings.duration_ms
            if self.settings.duration_ms is not None
            else plan.end_ms - plan.start_ms,
        )
        return dataclasses.replace(plan, steps=steps)

    def _scaled_node_pools(self) -> tuple[list[Mapping[str, Any]], list[ScaledSetting]]:
        """The autoscaler's pools with their time settings divided by the speed, and each setting."""
        autoscaling = self.spec.autoscaling
        if autoscaling is None:
            return [], []
        groups = [(str(path), read_node_pools(path)) for path in autoscaling.node_pool_files]
        groups += [(where, [dict(p) for p in group]) for where, group in autoscaling.node_pools]
        pools: list[Mapping[str, Any]] = []
        scaled: list[ScaledSetting] = []
        for where, group in groups:
            more_pools, more_settings = scale_node_pools(
                group, self.settings.speed, where, autoscaling.provider
            )
            pools += more_pools
            scaled += more_settings
        return pools, scaled

    async def _start_autoscaler(
        self, pools: list[Mapping[str, Any]], scaled: list[ScaledSetting], plan: ReplayPlan | None
    ) -> None:
        """Restart the autoscaler's process at the speed, offering the instance types (from the file,
        else the Nodes ``plan`` recorded), and put the pools and settings into the replayer's settings."""
        autoscaling = self.spec.autoscaling
        assert autoscaling is not None
        types = instance_types_for(autoscaling.instance_types_file, plan, autoscaling.prices)
        if self._autoscaler is not None:  # restarting a process blocks: off the event loop
            scaled = scaled + await asyncio.to_thread(self._autoscaler.restart_at, self.settings.speed, types)
        self.settings = dataclasses.replace(
            self.settings,
            autoscaler_node_pools=tuple(pools),
            autoscaler_settings=(*self.settings.autoscaler_settings, *scaled),
            prices=autoscaling.prices,
        )

    async def _read(self, source: ReplaySource) -> Segment:
        from pipeline.formats.trace import read_trace, trace_from_bytes

        if isinstance(source, LoadedTrace):
            return source.trace
        if isinstance(source, TraceFile):
            if source.location.startswith(("http://", "https://")):
                from pipeline.io.fetch import fetch_bytes

                return trace_from_bytes(await fetch_bytes(source.location), source.location)
            return read_trace(Path(source.location))
        assert not isinstance(source, TopicFollow)  # prepare() follows it
        start_ms, end_ms = _range_ms(source.start, source.end)
        if isinstance(source, SegmentRange):
            return read_segment_range(
                source.store, start_ms, end_ms, cluster=source.cluster, config=source.config, warn=self._warn
            )
        assert isinstance(source, TopicRange)
        from pipeline.replay.sources import read_topic_trace

        return await read_topic_trace(
            source.kafka,
            source.topic,
            start_ms,
            end_ms,
            config=_tracer_config(source.config),
            warn=self._warn,
            cluster=source.cluster,
        )

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[ReplaySession]:
        """Connected to the simulated cluster, with the replayer made (after :meth:`prepare`)."""
        from pipeline.io.kube.connect import kube_api
        from pipeline.io.kube.pod_watch import PodWatch

        if self.plan is None:
            await self.prepare()
        assert self.plan is not None
        cluster = self.spec.cluster
        async with kube_api(cluster.kubeconfig, cluster.context) as api:
            client = KubeClient(api)
            replayer = Replayer(
                client,
                self.plan,
                self.settings,
                source=self.spec.source.describe(),
                on_progress=self._on_progress,
                pod_watch=partial(PodWatch, api),
            )
            yield ReplaySession(self, replayer, client)

    async def run(self, *, handle_signals: bool = False, beside: Beside | None = None) -> ReplayReport:
        """Run the preStart hooks, prepare, connect, run the preRun hooks, replay and judge, run the postRun
        hooks, disconnect, run the postStop hooks; the report (written to the spec's JSON path, if any).
        A failing pre hook raises :class:`~pipeline.replay.hooks.HookError`; post hooks' failures are in
        the report."""
        await self.hooks.run("preStart")
        try:
            async with self.session() as session:
                await self.hooks.run("preRun")
                report = await session.run(handle_signals=handle_signals, beside=beside)
                await self.hooks.run("postRun")
        finally:  # as SimKube's: after the run stopped, however it stopped
            await self.hooks.run("postStop")
        report.hooks = [result.to_json() for result in self.hooks.results]
        self.write_report(report)
        return report

    def _hook_environment(self) -> dict[str, str]:
        cluster = self.spec.cluster
        return run_environment(
            speed=self.settings.speed,
            replay_name=self.settings.replay_name,
            kubeconfig=cluster.kubeconfig,
            context=cluster.context,
            source=self.spec.source.describe(),
        )

    def write_report(self, report: ReplayReport) -> None:
        if self.spec.report.json_path is not None:
            self.spec.report.json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")

    def fidelity_problem(self, report: ReplayReport) -> str | None:
        """Why the run fails with ``require_fidelity`` (None: it does not)."""
        verdict = report.verdict().verdict
        if self.spec.report.require_fidelity and verdict != "held":
            return f"--require-fidelity: the fidelity verdict is {verdict!r}, not 'held'"
        return None


@dataclass(slots=True)
class ReplaySession:
    """A prepared run, connected: its replayer and the simulated cluster's client."""

    run_of: ReplayRun
    replayer: Replayer
    cluster: KubeClient

    async def run(self, *, handle_signals: bool = False, beside: Beside | None = None) -> ReplayReport:
        """Replay (follow the live topic, for a :class:`TopicFollow`) and judge the node counts.

        With ``handle_signals``: SIGINT or SIGTERM stops starting new events, lets started ones finish
        and still cleans up; a second abandons the wait for started events (cleanup still runs); SIGUSR1
        pauses the trace clock and SIGUSR2 resumes it."""
        replayer = self.replayer
        loop = asyncio.get_running_loop()
        if handle_signals:
            _install_signals(loop, replayer)
        besides = None if beside is None else asyncio.create_task(beside(replayer, self.cluster))
        try:
            report = await self._replay(loop)
        finally:
            if besides is not None:
                besides.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await besides
            if handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
                    loop.remove_signal_handler(sig)
        run = self.run_of
        if run.recorded_nodes:
            judge_node_counts(report, run.recorded_nodes, run.settings.speed, run.span_ms)
        return report

    async def _replay(self, loop: asyncio.AbstractEventLoop) -> ReplayReport:
        replayer = self.replayer
        follow = self.run_of._follow
        source = self.run_of.spec.source
        try:
            if follow is None:
                return await replayer.run()
            assert isinstance(source, TopicFollow)
            if source.end is not None:  # follow until the live topic passes the end (plus the lag)
                wall_left_s = (_time_ms(source.end, "--to") + follow.lag_ms) / 1000 - time.time()
                loop.call_later(max(wall_left_s, 0.0), replayer.finish)
            return await replayer.run(follow.steps(), first_due_at=follow.first_due_at(time.monotonic()))
        except asyncio.CancelledError:
            return replayer.report


def _install_signals(loop: asyncio.AbstractEventLoop, replayer: Replayer) -> None:
    task = asyncio.current_task()
    signals = 0

    def interrupt() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            print("[replay] stopping: no new events, then cleanup (again: hurry)", file=sys.stderr)
            replayer.stop()
        elif signals == 2 and task is not None:
            print("[replay] abandoning started events; cleaning up", file=sys.stderr)
            task.cancel()  # Replayer.run still deletes the root after this cancellation
        else:
            print("[replay] cleanup in progress; kill -9 leaves the objects behind", file=sys.stderr)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    loop.add_signal_handler(signal.SIGUSR1, replayer.pause)
    loop.add_signal_handler(signal.SIGUSR2, replayer.resume)


# ---- reading a range ------------------------------------------------------------------------------
def _tracer_config(path: Path | None) -> Any:
    from pipeline.model.tracer_config import load_tracer_config

    return load_tracer_config(path) if path is not None else None


def _time_ms(text: str, what: str) -> int:
    from pipeline.model.timespec import parse_time

    return parse_time(text, where=what)


def _range_ms(start: str, end: str | None) -> tuple[int, int]:
    return _time_ms(start, "--from"), _time_ms(end or "now", "--to")


def read_segment_range(
    store: str,
    start_ms: int,
    end_ms: int,
    *,
    cluster: str | None = None,
    config: Path | None = None,
    warn: Warn = _warn,
) -> Segment:
    """The trace of ``[start_ms, end_ms)`` of ``cluster`` in a segment store (a directory or
    s3://bucket/prefix): the same assembly as ``kubetape export``, so a range replays as its exported
    file would."""
    from pipeline.store.catalog import SegmentCatalog
    from pipeline.store.export import ExportRequest, window_trace
    from pipeline.store.store_url import cluster_location, open_segment_store, parse_store_url

    location = cluster_location(parse_store_url(store, what="--segments"), cluster)
    catalog = SegmentCatalog(open_segment_store(location, must_exist=True))
    return window_trace(catalog, ExportRequest(start_ms, end_ms, config=_tracer_config(config)), warn)
