"""Sampling the replay while it runs: its pods per recorded owner (the report's timelines and the
fidelity samples), the root's pause annotation, the convergence governor and ``--speed max``, the
autoscaler's nodes, and the progress callback.

Samples are taken at fixed deadlines, ``sample_interval_s`` apart, and, with the convergence governor,
whenever the trace clock reaches the horizon the governor set at the last one (the clock stops there
until the cluster has been looked at again). Where the pods come from is a
:class:`PodSource`: :class:`WatchedPods` keeps counts from a pod watch, so a sample is a read of
in-memory counts however many pods there are; :class:`ListedPods` lists the pods at every sample,
for clusters that offer no watch (the unit tests' in-memory ones). While the convergence governor
holds the trace clock, in-memory counts are also looked at every :data:`HOLD_CHECK_S`, and the
sample that releases the clock is taken as soon as the cluster caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from pipeline.io.kube.types import ResourceVersion
from pipeline.model.errors import GoneError, KubeApiError, KubetapeError, WatchBrokenError
from pipeline.model.events import Event
from pipeline.replay.autoscale.figures import NODEPOOL_LABEL, AutoscaleFigures
from pipeline.replay.clock.governor import ConvergenceGovernor
from pipeline.replay.clock.schedule import Clock, Scheduler, pause
from pipeline.replay.ports import PodEvents, ReplayCluster
from pipeline.replay.report.pod_tally import PodSample, PodTally, sample_of
from pipeline.replay.report.report import ReplayProgress, ReplayReport
from pipeline.replay.rewrite import PAUSE_ANNOTATION, RECORDED_OWNER_ANNOTATION, REPLAY_LABEL, RootRef
from pipeline.replay.setup import ROOT_API_VERSION, ROOT_KIND

log = logging.getLogger(__name__)

CONVERGENCE = "convergence"
"""The scheduler's pause reason while the governor holds the trace clock."""
ROOT_ANNOTATION = "root annotation"
"""The scheduler's pause reason while the root carries :data:`PAUSE_ANNOTATION`."""


# ---- where the pods come from ---------------------------------------------------------------------
class PodSource(Protocol):
    """The replay's pods, one :class:`PodSample` at a time."""

    in_memory: bool
    """Whether a sample is a read of counts kept in memory (cheap however often it is taken)."""

    async def start(self) -> None: ...

    async def sample(self) -> PodSample:
        """Raises :class:`~pipeline.model.errors.KubetapeError` when the pods cannot be seen now."""
        ...

    async def stop(self) -> None: ...


class ListedPods:
    """Lists the replay's pods at every sample: as costly as the pods are many."""

    def __init__(self, cluster: ReplayCluster, replay_name: str) -> None:
        self._cluster = cluster
        self._selector = f"{REPLAY_LABEL}={replay_name}"

    in_memory = False

    async def start(self) -> None:
        pass

    async def sample(self) -> PodSample:
        pods = await self._cluster.list_objects("v1", "Pod", label_selector=self._selector)
        return sample_of(pods, RECORDED_OWNER_ANNOTATION)

    async def stop(self) -> None:
        pass


class WatchedPods:
    """Counts kept from a pod watch: one list, then a watch from its resourceVersion. A watch the
    server ends, or that drops, goes on from the last version seen; one answered 410 Gone (the
    version is too old) lists again. Bad input is the watch client's to set aside (see
    :mod:`pipeline.io.kube.watch`)."""

    def __init__(self, events: PodEvents, clock: Clock, *, retry_s: float = 1.0) -> None:
        self._events = events
        self._clock = clock
        self._retry_s = retry_s
        self._tally = PodTally(RECORDED_OWNER_ANNOTATION)
        self._listed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.lists = 0
        """Full lists taken: the first one, and one after each 410 Gone."""

    in_memory = True

    async def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="replay pod watch")

    async def sample(self) -> PodSample:
        assert self._task is not None, "start() first"
        if not self._listed.is_set() and not self._task.done():
            listed = asyncio.ensure_future(self._listed.wait())
            await asyncio.wait({listed, self._task}, return_when=asyncio.FIRST_COMPLETED)
            listed.cancel()
        if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
            raise KubeApiError(f"the replay's pod watch stopped: {self._task.exception()}")
        return self._tally.sample()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self) -> None:
        since: ResourceVersion | None = None
        while True:
            try:
                if since is None:
                    listed = await self._events.list_pods()
                    self._tally.reset(listed.items)
                    since = listed.resource_version
                    self.lists += 1
                    self._listed.set()
                async for event in self._events.watch_pods(since):
                    if event.type != "BOOKMARK":
                        self._tally.observe(event.type, event.obj)
                    since = event.resource_version or since
            except GoneError:
                since = None  # the version is too old for the apiserver: list again
            except WatchBrokenError as exc:
                log.warning("the replay's pod watch dropped; resuming", extra={"ctx": {"reason": str(exc)}})
                await pause(self._clock, self._retry_s)


# ---- speed max ------------------------------------------------------------------------------------
class SpeedSeeker:
    """The trace clock's speed at ``--speed max``, adjusted once per sample: ×1.25 while the governor
    does not hold (the cluster keeps up), halved when a hold begins (it fell behind), unchanged while
    the hold lasts (the clock stands still anyway). Additive increase would take minutes to find the
    speed of a fast cluster from a slow start; the halving keeps the holds short once it is found."""

    GROWTH = 1.25
    MIN_SPEED = 1.0
    MAX_SPEED = 1000.0

    def __init__(self, start: float) -> None:
        self.speed = min(max(start, self.MIN_SPEED), self.MAX_SPEED)

    def next(self, *, holding: bool, new_hold: bool) -> float:
        if new_hold:
            self.speed = max(self.speed / 2, self.MIN_SPEED)
        elif not holding:
            self.speed = min(self.speed * self.GROWTH, self.MAX_SPEED)
        return self.speed


# ---- the sampler ----------------------------------------------------------------------------------
HOLD_CHECK_S = 0.1
"""While the trace clock is held, how often the sampler looks whether the cluster caught up."""


class Sampler:
    """Takes the replay's samples into its report and acts on them (module doc)."""

    def __init__(
        self,
        cluster: ReplayCluster,
        pods: PodSource,
        scheduler: Scheduler[Event],
        report: ReplayReport,
        clock: Clock,
        *,
        interval_s: float,
        governor: ConvergenceGovernor | None,
        seeker: SpeedSeeker | None,
        autoscale: AutoscaleFigures | None,
        on_progress: Callable[[ReplayProgress], None] | None,
        steps_total: int,
    ) -> None:
        self._cluster = cluster
        self.pods = pods
        self._scheduler = scheduler
        self._report = report
        self._clock = clock
        self._interval_s = interval_s
        self._governor = governor
        self._seeker = seeker
        self.autoscale = autoscale
        self._on_progress = on_progress
        self._steps_total = steps_total
        self._last_sample_at: float | None = None
        self.root: RootRef | None = None
        """Set once setup created the root, whose pause annotation is followed."""
        self.autoscaler_pools: list[str] = []
        """The autoscaler's NodePools by name, whose nodes are sampled."""
        self.started = clock.now()
        """The clock instant the replay started (setup included), for the progress callback."""
        self._looked_ms: float | None = None
        """The trace instant of the last sample taken (or tried)."""
        if governor is not None:
            scheduler.limit(governor.horizon_ms)  # how far the clock may run before the first sample

    async def sample_forever(self) -> None:
        """Sample at fixed deadlines, not a fixed sleep after each sample: on a busy machine a sample
        takes a while, and sleeping after it would stretch the interval by that much every time."""
        due = self._clock.now() + self._interval_s
        while True:
            early = await self._sleep_until_due(due)
            await self.sample_once()
            if not early:
                # a sample that took longer than the interval: the next one at once, missed slots skipped
                due = max(due + self._interval_s, self._clock.now())

    async def _sleep_until_due(self, due: float) -> bool:
        """Sleep until ``due`` (False), or return early for a sample the clock waits for (True).

        While the governor holds the clock (and the pods are counted in memory), look every
        :data:`HOLD_CHECK_S` and return as soon as no owner is behind, so that the sample that releases
        the clock is taken when the cluster caught up, not up to a sample interval later. The cluster
        has nothing to do from the moment it caught up until the clock goes on, and a governed replay
        at scale holds about once per trace change. Likewise return when the clock reaches the
        governor's horizon, where it stands still until the cluster is looked at again."""
        while self._holding() and self._clock.now() + HOLD_CHECK_S < due:
            await self._clock.sleep_until(self._clock.now() + HOLD_CHECK_S)
            if await self._caught_up():
                return True
        reached = self._horizon_reached_before(due)
        if reached is not None:
            await self._clock.sleep_until(reached)
            return True
        await self._clock.sleep_until(due)
        return False

    def _horizon_reached_before(self, due: float) -> float | None:
        """The clock instant, before ``due``, at which the trace clock stands at the governor's horizon
        and has not been sampled there (None: not before ``due``). Only for pods counted in memory:
        a listing at every horizon would load the apiserver; such a clock waits for the next sample."""
        if self._governor is None or self._governor.holding or not self.pods.in_memory:
            return None
        if self._scheduler.at_limit:
            unseen = self._scheduler.sim_elapsed_ms() != self._looked_ms
            return self._clock.now() if unseen else None
        reached = self._scheduler.limit_reached_at()
        return reached if reached is not None and reached < due else None

    def _holding(self) -> bool:
        return self._governor is not None and self._governor.holding and self.pods.in_memory

    async def _caught_up(self) -> bool:
        assert self._governor is not None
        try:
            pods = await self.pods.sample()
        except KubetapeError:
            return False  # the next regular sample says why
        return not self._governor.behind(self._scheduler.sim_elapsed_ms(), pods.by_owner)

    async def sample_once(self) -> None:
        await self._follow_root_pause()
        self._looked_ms = self._scheduler.sim_elapsed_ms()
        try:
            pods = await self.pods.sample()
        except KubetapeError as exc:
            log.warning("cannot sample the replay's pods", extra={"ctx": {"reason": str(exc)}})
            return
        at = self._scheduler.sim_elapsed_ms()
        now = self._clock.now()
        if self._last_sample_at is not None and self._scheduler.started_at is not None:
            self._report.largest_sample_gap_s = max(
                self._report.largest_sample_gap_s, now - self._last_sample_at
            )
        self._last_sample_at = now
        if self.autoscale is not None:
            await self.sample_autoscaler(at, now)
        by_owner = {owner: c.running for owner, c in pods.by_owner.items() if c.running}
        self._report.add_sample(at, pods.running, pods.nodes, by_owner)
        self._govern(at, pods)
        if self._on_progress is not None:
            stats = self._scheduler.stats
            self._on_progress(
                ReplayProgress(
                    steps_done=stats.finished,
                    steps_total=self._steps_total,
                    trace_ms=self._scheduler.sim_elapsed_ms(),
                    wall_s=self._clock.now() - self.started,
                    failed=self._report.failed,
                    pods_running=pods.running,
                )
            )

    async def sample_to_the_end(self) -> None:
        """The last sample, once trace time is over; with the governor, the samples until it no longer
        holds (the cluster caught up, or the owners behind were given up on after ``max_hold_s``): a
        governed replay's last instant is judged, like every other, by the state the cluster reached
        when the clock went on, not mid-way through the last change."""
        await self.sample_once()
        while self._governor is not None and self._governor.holding:
            await self._sleep_until_due(self._clock.now() + self._interval_s)
            await self.sample_once()

    async def sample_autoscaler(self, at_ms: float, wall_s: float) -> None:
        """The autoscaler's nodes and the replay's pods, listed: an autoscaled replay is small, and
        its figures want the pods themselves."""
        assert self.autoscale is not None
        node_selector = f"{NODEPOOL_LABEL} in ({','.join(self.autoscaler_pools)})"
        try:
            nodes = await self._cluster.list_objects("v1", "Node", label_selector=node_selector)
            pods = (
                []
                if self._scheduler.started_at is None
                else await self._cluster.list_objects(
                    "v1", "Pod", label_selector=f"{REPLAY_LABEL}={self._report.replay_name}"
                )
            )
        except KubeApiError as exc:
            log.warning("cannot sample the autoscaler's nodes", extra={"ctx": {"reason": str(exc)}})
            return
        self.autoscale.observe(at_ms, wall_s, nodes, pods)

    async def _follow_root_pause(self) -> None:
        """Pause or resume as the root's :data:`PAUSE_ANNOTATION` says (a signal pause is left alone)."""
        if self.root is None:
            return
        try:
            root = await self._cluster.get(ROOT_API_VERSION, ROOT_KIND, None, self.root.name)
        except KubeApiError:
            return  # next sample
        annotations = ((root or {}).get("metadata") or {}).get("annotations") or {}
        wanted = annotations.get(PAUSE_ANNOTATION) == "true"
        if wanted and not self._scheduler.paused_for(ROOT_ANNOTATION):
            self._scheduler.pause(ROOT_ANNOTATION)
            log.info("paused by the root's annotation", extra={"ctx": {"replay": self._report.replay_name}})
        elif not wanted and self._scheduler.paused_for(ROOT_ANNOTATION):
            self._scheduler.resume(ROOT_ANNOTATION)
            log.info(
                "resumed: the root's pause annotation is gone",
                extra={"ctx": {"replay": self._report.replay_name}},
            )

    def _govern(self, trace_ms: float, pods: PodSample) -> None:
        """Hold or release the trace clock as the convergence governor says (if there is one)."""
        if self._governor is None or self._scheduler.started_at is None:
            return
        # at the first sample no new speed has re-anchored the clock yet: this is where trace time began
        self._governor.begin(self._scheduler.started_at)
        hold = self._governor.observe(self._clock.now(), trace_ms, pods.by_owner)
        # The clock runs on only as far as the governor looked ahead; while it holds, no further than
        # this sample: the trace time that passed while the sample was judged would otherwise be an
        # instant no sample saw, and at speed 30 a few ms of it is a trace second.
        self._scheduler.limit(self._governor.horizon_ms)
        if self._seeker is not None:
            new_hold = hold and not self._scheduler.paused_for(CONVERGENCE)
            self._scheduler.set_speed(self._seeker.next(holding=hold, new_hold=new_hold))
        if hold and not self._scheduler.paused_for(CONVERGENCE):
            self._scheduler.pause(CONVERGENCE)
            log.info(
                f"trace clock held at {trace_ms / 1000:.1f} s: the simulated cluster is behind the recording",
                extra={"ctx": {"replay": self._report.replay_name}},
            )
        elif not hold and self._scheduler.paused_for(CONVERGENCE):
            self._scheduler.resume(CONVERGENCE)
