"""One replay, however it is asked for: :class:`ReplaySpec` says what to replay where and how,
:class:`ReplayRun` does it.

``kubetape replay`` and ``kubetape sweep`` only turn their flags into a spec; the Simulation controller's
Jobs run ``kubetape replay``; the benchmarks build specs of their own. So picking the source, restarting
the autoscaler with scaled timers, connecting, handling signals and judging the node counts happen here
once. The spec (:mod:`pipeline.replay.spec`) is checked when it is made, before anything is read or any
cluster touched; :mod:`pipeline.replay.read_source` reads its source.

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
from dataclasses import dataclass
from functools import partial
from typing import Any

from pipeline.formats.segment.content import Segment
from pipeline.io.kube.client import KubeClient
from pipeline.replay.autoscale.nodes import judge_node_counts, without_autoscaler_nodes
from pipeline.replay.autoscale.settings import ScaledSetting
from pipeline.replay.hooks import HookRunner, run_environment
from pipeline.replay.hpa.load import RecordedLoad
from pipeline.replay.hpa.reaction import reaction_time_ms
from pipeline.replay.hpa.replay import HpaReplay
from pipeline.replay.hpa.targets import plan_hpas
from pipeline.replay.hpa.timing import (
    HpaProcessTimers,
    applied_process_timers,
    unscaled_hpa_process_timers,
)
from pipeline.replay.inputs import instance_types_for, read_node_pools, scale_node_pools
from pipeline.replay.plan import ReplayPlan, plan_replay
from pipeline.replay.ports import AutoscalerProcess, PodAutoscalerProcess
from pipeline.replay.read_source import (
    read_segment_range,
    read_source,
    time_ms,
    tracer_config,
    warn_on_stderr,
)
from pipeline.replay.replayer import Replayer
from pipeline.replay.report.report import ReplayProgress, ReplayReport
from pipeline.replay.sources import FollowSource, Warn
from pipeline.replay.spec import (
    Autoscaling,
    LoadedTrace,
    PodAutoscaling,
    ReplaySource,
    ReplaySpec,
    ReportOutput,
    SegmentRange,
    TargetCluster,
    TopicFollow,
    TopicRange,
    TraceFile,
    recorded_usage,
)

__all__ = [  # the spec's names, and reading a store's range, stay importable from here
    "Autoscaling",
    "Beside",
    "LoadedTrace",
    "PodAutoscaling",
    "ReplayRun",
    "ReplaySession",
    "ReplaySource",
    "ReplaySpec",
    "ReportOutput",
    "SegmentRange",
    "TargetCluster",
    "TopicFollow",
    "TopicRange",
    "TraceFile",
    "read_segment_range",
]


# ---- the run --------------------------------------------------------------------------------------
Beside = Callable[[Replayer, KubeClient], Coroutine[Any, Any, None]]
"""Runs beside the replayer until it ends (the sweep's observer, a benchmark's sampler)."""


class ReplayRun:
    """One replay of ``spec``. ``autoscaler`` restarts the autoscaler's process at the replay's speed
    (None: its timers are reported as not scaled), ``pod_autoscaler`` the HPA's controller and
    metrics-server likewise (at speed 1, their defaults, for a replay without the HPA deciding);
    ``on_progress`` gets the replayer's progress."""

    def __init__(
        self,
        spec: ReplaySpec,
        *,
        autoscaler: AutoscalerProcess | None = None,
        pod_autoscaler: PodAutoscalerProcess | None = None,
        on_progress: Callable[[ReplayProgress], None] | None = None,
        warn: Warn = warn_on_stderr,
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
        return self.plan.span_ms

    async def prepare(self) -> ReplayPlan:
        """Read the source and plan the replay; scale the autoscaler's pools and restart its process."""
        source = self.spec.source
        pools, scaled = self._scaled_node_pools()  # bad pool files are reported before the trace is read
        if self.spec.pod_autoscaling is None and self._pod_autoscaler is not None:
            # no HPA decides in this replay: its processes run their defaults, not the timers an
            # earlier replay scaled (no restart when they already do)
            await asyncio.to_thread(self._pod_autoscaler.restart_at, 1.0)
        if isinstance(source, TopicFollow):
            self._follow = FollowSource(
                source.kafka,
                source.topic,
                round(source.lag_s * 1000),
                config=tracer_config(source.config),
                warn=self._warn,
                cluster=source.cluster,
            )
            plan = await self._follow.initial_plan()
            if self.spec.autoscaling is not None:
                await self._start_autoscaler(pools, scaled, None)
        else:
            self.trace = await read_source(source, self._warn)
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
        replay runs to the trace's end, as every replay of a trace does (``ReplayPlan.span_ms``): the
        load goes on after the last recorded write."""
        speed = self.settings.speed
        steps, hpas = plan_hpas(plan.steps, speed, asked.overrides)
        load = RecordedLoad.from_samples(recorded_usage(trace, asked.usage), hpas.owners)
        if self._pod_autoscaler is None:
            process = unscaled_hpa_process_timers(
                "not scaled: the simulated cluster's kube-controller-manager and metrics-server run as "
                "deployed"
            )
            applied = HpaProcessTimers()  # as deployed: Kubernetes' and metrics-server's defaults
        else:  # restarting processes blocks: off the event loop
            process = await asyncio.to_thread(self._pod_autoscaler.restart_at, speed)
            # what runs: a cluster the port cannot restart keeps its defaults, and R must say so
            applied = applied_process_timers(process)
        self.settings = dataclasses.replace(
            self.settings,
            pod_autoscaling=HpaReplay(
                hpas, load, asked.load_model, tuple(process), reaction_time_ms(speed, applied), speed
            ),
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
                wall_left_s = (time_ms(source.end, "--to") + follow.lag_ms) / 1000 - time.time()
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
