"""The replayer: a trace file → rewritten objects → applied at scaled times → a fidelity report.

One replay, step by step:

1. :func:`load_trace` reads a kubetape trace/segment or a SimKube trace (v1 or v2, msgpack or JSON).
2. :func:`plan_replay` turns its APPLIED/DELETED events into scheduler steps and its POD_LIFECYCLE
   events into pod lifetimes (already divided by the speed) and the recorded running-pods timeline.
3. :class:`Replayer` creates the root object (a rule-less ClusterRole: cluster-scoped, built into every
   cluster, without any effect, so it can own namespaces, nodes and cluster-scoped objects alike),
   the virtual nodes, then runs the :class:`~pipeline.replay.schedule.Scheduler`. Each step rewrites one
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
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, Protocol, TypeVar

from pipeline.formats.assemble import simkube_to_trace
from pipeline.formats.segment import Segment, decode_segment, is_segment
from pipeline.formats.simkube import read_simkube_trace
from pipeline.io.kube_apply import ApiResource, ApiUnavailableError, KubeApiError
from pipeline.model.errors import ConfigError, FormatError, KubetapeError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ObjectKey
from pipeline.model.tracer_config import TracerConfig
from pipeline.replay.rewrite import (
    REPLAY_LABEL,
    RewriteSettings,
    RootRef,
    deletion_target,
    map_namespace,
    namespace_object,
    recorded_node,
    rewrite_object,
    virtual_nodes,
)
from pipeline.replay.schedule import Clock, MonotonicClock, ScheduledStep, Scheduler, percentile

log = logging.getLogger(__name__)
R = TypeVar("R")

ROOT_API_VERSION = "rbac.authorization.k8s.io/v1"
ROOT_KIND = "ClusterRole"


class ReplayCluster(Protocol):
    """What the replayer needs from the simulated cluster (:class:`pipeline.io.kube_apply.KubeApplier`)."""

    async def resource_for(self, api_version: str, kind: str) -> ApiResource: ...

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]: ...

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]: ...

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
    ) -> bool: ...


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
    keep: bool = False
    """Leave the simulated objects in the cluster (no cleanup)."""
    sample_interval_s: float = 1.0
    cleanup_timeout_s: float = 180.0
    node_ready_timeout_s: float = 30.0
    namespace_ready_timeout_s: float = 10.0

    def resolved_name(self) -> str:
        return self.replay_name or f"replay-{uuid.uuid4().hex[:8]}"


# ---- planning -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What to apply when, and the recorded pod lifetimes (scaled), all derived from one trace."""

    steps: list[ScheduledStep[Event]]
    lifetimes_ms: dict[ObjectKey, float]
    """Scaled pod lifetime per lifecycle owner (a bare pod is its own owner); absent = runs forever."""
    recorded_running: list[tuple[int, int]]
    """(trace offset ms, pods running) at each change, from the recorded lifecycles."""
    start_ms: int
    end_ms: int
    gaps: int
    config: TracerConfig | None


def load_trace(path: Path) -> Segment:
    """A kubetape segment/trace or a SimKube trace file as one kubetape trace; FormatError if neither."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    if is_segment(data):
        return decode_segment(data, str(path))
    return simkube_to_trace(read_simkube_trace(data, str(path)), str(path))


def plan_replay(trace: Segment, speed: float) -> ReplayPlan:
    """Scheduler steps and scaled lifetimes for ``trace`` (see the module docstring)."""
    events: list[Event] = list(trace.events)
    if trace.keyframe is not None:
        # a segment starting from a keyframe: its live objects exist at the start of the replay
        at = trace.header.start_ms
        events = [
            Event.applied(at, e.key, e.obj or {}, e.spec_hash)
            for e in sorted(trace.keyframe.objects.values(), key=lambda e: e.key)
        ] + [*trace.keyframe.lifecycles.values(), *events]
    steps = [
        ScheduledStep(e.ts_ms, str(e.key), e)
        for e in events
        if e.type in (EventType.APPLIED, EventType.DELETED)
    ]
    steps.sort(key=lambda s: s.ts_ms)  # stable: same-time changes keep their recorded order
    start_ms = steps[0].ts_ms if steps else trace.header.start_ms
    durations: dict[ObjectKey, list[int]] = {}
    unfinished: set[ObjectKey] = set()
    changes: list[tuple[int, int]] = []
    latest: dict[ObjectKey, Event] = {}
    for e in events:
        if e.type is EventType.POD_LIFECYCLE:
            latest[e.key] = e  # a pod's later lifecycle event supersedes its earlier one
    for e in latest.values():
        assert e.owner_key is not None
        assert e.pod_start_ms is not None
        changes.append((max(e.pod_start_ms - start_ms, 0), 1))
        if e.pod_end_ms is None:
            unfinished.add(e.owner_key)
        else:
            durations.setdefault(e.owner_key, []).append(e.pod_end_ms - e.pod_start_ms)
            changes.append((max(e.pod_end_ms - start_ms, 0), -1))
    # pods of one owner share one template, so they share one lifetime: the median recorded duration
    # (SimKube's webhook picks per pod; KWOK stages read the template's annotation)
    lifetimes = {owner: median(d) / speed for owner, d in durations.items()}
    running, timeline = 0, list[tuple[int, int]]()
    for offset, delta in sorted(changes):
        running += delta
        if timeline and timeline[-1][0] == offset:
            timeline[-1] = (offset, running)
        else:
            timeline.append((offset, running))
    gaps = sum(1 for e in events if e.type is EventType.GAP)
    return ReplayPlan(steps, lifetimes, timeline, start_ms, trace.header.end_ms, gaps, trace.config)


# ---- report ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReplayFailure:
    key: str
    ts_ms: int
    reason: str


@dataclass(slots=True)
class ReplayReport:
    """The fidelity report: what was applied, how late, and the replay's pods beside the recording's."""

    replay_name: str
    source: str
    speed: float
    steps: int = 0
    applied: int = 0
    deleted: int = 0
    deletes_missed: int = 0
    failed: int = 0
    retries: int = 0
    skipped_after_duration: int = 0
    not_started: int = 0
    gaps: int = 0
    failures: list[ReplayFailure] = field(default_factory=list)
    cluster_scoped: list[str] = field(default_factory=list)
    lateness_ms: list[float] = field(default_factory=list)
    replay_timeline: list[tuple[float, int, int]] = field(default_factory=list)
    """(trace offset ms, pods running, nodes used) sampled during the replay."""
    recorded_timeline: list[tuple[int, int]] = field(default_factory=list)
    wall_seconds: float = 0.0
    """From start to the last step's end (setup included, cleanup not)."""
    setup_seconds: float = 0.0
    """Creating the root, the virtual nodes and the namespaces, before trace time starts."""
    trace_span_ms: int = 0
    stopped_early: bool = False
    cleanup: str = "not run"

    def to_json(self) -> dict[str, Any]:
        def pct(q: float) -> float | None:
            value = percentile(self.lateness_ms, q)
            return None if value is None else round(value, 3)

        return {
            "replay_name": self.replay_name,
            "source": self.source,
            "speed": self.speed,
            "events": {
                "steps": self.steps,
                "applied": self.applied,
                "deleted": self.deleted,
                "deletes_missed": self.deletes_missed,
                "failed": self.failed,
                "retries": self.retries,
                "skipped_after_duration": self.skipped_after_duration,
                "not_started": self.not_started,
                "gaps_in_trace": self.gaps,
            },
            "failures": [{"key": f.key, "ts_ms": f.ts_ms, "reason": f.reason} for f in self.failures],
            "cluster_scoped_objects": self.cluster_scoped,
            "lateness_ms": {
                "p50": pct(0.5),
                "p99": pct(0.99),
                "max": pct(1.0),
                "count": len(self.lateness_ms),
            },
            "timeline": {
                "replay": [
                    {"trace_ms": round(t), "pods_running": p, "nodes_used": n}
                    for t, p, n in self.replay_timeline
                ],
                "recorded": [{"trace_ms": t, "pods_running": p} for t, p in self.recorded_timeline],
            },
            "wall_seconds": round(self.wall_seconds, 3),
            "setup_seconds": round(self.setup_seconds, 3),
            "trace_span_ms": self.trace_span_ms,
            "stopped_early": self.stopped_early,
            "cleanup": self.cleanup,
        }

    def summary(self) -> str:
        """A few readable lines for people."""
        lateness = self.to_json()["lateness_ms"]
        peak_replay = max((p for _, p, _ in self.replay_timeline), default=0)
        peak_recorded = max((p for _, p in self.recorded_timeline), default=0)
        lines = [
            f"replay {self.replay_name} of {self.source} at speed {self.speed:g}: "
            f"{self.wall_seconds:.1f} s wall for {self.trace_span_ms / 1000:.1f} s of trace"
            + (" (stopped early)" if self.stopped_early else ""),
            f"  events: {self.applied} applied, {self.deleted} deleted, {self.failed} failed, "
            f"{self.deletes_missed} deletes of nothing, {self.skipped_after_duration + self.not_started} "
            f"not replayed, {self.retries} retries",
            f"  lateness ms: p50 {lateness['p50']}  p99 {lateness['p99']}  max {lateness['max']}",
            f"  pods running (peak): replay {peak_replay}, recorded {peak_recorded}; "
            f"nodes used (peak): {max((n for _, _, n in self.replay_timeline), default=0)}",
            f"  cleanup: {self.cleanup}",
        ]
        if self.cluster_scoped:
            lines.append(f"  cluster-scoped objects applied as named: {', '.join(self.cluster_scoped[:10])}")
        for failure in self.failures[:20]:
            lines.append(f"  FAILED {failure.key} (trace ms {failure.ts_ms}): {failure.reason}")
        if len(self.failures) > 20:
            lines.append(f"  … and {len(self.failures) - 20} more failures (see the JSON report)")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ReplayProgress:
    """A snapshot for progress output."""

    steps_done: int
    steps_total: int
    trace_ms: float
    wall_s: float
    failed: int
    pods_running: int


def _is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


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
            replay_name=self.name, namespace_prefix=settings.namespace_prefix, config=plan.config
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
        self.report = ReplayReport(self.name, source, settings.speed, steps=len(plan.steps), gaps=plan.gaps)
        self.report.recorded_timeline = list(plan.recorded_running)
        span = plan.end_ms - plan.start_ms
        self.report.trace_span_ms = settings.duration_ms if settings.duration_ms is not None else span

    def stop(self) -> None:
        """Graceful stop: no new step starts; started ones finish; cleanup still runs."""
        self.report.stopped_early = True
        self._scheduler.stop()

    @property
    def trace_started_at(self) -> float | None:
        """The clock instant trace time started (after setup), for callers timing the replay."""
        return self._scheduler.started_at

    def pause(self) -> None:
        self._scheduler.pause()

    def resume(self) -> None:
        self._scheduler.resume()

    async def run(self) -> ReplayReport:
        started = self._started = self._clock.now()
        try:
            self._root = await self._create_root()
            await self._create_virtual_nodes()
            await self._prepare()
            self.report.setup_seconds = self._clock.now() - started
            sampler = asyncio.create_task(self._sample_forever(), name=f"replay-sampler {self.name}")
            try:
                stats = await self._scheduler.run(self._plan.steps)
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
            await self._sample_once()
            self.report.lateness_ms = list(stats.lateness_ms)
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

    # ---- setup and cleanup ------------------------------------------------------------------------
    async def _create_root(self) -> RootRef:
        name = f"kubetape-{self.name}"
        body: dict[str, Any] = {
            "apiVersion": ROOT_API_VERSION,
            "kind": ROOT_KIND,
            "metadata": {"name": name, "labels": {REPLAY_LABEL: self.name}},
            "rules": [],
        }
        live = await self._with_retries(lambda: self._cluster.apply(body))
        return RootRef(ROOT_API_VERSION, ROOT_KIND, name, live["metadata"]["uid"])

    async def _create_virtual_nodes(self) -> None:
        skeleton, count = self.settings.node_skeleton, self.settings.node_count
        if skeleton is None or count <= 0:
            return
        assert self._root is not None
        nodes = virtual_nodes(skeleton, count, self._rewrite, self._root)
        await asyncio.gather(*(self._apply_with_retries(node) for node in nodes))
        # start the trace clock only once KWOK marked the nodes Ready, or the first pods would wait
        # for them and start late
        selector = f"{REPLAY_LABEL}={self.name}"
        deadline = time.monotonic() + self.settings.node_ready_timeout_s
        while time.monotonic() < deadline:
            live = await self._cluster.list_objects("v1", "Node", label_selector=selector)
            if sum(1 for node in live if _is_ready(node)) >= len(nodes):
                return
            await asyncio.sleep(0.1)
        log.warning(
            "virtual nodes not Ready in time; replaying anyway",
            extra={"ctx": {"replay": self.name, "timeout_s": self.settings.node_ready_timeout_s}},
        )

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
        """Delete the root (foreground) and wait until the garbage collector removed everything."""
        assert self._root is not None
        begun = time.monotonic()
        try:
            await self._cluster.delete(
                ROOT_API_VERSION, ROOT_KIND, None, self._root.name, propagation="Foreground"
            )
            deadline = begun + self.settings.cleanup_timeout_s
            while await self._cluster.get(ROOT_API_VERSION, ROOT_KIND, None, self._root.name) is not None:
                if time.monotonic() > deadline:
                    self.report.cleanup = (
                        f"incomplete after {self.settings.cleanup_timeout_s:.0f} s: {ROOT_KIND} "
                        f"{self._root.name} still has dependents; delete it again later"
                    )
                    return
                await asyncio.sleep(0.5)
        except KubeApiError as exc:
            self.report.cleanup = f"failed: {exc}"
            return
        self.report.cleanup = f"done in {time.monotonic() - begun:.1f} s"

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
        deadline = time.monotonic() + self.settings.namespace_ready_timeout_s
        while await self._cluster.get("v1", "ServiceAccount", namespace, "default") is None:
            if time.monotonic() > deadline:
                log.warning(
                    "no default ServiceAccount yet; pods in the namespace may be refused",
                    extra={"ctx": {"namespace": namespace}},
                )
                return
            await asyncio.sleep(0.05)

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
                await asyncio.sleep(0.1 * 2**attempt)

    # ---- sampling ---------------------------------------------------------------------------------
    async def _sample_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sample_interval_s)
            await self._sample_once()

    async def _sample_once(self) -> None:
        try:
            pods = await self._cluster.list_objects("v1", "Pod", label_selector=f"{REPLAY_LABEL}={self.name}")
        except KubeApiError as exc:
            log.warning("cannot sample the replay's pods", extra={"ctx": {"reason": str(exc)}})
            return
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        nodes = {(p.get("spec") or {}).get("nodeName") for p in running} - {None}
        self.report.replay_timeline.append((self._scheduler.sim_elapsed_ms(), len(running), len(nodes)))
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
