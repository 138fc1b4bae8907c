"""The replayer: a trace file → rewritten objects → applied at scaled times → a fidelity report.

One replay, step by step:

1. :func:`pipeline.formats.trace.read_trace` reads a kubetape trace/segment or a SimKube trace (v1 or v2,
   msgpack or JSON).
2. :func:`~pipeline.replay.plan.plan_replay` turns its APPLIED/DELETED events into scheduler steps and
   its POD_LIFECYCLE events into pod lifetimes (already divided by the speed) and the recorded
   running-pods timeline.
3. :class:`~pipeline.replay.setup.ReplaySetup` creates the root, the virtual nodes and node pools,
   and the trace's namespaces.
4. The :class:`~pipeline.replay.clock.schedule.Scheduler` runs the steps at their scaled times; each is
   rewritten and written by :class:`~pipeline.replay.apply.StepWriter`, while the
   :class:`~pipeline.replay.clock.sampler.Sampler` samples the replay's pods every ``sample_interval_s``
   (and holds the trace clock when the cluster falls behind, with ``max_lag_s``).
5. Unless ``keep``, the root is deleted in the foreground and the replayer waits until it is gone,
   which is when the garbage collector has deleted everything it owns.

:class:`Replayer` composes these and owns the run's lifecycle: setup, trace time, cleanup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from pipeline.model.errors import KubeApiError
from pipeline.model.events import Event
from pipeline.replay.apply import Retrying, StepWriter
from pipeline.replay.autoscale.figures import AutoscaleFigures
from pipeline.replay.clock.governor import ConvergenceGovernor
from pipeline.replay.clock.sampler import ListedPods, PodSource, Sampler, SpeedSeeker, WatchedPods
from pipeline.replay.clock.schedule import Clock, MonotonicClock, ScheduledStep, Scheduler, pause
from pipeline.replay.delays import delay_annotations
from pipeline.replay.hpa.replay import HpaWrites, UsageDriver
from pipeline.replay.plan import ReplayPlan
from pipeline.replay.ports import PodWatchFactory, ReplayCluster
from pipeline.replay.report.report import ReplayProgress, ReplayReport
from pipeline.replay.rewrite import REPLAY_LABEL, RewriteSettings, RootRef, namespace_is_replays
from pipeline.replay.settings import ReplaySettings
from pipeline.replay.setup import (
    ROOT_API_VERSION,
    ROOT_KIND,
    Namespaces,
    ReplaySetup,
    check_profile,
    note_zoned_nodes,
    read_cluster_profile,
)

log = logging.getLogger(__name__)


def _new_report(name: str, source: str, plan: ReplayPlan, settings: ReplaySettings) -> ReplayReport:
    report = ReplayReport(name, source, settings.speed, steps=len(plan.steps), gaps=plan.gaps)
    report.recorded_timeline = list(plan.recorded_running)
    report.recorded_by_owner = dict(plan.recorded_by_owner or {})
    report.speed_mode = "max" if settings.max_speed else "fixed"
    report.resolution_wall_s = settings.fidelity_resolution_s
    report.desired_owners = plan.desired_owners
    hpa = settings.pod_autoscaling
    if hpa is not None:  # judged over the HPA's reaction time (pipeline.replay.report.fidelity)
        report.hpa_reactions = {str(owner): hpa.reaction_ms for owner in hpa.plan.owners}
    if settings.duration_ms is not None:
        report.trace_span_ms, report.trace_end = settings.duration_ms, "--duration"
    else:
        report.trace_span_ms, report.trace_end = plan.span_ms, "the trace's end"
    # bounded by the trace: a settle longer than its steps forgives a skipped one (issue 46)
    report.settle_ms, report.settle_from = settings.settle(report.trace_span_ms)
    report.last_event_ms = plan.last_step_ms
    return report


class Replayer:
    """Replays one planned trace into one cluster; :meth:`run` returns the report.

    ``pod_watch`` makes a pod watch of the cluster (``functools.partial(PodWatch, api)``, see
    :class:`pipeline.io.kube.pod_watch.PodWatch`): each sample is then a read of counts kept from it, however
    many pods there are. Without one, every sample lists the replay's pods."""

    def __init__(
        self,
        cluster: ReplayCluster,
        plan: ReplayPlan,
        settings: ReplaySettings,
        *,
        source: str = "trace",
        clock: Clock | None = None,
        on_progress: Callable[[ReplayProgress], None] | None = None,
        pod_watch: PodWatchFactory | None = None,
    ) -> None:
        self._cluster = cluster
        self._plan = plan
        self.settings = settings
        self.name = settings.resolved_name()
        self._clock = clock or MonotonicClock()
        self.report = _new_report(self.name, source, plan, settings)
        self._rewrite = RewriteSettings(
            replay_name=self.name,
            namespace_prefix=settings.namespace_prefix,
            config=plan.config,
            suspended_cronjobs=plan.cronjobs_with_jobs,
            pod_annotations=delay_annotations(settings.lifecycle_delays, settings.speed),
        )
        retrying = Retrying(
            self._clock,
            self.report,
            retries=settings.apply_retries,
            qps=settings.qps,
            burst=settings.max_in_flight,
        )
        self._namespaces = Namespaces(
            cluster, self._rewrite, retrying, self._clock, ready_timeout_s=settings.namespace_ready_timeout_s
        )
        self._setup = ReplaySetup(
            cluster,
            settings,
            self._rewrite,
            namespaces=self._namespaces,
            retrying=retrying,
            clock=self._clock,
        )
        self._writer = StepWriter(
            cluster,
            plan,
            self._rewrite,
            ensure_namespace=self._namespaces.ensure,
            retrying=retrying,
            report=self.report,
            hpa_writes=None
            if settings.pod_autoscaling is None
            else HpaWrites(cluster, settings.pod_autoscaling, settings.speed),
        )
        self._scheduler: Scheduler[Event] = Scheduler(
            self._writer.run_step,
            speed=settings.speed,
            max_in_flight=settings.max_in_flight,
            duration_ms=settings.duration_ms,
            clock=self._clock,
        )
        pod_source: PodSource = (
            ListedPods(cluster, self.name)
            if pod_watch is None
            else WatchedPods(pod_watch(REPLAY_LABEL, self.name), self._clock)
        )
        self._governor = (
            None
            if settings.max_lag_s is None
            else ConvergenceGovernor(
                self.report.recorded_by_owner,
                max_lag_ms=settings.max_lag_s * 1000.0,
                max_hold_s=settings.max_hold_s,
                tolerance=settings.max_lag_tolerance,
            )
        )
        self._sampler = Sampler(
            cluster,
            pod_source,
            self._scheduler,
            self.report,
            self._clock,
            interval_s=settings.sample_interval_s,
            governor=self._governor,
            seeker=SpeedSeeker(settings.speed) if settings.max_speed else None,
            autoscale=AutoscaleFigures(settings.speed, dict(settings.prices or {}))
            if settings.autoscaler_node_pools
            else None,
            on_progress=on_progress,
            steps_total=len(plan.steps),
        )
        self._usage = (
            None
            if settings.pod_autoscaling is None
            else UsageDriver(
                cluster,
                settings.pod_autoscaling,
                self.name,
                lambda: plan.start_ms + self._scheduler.sim_elapsed_ms(),
                self._clock,
            )
        )
        """With the simulated HPA deciding: writes the recorded load onto the owners' pods."""
        self._root: RootRef | None = None
        self._stop_requested = asyncio.Event()

    def stop(self) -> None:
        """Graceful stop: no new step starts; started ones finish; cleanup still runs."""
        self.report.stopped_early = True
        self.finish()

    def finish(self) -> None:
        """End a followed stream where it is (its planned end, not an interruption)."""
        self._stop_requested.set()
        self._scheduler.stop()

    def trace_elapsed_ms(self) -> float:
        """Trace time covered so far (pauses and convergence holds excluded), in ms since the start."""
        return self._scheduler.sim_elapsed_ms()

    @property
    def trace_started_at(self) -> float | None:
        """The clock instant trace time started (after setup), for callers timing the replay."""
        return self._scheduler.started_at

    def pause(self) -> None:
        self._scheduler.pause()

    def resume(self) -> None:
        self._scheduler.resume()

    async def run(
        self,
        stream: AsyncIterator[ScheduledStep[Event]] | None = None,
        *,
        first_due_at: Callable[[int], float] | None = None,
    ) -> ReplayReport:
        """Replay the plan's steps, or ``stream`` (following a live topic: the plan then holds only the
        initial state and the learnt lifetimes) anchored by ``first_due_at``; see
        :meth:`Scheduler.run <pipeline.replay.clock.schedule.Scheduler.run>`."""
        started = self._sampler.started = self._clock.now()
        try:
            await self._set_up()
            self.report.setup_seconds = self._clock.now() - started
            await self._run_trace_time(stream, first_due_at)
        finally:
            self.report.wall_seconds = self._clock.now() - started
            if self._root is not None and not self.settings.keep:
                # also after a cancellation (a second Ctrl-C): the cancel was delivered at the await
                # that raised, so this await runs; only a further cancel interrupts the cleanup
                await self.cleanup()
            elif self._root is not None:
                self.report.cleanup = f"kept (delete {ROOT_KIND} {self._root.name} to remove everything)"
        return self.report

    async def _set_up(self) -> None:
        self._root = await self._setup.create_root()
        self._writer.root = self._namespaces.root = self._sampler.root = self._root
        self.report.cluster_profile = await read_cluster_profile(self._cluster)
        check_profile(self.settings.expect_profile, self.report.cluster_profile)
        await self._setup.create_virtual_nodes(self._root)
        await note_zoned_nodes(self._cluster, self.report.cluster_profile)
        await self._setup.create_node_pools(self._root)
        self._sampler.autoscaler_pools = self._setup.node_pool_names
        await self._setup.prepare(self._plan)
        if self._sampler.autoscale is not None:
            # the autoscaler's nodes before trace time starts (a pool may keep a minimum)
            await self._sampler.sample_autoscaler(0.0, self._clock.now())

    async def _run_trace_time(
        self,
        stream: AsyncIterator[ScheduledStep[Event]] | None,
        first_due_at: Callable[[int], float] | None,
    ) -> None:
        await self._sampler.pods.start()
        try:
            sampling = asyncio.create_task(self._sampler.sample_forever(), name=f"replay-sampler {self.name}")
            driving = (
                None
                if self._usage is None
                else asyncio.create_task(self._usage.run_forever(), name=f"replay-usage {self.name}")
            )
            try:
                if stream is not None:
                    self.report.steps = 0  # counted as the stream yields them
                    self.report.trace_end, self.report.last_event_ms = "the live topic's end", None
                    # a live topic has no span to bound the settle by: the default's longest
                    self.report.settle_ms, self.report.settle_from = self.settings.settle(float("inf"))
                elif self.settings.duration_ms is None:
                    # a trace runs to its end, not to its last event (ReplayPlan.span_ms); a live
                    # stream has no end of its own, and --duration says where to end itself
                    self._scheduler.duration_ms = self._plan.span_ms
                steps = self._plan.steps if stream is None else self._until_stopped(stream)
                stats = await self._scheduler.run(steps, first_due_at=first_due_at)
            finally:
                for task in (sampling, driving):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
            await self._sampler.sample_to_the_end()
            # and the autoscaler's nodes, added since
            await note_zoned_nodes(self._cluster, self.report.cluster_profile)
        finally:
            await self._sampler.pods.stop()
        self._finish_report()
        self.report.lateness_ms = list(stats.lateness_ms)
        self.report.lateness_count = stats.lateness_count
        self.report.lateness_max_ms = stats.lateness_max_ms
        self.report.skipped_after_duration = stats.skipped_after_duration
        self.report.not_started = stats.not_started

    def _finish_report(self) -> None:
        """The convergence governor's and the autoscaler's figures, once trace time is over."""
        if self._governor is not None:
            self._governor.finish(self._clock.now())
            self.report.convergence = self._governor.report.to_json(
                self._governor.max_lag_ms, self.settings.speed
            )
            if self.settings.max_speed:
                self._state_achieved_speed()
        if self._usage is not None:
            self.report.pod_autoscaling = self._usage.report()
        autoscale = self._sampler.autoscale
        if autoscale is not None:
            self.report.autoscale = {
                "autoscaler": "karpenter",
                "node_pools": list(self._setup.node_pool_names),
                "settings": [s.to_json() for s in self.settings.autoscaler_settings],
                **autoscale.to_json(),
            }
            self.report.autoscale_summary = autoscale.summary_lines()

    def _state_achieved_speed(self) -> None:
        """At ``--speed max`` the report's speed is the one the run achieved overall, and the report
        keeps the clock's path. The settle stays what it was, in trace time: a window that followed
        the clock's speed forgave a faster clock more (issue 33)."""
        assert self.report.convergence is not None
        assert self._governor is not None
        achieved = self.report.convergence["achieved_speed"]["overall"]
        self.report.convergence["achieved_speed"]["requested"] = "max"
        if achieved:
            self.report.speed = achieved
        self.report.clock_path = list(self._governor.report.achieved)

    async def _until_stopped(
        self, stream: AsyncIterator[ScheduledStep[Event]]
    ) -> AsyncIterator[ScheduledStep[Event]]:
        """``stream`` until it ends or :meth:`stop` is called, even while it waits for the next event."""
        stopped = asyncio.ensure_future(self._stop_requested.wait())
        try:
            while not stopped.done():
                following = asyncio.ensure_future(anext(stream))
                await asyncio.wait({following, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not following.done():
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await following
                    return
                try:
                    step = following.result()
                except StopAsyncIteration:
                    return
                self.report.steps += 1
                yield step
        finally:
            stopped.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopped

    # ---- cleanup ----------------------------------------------------------------------------------
    async def cleanup(self) -> None:
        """Delete the root (foreground) and wait until the garbage collector removed everything.

        The replay's own namespaces go first, while the virtual nodes still exist: KWOK finishes the
        deletion of pods on nodes it manages at once, but a pod whose node was deleted first stays
        Terminating until the pod garbage collector removes it, about a minute later."""
        assert self._root is not None
        begun = self._clock.now()
        deadline = begun + self.settings.cleanup_timeout_s
        try:
            await self._delete_own_namespaces(deadline)
            await self._cluster.delete(
                ROOT_API_VERSION, ROOT_KIND, None, self._root.name, propagation="Foreground"
            )
            next_report = self._clock.now() + self.settings.cleanup_progress_every_s
            while await self._cluster.get(ROOT_API_VERSION, ROOT_KIND, None, self._root.name) is not None:
                if self._clock.now() >= next_report:
                    next_report += self.settings.cleanup_progress_every_s
                    await self._report_cleanup_progress("the garbage collector removes the rest", begun)
                if self._clock.now() > deadline:
                    self.report.cleanup = (
                        f"incomplete after {self.settings.cleanup_timeout_s:.0f} s: {ROOT_KIND} "
                        f"{self._root.name} still has dependents; delete it again later"
                    )
                    return
                await pause(self._clock, 0.5)
        except KubeApiError as exc:
            self.report.cleanup = f"failed: {exc}"
            return
        self.report.cleanup = f"done in {self._clock.now() - begun:.1f} s"

    async def _delete_own_namespaces(self, deadline: float) -> None:
        own = [ns for ns in self._namespaces.names if namespace_is_replays(ns, self._rewrite)]
        await asyncio.gather(*(self._cluster.delete("v1", "Namespace", None, ns) for ns in own))
        begun = self._clock.now()
        next_report = begun + self.settings.cleanup_progress_every_s
        while own and self._clock.now() < deadline:
            remaining = await asyncio.gather(*(self._cluster.get("v1", "Namespace", None, ns) for ns in own))
            own = [ns for ns, live in zip(own, remaining, strict=True) if live is not None]
            if own and self._clock.now() >= next_report:
                next_report += self.settings.cleanup_progress_every_s
                await self._report_cleanup_progress(f"{len(own)} namespace(s) still terminating", begun)
            if own:
                await pause(self._clock, 0.25)

    async def _report_cleanup_progress(self, phase: str, begun: float) -> None:
        """A line every few seconds: cleaning up thousands of pods takes minutes, and silence for that
        long looks like a hang."""
        try:
            pods = await self._cluster.list_objects("v1", "Pod", label_selector=f"{REPLAY_LABEL}={self.name}")
            left = f"{len(pods)} pod(s) left"
        except KubeApiError as exc:
            left = f"pods left unknown ({exc})"
        log.info(
            f"cleanup of {self.name}: {phase}, {left}, {self._clock.now() - begun:.0f} s so far",
            extra={"ctx": {"replay": self.name}},
        )
