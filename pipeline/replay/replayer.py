"""The replayer: a trace file → rewritten objects → applied at scaled times → a fidelity report.

One replay, step by step:

1. :func:`pipeline.formats.trace.read_trace` reads a kubetape trace/segment or a SimKube trace (v1 or v2,
   msgpack or JSON).
2. :func:`plan_replay` turns its APPLIED/DELETED events into scheduler steps and its POD_LIFECYCLE
   events into pod lifetimes (already divided by the speed) and the recorded running-pods timeline.
3. :class:`Replayer` creates the root object (a ``ReplayRoot``: kubetape's own cluster-scoped custom
   resource, without any effect, so it can own namespaces, nodes and cluster-scoped objects alike,
   and RBAC can grant its deletion alone; its CRD is installed when the cluster lacks it), the
   virtual nodes, then runs the :class:`~pipeline.replay.schedule.Scheduler`. Each step rewrites one
   object (:mod:`pipeline.replay.rewrite`), makes sure its mapped namespace exists, and applies it.
   A failure (unknown kind, rejected object, apiserver gone after retries) is recorded with the
   object key and reason; the replay goes on. A delete of nothing is counted, not an error.
4. A sampler lists the replay's pods every ``sample_interval_s`` (running pods, nodes used).
5. Unless ``keep``, the root is deleted in the foreground and the replayer waits until it is gone,
   which is when the garbage collector has deleted everything it owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pipeline.io.kube_types import ApiResource, ClusterObjects
from pipeline.model.errors import (
    ApiUnavailableError,
    ConfigError,
    KubeApiError,
    KubetapeError,
    UnknownKindError,
)
from pipeline.model.events import Event, EventType
from pipeline.replay.autoscale_figures import NODEPOOL_LABEL, AutoscaleFigures
from pipeline.replay.autoscale_settings import NODEPOOL_API_VERSION, ScaledSetting
from pipeline.replay.governor import ConvergenceGovernor, PodCounts, count_pods
from pipeline.replay.plan import ReplayPlan
from pipeline.replay.report import ReplayFailure, ReplayProgress, ReplayReport
from pipeline.replay.rewrite import (
    PAUSE_ANNOTATION,
    RECORDED_OWNER_ANNOTATION,
    REPLAY_LABEL,
    RewriteSettings,
    RootRef,
    autoscaler_node_pool,
    deletion_target,
    map_namespace,
    namespace_is_replays,
    namespace_object,
    recorded_node,
    rewrite_object,
    virtual_nodes,
)
from pipeline.replay.schedule import Clock, MonotonicClock, ScheduledStep, Scheduler

log = logging.getLogger(__name__)
CONVERGENCE = "convergence"
"""The scheduler's pause reason while the governor holds the trace clock."""
R = TypeVar("R")

ROOT_API_VERSION = "kubetape.dev/v1"
ROOT_KIND = "ReplayRoot"
ROOT_CRD_TIMEOUT_S = 60.0
"""How long the replayer waits for the root's CRD, once it installed it, to be served."""
CRD_API_VERSION = "apiextensions.k8s.io/v1"


def root_crd() -> dict[str, Any]:
    """The root's CustomResourceDefinition, as k8s/sim/replayroot-crd.yaml ships it."""
    return {
        "apiVersion": CRD_API_VERSION,
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "replayroots.kubetape.dev"},
        "spec": {
            "group": "kubetape.dev",
            "scope": "Cluster",
            "names": {
                "kind": ROOT_KIND,
                "listKind": f"{ROOT_KIND}List",
                "plural": "replayroots",
                "singular": "replayroot",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                    "additionalPrinterColumns": [
                        {
                            "name": "Replay",
                            "type": "string",
                            "jsonPath": ".metadata.labels.kubetape\\.dev/replay",
                        },
                        {
                            "name": "Paused",
                            "type": "string",
                            "jsonPath": ".metadata.annotations.kubetape\\.dev/paused",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


class ReplayCluster(ClusterObjects, Protocol):
    """What the replayer needs from the simulated cluster (:class:`pipeline.io.kube_apply.KubeApplier`)."""

    async def resource_for(self, api_version: str, kind: str) -> ApiResource: ...

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]: ...


# ---- settings -------------------------------------------------------------------------------------
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
    node_skeleton: Mapping[str, Any] | None = None
    node_count: int = 0
    more_node_pools: tuple[tuple[Mapping[str, Any], int], ...] = ()
    """Further (skeleton, count) pools of virtual nodes beside ``node_skeleton`` × ``node_count``."""
    keep: bool = False
    """Leave the simulated objects in the cluster (no cleanup)."""
    sample_interval_s: float = 1.0
    """Wall seconds between two listings of the replay's pods (the report's timelines)."""
    fidelity_resolution_s: float = 1.0
    """Wall seconds a replayed pod count may trail the recording by (see pipeline.replay.fidelity)."""
    desired_settle_s: float = 2.0
    """Further wall seconds allowed to owners judged by the pods they asked for (``spec.replicas``,
    where the trace has no lifecycles): the simulated controller, scheduler and KWOK must first turn
    the change into Running pods, which a recorded lifecycle already includes."""
    max_lag_s: float | None = None
    """Convergence-aware time scaling: hold the trace clock while the simulated cluster is more than
    this many trace seconds behind the recording (see :mod:`pipeline.replay.governor`); None: never."""
    max_hold_s: float = 60.0
    """Wall seconds one hold may last before the owners still behind are given up on."""
    max_lag_tolerance: int = 1
    """Pods an owner may be off the recording without holding the clock (the fidelity bound)."""
    expect_profile: str | None = None
    """Refuse to replay unless the simulated cluster states this profile (``--expect-profile``)."""
    max_speed: bool = False
    """``--speed max``: ``speed`` is only where the trace clock starts; it speeds up while the cluster
    keeps up and slows down at each convergence hold (needs ``max_lag_s``); see :class:`SpeedSeeker`."""
    cleanup_timeout_s: float = 180.0
    cleanup_progress_every_s: float = 5.0
    """How often a long cleanup logs how far it is (thousands of pods take minutes)."""
    node_ready_timeout_s: float = 30.0
    node_settle_s: float = 1.0
    """Wait after the virtual nodes are Ready, before trace time starts (see _create_virtual_nodes)."""
    namespace_ready_timeout_s: float = 10.0
    autoscaler_node_pools: tuple[Mapping[str, Any], ...] = ()
    """Karpenter NodePools (time settings already scaled, see ``autoscale_settings``) created for the
    replay; Karpenter must run against the cluster. Empty: fixed node pools only."""
    autoscaler_settings: tuple[ScaledSetting, ...] = ()
    """The autoscaler's time settings as given and as applied, for the report."""
    prices: Mapping[str, float] | None = None
    """$/hour by instance type for the autoscaled run's cost (default: the nodes' price labels)."""

    def resolved_name(self) -> str:
        return self.replay_name or f"replay-{uuid.uuid4().hex[:8]}"

    def node_pools(self) -> list[tuple[Mapping[str, Any], int]]:
        """Every (skeleton, count) pool of virtual nodes to create, the first one first."""
        first = [(self.node_skeleton, self.node_count)] if self.node_skeleton is not None else []
        return [(s, n) for s, n in [*first, *self.more_node_pools] if n > 0]


def _is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# ---- speed max and the cluster's profile ----------------------------------------------------------
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


PROFILE_CONFIGMAP = ("kube-system", "kubetape-cluster-profile")
"""Where a simulated cluster states its profile (``kubetape stack up --profile``, k8s/sim/profiles)."""


async def read_cluster_profile(cluster: ReplayCluster) -> dict[str, Any] | None:
    """The simulated cluster's profile, for the report: its name, settings and the settings that can
    change where pods land; None when the cluster states none (or it cannot be read)."""
    namespace, name = PROFILE_CONFIGMAP
    try:
        found = await cluster.get("v1", "ConfigMap", namespace, name)
    except KubetapeError:
        return None
    data = (found or {}).get("data") or {}
    if not data.get("profile"):
        return None
    out: dict[str, Any] = {"profile": str(data["profile"])}
    for field_name, key in (("settings", "settings"), ("changes_scheduling", "changesScheduling")):
        try:
            out[field_name] = json.loads(data.get(key) or "null")
        except ValueError:
            out[field_name] = data.get(key)
    return out


# ---- rate limit -----------------------------------------------------------------------------------
class TokenBucket:
    """At most ``rate`` acquisitions per second on average, bursts up to ``burst``."""

    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        if rate <= 0:
            raise ConfigError(f"--qps must be positive, got {rate}")
        self._rate, self._burst, self._clock = rate, float(max(burst, 1)), clock
        self._tokens = self._burst
        self._last = clock.now()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            now = self._clock.now()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now
            if self._tokens < 1:
                wait = (1 - self._tokens) / self._rate
                await self._clock.sleep_until(now + wait)
                self._last = self._clock.now()
                self._tokens = 1.0
            self._tokens -= 1


# ---- the replayer ---------------------------------------------------------------------------------
class Replayer:
    """Replays one planned trace into one cluster; :meth:`run` returns the report."""

    def __init__(
        self,
        cluster: ReplayCluster,
        plan: ReplayPlan,
        settings: ReplaySettings,
        *,
        source: str = "trace",
        clock: Clock | None = None,
        on_progress: Callable[[ReplayProgress], None] | None = None,
    ) -> None:
        self._cluster = cluster
        self._plan = plan
        self.settings = settings
        self.name = settings.resolved_name()
        self._clock = clock or MonotonicClock()
        self._rewrite = RewriteSettings(
            replay_name=self.name,
            namespace_prefix=settings.namespace_prefix,
            config=plan.config,
            suspended_cronjobs=plan.cronjobs_with_jobs,
        )
        self._scheduler: Scheduler[Event] = Scheduler(
            self._run_step,
            speed=settings.speed,
            max_in_flight=settings.max_in_flight,
            duration_ms=settings.duration_ms,
            clock=self._clock,
        )
        self._limiter = (
            TokenBucket(settings.qps, settings.max_in_flight, self._clock) if settings.qps else None
        )
        self._on_progress = on_progress
        self._root: RootRef | None = None
        self._started = self._clock.now()
        self._namespaces: dict[str, asyncio.Task[None]] = {}
        self._stop_requested = asyncio.Event()
        self._last_sample_at: float | None = None
        self.report = ReplayReport(self.name, source, settings.speed, steps=len(plan.steps), gaps=plan.gaps)
        self.report.recorded_timeline = list(plan.recorded_running)
        self.report.recorded_by_owner = dict(plan.recorded_by_owner or {})
        if settings.max_speed and settings.max_lag_s is None:
            raise ConfigError(
                "--speed max runs as fast as the simulated cluster keeps up, which only the convergence "
                "governor measures: pass --max-lag SECONDS too"
            )
        self._seeker = SpeedSeeker(settings.speed) if settings.max_speed else None
        self.report.speed_mode = "max" if settings.max_speed else "fixed"
        if settings.max_speed and settings.autoscaler_node_pools:
            raise ConfigError(
                "--autoscaler divides Karpenter's timers by one fixed speed, which --speed max does not "
                "have: give --speed a number (e.g. 10)"
            )
        self._autoscale = (
            AutoscaleFigures(settings.speed, dict(settings.prices or {}))
            if settings.autoscaler_node_pools
            else None
        )
        self._node_pool_names: list[str] = []
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
        self.report.fidelity_resolution_ms = settings.fidelity_resolution_s * 1000.0 * settings.speed
        self.report.desired_owners = plan.desired_owners
        self.report.desired_settle_ms = settings.desired_settle_s * 1000.0 * settings.speed
        span = plan.end_ms - plan.start_ms
        self.report.trace_span_ms = settings.duration_ms if settings.duration_ms is not None else span

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
        :meth:`Scheduler.run <pipeline.replay.schedule.Scheduler.run>`."""
        started = self._started = self._clock.now()
        try:
            self._root = await self._create_root()
            self.report.cluster_profile = await read_cluster_profile(self._cluster)
            self._check_profile()
            await self._create_virtual_nodes()
            await self._create_node_pools()
            await self._prepare()
            if self._autoscale is not None:
                # the autoscaler's nodes before trace time starts (a pool may keep a minimum)
                await self._sample_autoscaler(0.0, self._clock.now(), [])
            self.report.setup_seconds = self._clock.now() - started
            sampler = asyncio.create_task(self._sample_forever(), name=f"replay-sampler {self.name}")
            try:
                if stream is not None:
                    self.report.steps = 0  # counted as the stream yields them
                steps = self._plan.steps if stream is None else self._until_stopped(stream)
                stats = await self._scheduler.run(steps, first_due_at=first_due_at)
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
            await self._sample_once()
            if self._governor is not None:
                self._governor.finish(self._clock.now())
                self.report.convergence = self._governor.report.to_json(
                    self._governor.max_lag_ms, self.settings.speed
                )
                if self._seeker is not None:
                    self._judge_at_achieved_speed()
            if self._autoscale is not None:
                self.report.autoscale = {
                    "autoscaler": "karpenter",
                    "node_pools": list(self._node_pool_names),
                    "settings": [s.to_json() for s in self.settings.autoscaler_settings],
                    **self._autoscale.to_json(),
                }
                self.report.autoscale_summary = self._autoscale.summary_lines()
            self.report.lateness_ms = list(stats.lateness_ms)
            self.report.lateness_count = stats.lateness_count
            self.report.lateness_max_ms = stats.lateness_max_ms
            self.report.skipped_after_duration = stats.skipped_after_duration
            self.report.not_started = stats.not_started
        finally:
            self.report.wall_seconds = self._clock.now() - started
            if self._root is not None and not self.settings.keep:
                # also after a cancellation (a second Ctrl-C): the cancel was delivered at the await
                # that raised, so this await runs; only a further cancel interrupts the cleanup
                await self.cleanup()
            elif self._root is not None:
                self.report.cleanup = f"kept (delete {ROOT_KIND} {self._root.name} to remove everything)"
        return self.report

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

    # ---- setup and cleanup ------------------------------------------------------------------------
    async def _create_root(self) -> RootRef:
        """The root is a kind of kubetape's own, not a built-in one such as ClusterRole, so that RBAC
        can let a controller delete replay roots and nothing else."""
        name = f"kubetape-{self.name}"
        body: dict[str, Any] = {
            "apiVersion": ROOT_API_VERSION,
            "kind": ROOT_KIND,
            "metadata": {"name": name, "labels": {REPLAY_LABEL: self.name}},
        }
        deadline = self._clock.now() + ROOT_CRD_TIMEOUT_S
        try:
            await self._cluster.resource_for(ROOT_API_VERSION, ROOT_KIND)
        except UnknownKindError:
            await self._install_root_crd(deadline)
        while True:
            try:
                live = await self._with_retries(lambda: self._cluster.apply(body))
                break
            except UnknownKindError:
                # Established, but discovery can lag behind it for a moment
                if self._clock.now() >= deadline:
                    raise
                await self._pause(0.25)
        return RootRef(ROOT_API_VERSION, ROOT_KIND, name, live["metadata"]["uid"])

    async def _install_root_crd(self, deadline: float) -> None:
        """Install the root's CRD (k8s/sim ships it too; a plain simulated cluster has no kubetape
        manifests) and wait until the apiserver serves it: a new CRD has no conditions at first."""
        crd = root_crd()
        name = crd["metadata"]["name"]
        await self._with_retries(lambda: self._cluster.apply(crd))
        conditions: list[dict[str, Any]] = []
        while True:
            live = await self._with_retries(
                lambda: self._cluster.get(CRD_API_VERSION, "CustomResourceDefinition", None, name)
            )
            conditions = ((live or {}).get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                return
            if self._clock.now() >= deadline:
                raise KubeApiError(
                    f"CustomResourceDefinition {name} not Established after {ROOT_CRD_TIMEOUT_S:.0f} s; "
                    f"last conditions: {conditions}"
                )
            await self._pause(0.25)

    async def _create_virtual_nodes(self) -> None:
        pools = self.settings.node_pools()
        if not pools:
            return
        assert self._root is not None
        nodes: list[dict[str, Any]] = []
        for index, (skeleton, count) in enumerate(pools):
            pool = skeleton
            if index:  # node names come from the skeleton's name: keep pools apart
                name = (skeleton.get("metadata") or {}).get("name") or "node"
                pool = {
                    **skeleton,
                    "metadata": {**(skeleton.get("metadata") or {}), "name": f"{name}-{index}"},
                }
            nodes += virtual_nodes(pool, count, self._rewrite, self._root)
        await asyncio.gather(*(self._apply_with_retries(node) for node in nodes))
        # start the trace clock only once KWOK marked the nodes Ready, or the first pods would wait
        # for them and start late
        selector = f"{REPLAY_LABEL}={self.name}"
        deadline = self._clock.now() + self.settings.node_ready_timeout_s
        while self._clock.now() < deadline:
            live = await self._cluster.list_objects("v1", "Node", label_selector=selector)
            if sum(1 for node in live if _is_ready(node)) >= len(nodes):
                # KWOK marks a node Ready before its pod handling for that node has started; a pod
                # bound in between is never started (kubernetes-sigs/kwok#1572): let it settle
                await self._pause(self.settings.node_settle_s)
                return
            await self._pause(0.1)
        log.warning(
            "virtual nodes not Ready in time; replaying anyway",
            extra={"ctx": {"replay": self.name, "timeout_s": self.settings.node_ready_timeout_s}},
        )

    async def _create_node_pools(self) -> None:
        """The autoscaler's NodePools, owned by the root (deleting it makes Karpenter drain and delete
        the nodes it launched). Pending pods then make Karpenter launch KWOK nodes."""
        if not self.settings.autoscaler_node_pools:
            return
        assert self._root is not None
        try:
            await self._cluster.resource_for(NODEPOOL_API_VERSION, "NodePool")
        except UnknownKindError:
            raise ConfigError(
                "the simulated cluster has no Karpenter NodePool kind: start Karpenter beside it "
                "(`kubetape stack up --autoscaler karpenter`) or install its CRDs"
            ) from None
        for pool in self.settings.autoscaler_node_pools:
            body = autoscaler_node_pool(pool, self._rewrite, self._root)
            await self._apply_with_retries(body)
            self._node_pool_names.append(body["metadata"]["name"])

    async def _prepare(self) -> None:
        """Before trace time starts: discover every kind of the trace and create the namespaces its
        objects land in, so the first steps do not pay for it in lateness. Failures here are left to
        the steps, which report them per object."""
        kinds: dict[tuple[str, str], set[str]] = {}
        for step in self._plan.steps:
            obj = step.payload.obj or {}
            if step.payload.type is EventType.APPLIED and "apiVersion" in obj and "kind" in obj:
                namespace = (obj.get("metadata") or {}).get("namespace") or "default"
                kinds.setdefault((obj["apiVersion"], obj["kind"]), set()).add(str(namespace))
        namespaces: set[str] = set()
        for (api_version, kind), recorded in kinds.items():
            try:
                resource = await self._cluster.resource_for(api_version, kind)
                if resource.namespaced:
                    namespaces.update(map_namespace(ns, self._rewrite) for ns in recorded)
            except KubetapeError:
                continue
        results = await asyncio.gather(
            *(self._ensure_namespace(ns) for ns in sorted(namespaces)), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result

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
                await self._pause(0.5)
        except KubeApiError as exc:
            self.report.cleanup = f"failed: {exc}"
            return
        self.report.cleanup = f"done in {self._clock.now() - begun:.1f} s"

    async def _delete_own_namespaces(self, deadline: float) -> None:
        own = [ns for ns in self._namespaces if namespace_is_replays(ns, self._rewrite)]
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
                await self._pause(0.25)

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

    # ---- one step ---------------------------------------------------------------------------------
    async def _run_step(self, step: ScheduledStep[Event]) -> None:
        event = step.payload
        try:
            if event.type is EventType.APPLIED:
                await self._apply_event(event)
            else:
                await self._delete_event(event)
        except KubetapeError as exc:  # rejected, unknown kind, unreachable after retries, not rewritable
            self._fail(event, str(exc))
        except (KeyError, TypeError, AttributeError) as exc:
            # a recorded object without the fields every Kubernetes object has: report it, go on
            self._fail(event, f"malformed recorded object ({type(exc).__name__}: {exc})")

    def _fail(self, event: Event, reason: str) -> None:
        offset = event.ts_ms - self._plan.start_ms
        self.report.failed += 1
        self.report.failures.append(ReplayFailure(str(event.key), offset, reason))
        log.warning("replay step failed", extra={"ctx": {"key": event.key, "reason": reason}})

    async def _apply_event(self, event: Event) -> None:
        assert event.obj is not None
        assert self._root is not None
        obj = event.obj
        resource = await self._cluster.resource_for(obj["apiVersion"], obj["kind"])
        kind = (resource.api_version, resource.kind)
        if kind == ("v1", "Namespace"):
            name = map_namespace(obj["metadata"]["name"], self._rewrite)
            body = rewrite_object(obj, self._rewrite, self._root, namespaced=False)
            body["metadata"]["name"] = name
        elif kind == ("v1", "Node"):
            body = recorded_node(obj, self._rewrite, self._root)
        else:
            lifetime = self._plan.lifetimes_ms.get(event.key)
            body = rewrite_object(
                obj, self._rewrite, self._root, namespaced=resource.namespaced, lifetime_ms=lifetime
            )
            if resource.namespaced:
                await self._ensure_namespace(body["metadata"]["namespace"])
            elif str(event.key) not in self.report.cluster_scoped:
                self.report.cluster_scoped.append(str(event.key))
        await self._with_retries(lambda: self._cluster.apply(body))
        self.report.applied += 1

    async def _delete_event(self, event: Event) -> None:
        assert event.obj is not None
        obj = event.obj
        resource = await self._cluster.resource_for(obj["apiVersion"], obj["kind"])
        namespace, name = deletion_target(obj, self._rewrite, namespaced=resource.namespaced)
        if (resource.api_version, resource.kind) == ("v1", "Namespace"):
            name = map_namespace(name, self._rewrite)
        found = await self._with_retries(
            lambda: self._cluster.delete(resource.api_version, resource.kind, namespace, name)
        )
        if found:
            self.report.deleted += 1
        else:
            self.report.deletes_missed += 1

    async def _ensure_namespace(self, name: str) -> None:
        task = self._namespaces.get(name)
        if task is None or (task.done() and task.exception() is not None):
            assert self._root is not None
            body = namespace_object(name, self._rewrite, self._root)

            async def create() -> None:
                await self._with_retries(lambda: self._cluster.apply(body))
                await self._wait_for_default_service_account(name)

            task = asyncio.ensure_future(create())
            self._namespaces[name] = task
        await asyncio.shield(task)

    async def _wait_for_default_service_account(self, namespace: str) -> None:
        # the apiserver refuses pods (403) until the controller-manager created the namespace's
        # "default" ServiceAccount, a few ms to a second after the namespace
        deadline = self._clock.now() + self.settings.namespace_ready_timeout_s
        while await self._cluster.get("v1", "ServiceAccount", namespace, "default") is None:
            if self._clock.now() > deadline:
                log.warning(
                    "no default ServiceAccount yet; pods in the namespace may be refused",
                    extra={"ctx": {"namespace": namespace}},
                )
                return
            await self._pause(0.05)

    async def _pause(self, seconds: float) -> None:
        """Wait on the replay's clock (the real one in service; virtual time in tests)."""
        await self._clock.sleep_until(self._clock.now() + seconds)

    async def _apply_with_retries(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._with_retries(lambda: self._cluster.apply(body))

    async def _with_retries(self, call: Callable[[], Awaitable[R]]) -> R:
        attempt = 0
        while True:
            if self._limiter is not None:
                await self._limiter.acquire()
            try:
                return await call()
            except ApiUnavailableError:
                if attempt >= self.settings.apply_retries:
                    raise
                attempt += 1
                self.report.retries += 1
                await self._pause(0.1 * 2**attempt)

    # ---- sampling ---------------------------------------------------------------------------------
    async def _sample_forever(self) -> None:
        """Sample at fixed deadlines, not a fixed sleep after each sample: on a busy machine a sample
        takes a while, and sleeping after it would stretch the interval by that much every time."""
        interval = self.settings.sample_interval_s
        due = self._clock.now() + interval
        while True:
            await self._clock.sleep_until(due)
            await self._sample_once()
            # a sample that took longer than the interval: the next one at once, missed slots skipped
            due = max(due + interval, self._clock.now())

    async def _sample_autoscaler(self, at_ms: float, wall_s: float, pods: list[dict[str, Any]]) -> None:
        assert self._autoscale is not None
        selector = f"{NODEPOOL_LABEL} in ({','.join(self._node_pool_names)})"
        try:
            nodes = await self._cluster.list_objects("v1", "Node", label_selector=selector)
        except KubeApiError as exc:
            log.warning("cannot sample the autoscaler's nodes", extra={"ctx": {"reason": str(exc)}})
            return
        self._autoscale.observe(at_ms, wall_s, nodes, pods)

    async def _follow_root_pause(self) -> None:
        """Pause or resume as the root's :data:`PAUSE_ANNOTATION` says (a signal pause is left alone)."""
        if self._root is None:
            return
        try:
            root = await self._cluster.get(ROOT_API_VERSION, ROOT_KIND, None, self._root.name)
        except KubeApiError:
            return  # next sample
        annotations = ((root or {}).get("metadata") or {}).get("annotations") or {}
        wanted = annotations.get(PAUSE_ANNOTATION) == "true"
        if wanted and not self._scheduler.paused_for("root annotation"):
            self._scheduler.pause("root annotation")
            log.info("paused by the root's annotation", extra={"ctx": {"replay": self.name}})
        elif not wanted and self._scheduler.paused_for("root annotation"):
            self._scheduler.resume("root annotation")
            log.info("resumed: the root's pause annotation is gone", extra={"ctx": {"replay": self.name}})

    def _check_profile(self) -> None:
        expected = self.settings.expect_profile
        stated = (self.report.cluster_profile or {}).get("profile")
        if expected is not None and stated != expected:
            namespace, name = PROFILE_CONFIGMAP
            raise ConfigError(
                f"the simulated cluster states profile {stated!r} (ConfigMap {namespace}/{name}), not the "
                f"expected {expected!r}: create it with `kubetape stack up --profile {expected}`, or apply "
                f"k8s/sim/profiles/{expected}/ to your cluster's control plane and that ConfigMap"
            )

    def _judge_at_achieved_speed(self) -> None:
        """At ``--speed max`` the speed is what the run achieved: the report's speed, and with it the
        trace time of its one-second resolution and of the settle allowance, are that speed."""
        assert self.report.convergence is not None
        achieved = self.report.convergence["achieved_speed"]["overall"]
        self.report.convergence["achieved_speed"]["requested"] = "max"
        if achieved:
            self.report.speed = achieved
            self.report.fidelity_resolution_ms = self.settings.fidelity_resolution_s * 1000.0 * achieved
            self.report.desired_settle_ms = self.settings.desired_settle_s * 1000.0 * achieved

    def _govern(self, trace_ms: float, counts: Mapping[str, PodCounts]) -> None:
        """Hold or release the trace clock as the convergence governor says (if there is one)."""
        if self._governor is None or self._scheduler.started_at is None:
            return
        hold = self._governor.observe(self._clock.now(), trace_ms, counts)
        if self._seeker is not None:
            new_hold = hold and not self._scheduler.paused_for(CONVERGENCE)
            self._scheduler.set_speed(self._seeker.next(holding=hold, new_hold=new_hold))
        if hold and not self._scheduler.paused_for(CONVERGENCE):
            self._scheduler.pause(CONVERGENCE)
            log.info(
                f"trace clock held at {trace_ms / 1000:.1f} s: the simulated cluster is behind the recording",
                extra={"ctx": {"replay": self.name}},
            )
        elif not hold and self._scheduler.paused_for(CONVERGENCE):
            self._scheduler.resume(CONVERGENCE)

    async def _sample_once(self) -> None:
        await self._follow_root_pause()
        try:
            pods = await self._cluster.list_objects("v1", "Pod", label_selector=f"{REPLAY_LABEL}={self.name}")
        except KubeApiError as exc:
            log.warning("cannot sample the replay's pods", extra={"ctx": {"reason": str(exc)}})
            return
        running = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and not (p.get("metadata") or {}).get("deletionTimestamp")
        ]
        nodes = {(p.get("spec") or {}).get("nodeName") for p in running} - {None}
        at = self._scheduler.sim_elapsed_ms()
        now = self._clock.now()
        if self._last_sample_at is not None and self._scheduler.started_at is not None:
            self.report.largest_sample_gap_s = max(
                self.report.largest_sample_gap_s, now - self._last_sample_at
            )
        self._last_sample_at = now
        if self._autoscale is not None:
            await self._sample_autoscaler(at, now, pods)
        counts = count_pods(pods, RECORDED_OWNER_ANNOTATION)
        by_owner = {owner: c.running for owner, c in counts.items() if c.running}
        self.report.add_sample(at, len(running), len(nodes), by_owner)
        self._govern(at, counts)
        if self._on_progress is not None:
            stats = self._scheduler.stats
            self._on_progress(
                ReplayProgress(
                    steps_done=stats.finished,
                    steps_total=len(self._plan.steps),
                    trace_ms=self._scheduler.sim_elapsed_ms(),
                    wall_s=self._clock.now() - self._started,
                    failed=self.report.failed,
                    pods_running=len(running),
                )
            )
