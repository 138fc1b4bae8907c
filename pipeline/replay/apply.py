"""Writing the replay's objects: the client-side rate limit, retries with backoff, and one step of
the trace (an APPLIED or DELETED event) rewritten and written to the simulated cluster.

A failure of one step (unknown kind, rejected object, apiserver gone after retries, a recorded object
without the fields every object has) is recorded in the report with the object key and reason; the
replay goes on. A delete of nothing is counted, not an error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pipeline.model.errors import ApiUnavailableError, ConfigError, KubetapeError
from pipeline.model.events import Event, EventType
from pipeline.replay.clock.schedule import Clock, ScheduledStep, pause
from pipeline.replay.crds import CRD_KIND, not_the_replays, simulated_crd
from pipeline.replay.hpa.replay import HpaWrites
from pipeline.replay.hpa.targets import is_hpa
from pipeline.replay.owned import LiveUids, live_uid, name_recorded_owner, own_by_replayed
from pipeline.replay.plan import ReplayPlan
from pipeline.replay.ports import ReplayCluster
from pipeline.replay.report.report import ReplayFailure, ReplayReport
from pipeline.replay.rewrite import (
    RewriteSettings,
    RootRef,
    deletion_target,
    map_namespace,
    recorded_node,
    rewrite_object,
)

log = logging.getLogger(__name__)
R = TypeVar("R")

RETRY_BASE_S = 0.1
"""The first retry waits twice this, each further one twice as long as the one before."""


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


class Retrying:
    """Every write of the replay: within the rate limit (``qps``, bursts of ``burst``), retried up to
    ``retries`` times with exponential backoff while the apiserver is unavailable (429, 5xx, no
    answer). Each retry is counted in the report."""

    def __init__(
        self, clock: Clock, report: ReplayReport, *, retries: int, qps: float | None, burst: int
    ) -> None:
        self._clock = clock
        self._report = report
        self._retries = retries
        self._limiter = TokenBucket(qps, burst, clock) if qps else None

    async def __call__(self, call: Callable[[], Awaitable[R]]) -> R:
        attempt = 0
        while True:
            if self._limiter is not None:
                await self._limiter.acquire()
            try:
                return await call()
            except ApiUnavailableError:
                if attempt >= self._retries:
                    raise
                attempt += 1
                self._report.retries += 1
                await pause(self._clock, RETRY_BASE_S * 2**attempt)


class StepWriter:
    """Runs one scheduled step: rewrites its object for the replay and writes it (see module doc)."""

    def __init__(
        self,
        cluster: ReplayCluster,
        plan: ReplayPlan,
        rewrite: RewriteSettings,
        *,
        ensure_namespace: Callable[[str], Awaitable[None]],
        retrying: Retrying,
        report: ReplayReport,
        hpa_writes: HpaWrites | None = None,
    ) -> None:
        self._cluster = cluster
        self._hpa_writes = hpa_writes
        """With the simulated HPA deciding: HPAs time-scaled, their targets' replicas kept."""
        self._plan = plan
        self._rewrite = rewrite
        self._ensure_namespace = ensure_namespace
        """Creates a namespace once (and waits for its default ServiceAccount) before its first object."""
        self._retrying = retrying
        self._report = report
        self.root: RootRef | None = None
        """Set once setup created the root, which owns everything written."""
        self._live = LiveUids()

    async def run_step(self, step: ScheduledStep[Event]) -> None:
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
        self._report.failed += 1
        self._report.failures.append(ReplayFailure(str(event.key), offset, reason))
        log.warning("replay step failed", extra={"ctx": {"key": event.key, "reason": reason}})

    async def _apply_event(self, event: Event) -> None:
        assert event.obj is not None
        assert self.root is not None
        obj = event.obj
        if self._hpa_writes is None and is_hpa(obj):
            # the recorded replicas are replayed: a simulated HPA beside them would fight them (on a
            # cluster serving metrics) or fail to read any (elsewhere)
            self._report.hpa_writes_left_out += 1
            return
        resource = await self._cluster.resource_for(obj["apiVersion"], obj["kind"])
        kind = (resource.api_version, resource.kind)
        body: dict[str, Any]
        if kind == ("v1", "Namespace"):
            name = map_namespace(obj["metadata"]["name"], self._rewrite)
            body = rewrite_object(obj, self._rewrite, self.root, namespaced=False)
            body["metadata"]["name"] = name
        elif kind == ("v1", "Node"):
            body = recorded_node(obj, self._rewrite, self.root)
        else:
            lifetime = self._plan.lifetimes_ms.get(event.key)
            body = rewrite_object(
                obj, self._rewrite, self.root, namespaced=resource.namespaced, lifetime_ms=lifetime
            )
            own_by_replayed(body, await self._live.owners_of(obj, namespaced=resource.namespaced))
            recorded_owner = self._plan.recorded_owners.get(event.key)
            if recorded_owner is not None:
                name_recorded_owner(body, recorded_owner)
            if self._hpa_writes is not None:
                body = await self._hpa_writes.adjust(event, body)
            if kind[1] == CRD_KIND:
                if await not_the_replays(self._cluster, self.root, body["metadata"]["name"]):
                    return
                simulated_crd(body)
            if resource.namespaced:
                await self._ensure_namespace(body["metadata"]["namespace"])
            elif str(event.key) not in self._report.cluster_scoped:
                self._report.cluster_scoped.append(str(event.key))
        written, uid = self._live.writing(event.key, namespaced=resource.namespaced), None
        try:
            uid = live_uid(await self._retrying(lambda: self._cluster.apply(body)))
        finally:
            if not written.done():  # None when the write failed: dependents go without the reference
                written.set_result(uid)
        self._report.applied += 1

    async def _delete_event(self, event: Event) -> None:
        assert event.obj is not None
        obj = event.obj
        resource = await self._cluster.resource_for(obj["apiVersion"], obj["kind"])
        namespace, name = deletion_target(obj, self._rewrite, namespaced=resource.namespaced)
        if (resource.api_version, resource.kind) == ("v1", "Namespace"):
            name = map_namespace(name, self._rewrite)
        self._live.forget(event.key)
        if (
            resource.kind == CRD_KIND
            and self.root is not None
            and await not_the_replays(self._cluster, self.root, name)
        ):
            return
        found = await self._retrying(
            lambda: self._cluster.delete(resource.api_version, resource.kind, namespace, name)
        )
        if found:
            self._report.deleted += 1
        else:
            self._report.deletes_missed += 1
