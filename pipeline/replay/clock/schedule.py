"""The time-scaled scheduler: runs each replay step at its absolute deadline.

Step ``i`` recorded at trace time ``ts_i`` is due at ``t0 + (ts_i − ts_0) / speed`` on a monotonic clock
(plus the time spent paused). Deadlines are absolute, so time spent applying earlier steps never shifts
later ones (SimKube sleeps whole seconds between events and accumulates that drift; see
``reference/simkube.md`` §4).

* Steps due at the same time are started together; at most ``max_in_flight`` run at once (the
  dispatcher waits for a free slot, so a slow apiserver causes lateness, which is measured, not an
  unbounded task pile).
* Steps of one object (same ``key``) run in trace order: a step waits for its predecessor on that key.
* ``pause()``/``resume()`` stop the trace clock (steps due by the instant it stopped still start);
  ``limit(trace_ms)`` lets it run only up to that trace instant, where it stops by itself (the
  convergence governor's look-ahead: the clock must not run where nobody has looked at the cluster);
  ``stop()`` stops dispatching and lets started steps
  finish. ``duration_ms`` cuts the trace (steps later than it are skipped) or extends the run (the
  scheduler waits until the end of the duration after the last step).
* Lateness (start of a step minus its deadline, in ms) is recorded per step; the clock is injectable so
  tests run on virtual time.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from pipeline.model.errors import ConfigError

T = TypeVar("T")

LIMIT = "limit"
"""The pause reason while the trace clock stands at its :meth:`Scheduler.limit`."""


class Clock(Protocol):
    """A monotonic clock in seconds and a way to sleep until one of its instants."""

    def now(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` (the event loop's clock on Linux), millisecond precision.

    ``asyncio.sleep`` may wake a little early or up to one loop iteration late; the final sub-millisecond
    remainder is left to the loop (its timer resolution is ~1 ms), which keeps lateness in the low ms.
    """

    def now(self) -> float:
        return time.monotonic()

    async def sleep_until(self, deadline: float) -> None:
        # a loop, not one sleep: the loop's timer may fire a fraction of a millisecond early
        while (remaining := deadline - time.monotonic()) > 0:  # noqa: ASYNC110 - deadline, not a condition
            await asyncio.sleep(remaining)


async def pause(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` on ``clock`` (the real one in service; virtual time in tests)."""
    await clock.sleep_until(clock.now() + seconds)


@dataclass(frozen=True, slots=True)
class ScheduledStep(Generic[T]):
    """One unit of replay work: ``payload`` for the object ``key``, recorded at trace time ``ts_ms``."""

    ts_ms: int
    key: str
    payload: T


LATENESS_SAMPLES = 100_000
"""Lateness values kept: a replay following a live topic runs for months, its memory must not grow."""


@dataclass(slots=True)
class ScheduleStats:
    """What the scheduler did. ``lateness_ms`` holds one value per started step, in start order, up to
    :data:`LATENESS_SAMPLES` steps; beyond, a uniform sample of that size of all of them (so quantiles
    stay representative), while ``lateness_count`` and ``lateness_max_ms`` stay exact."""

    started: int = 0
    finished: int = 0
    skipped_after_duration: int = 0
    not_started: int = 0
    lateness_ms: list[float] = field(default_factory=list)
    trace_position_ms: int = 0
    lateness_count: int = 0
    lateness_max_ms: float | None = None
    _rng: random.Random = field(default_factory=lambda: random.Random(0), repr=False, compare=False)

    def add_lateness(self, value_ms: float) -> None:
        """Count one step's lateness (reservoir sampling once the list is full: Vitter's algorithm R)."""
        self.lateness_count += 1
        if self.lateness_max_ms is None or value_ms > self.lateness_max_ms:
            self.lateness_max_ms = value_ms
        if len(self.lateness_ms) < LATENESS_SAMPLES:
            self.lateness_ms.append(value_ms)
            return
        slot = self._rng.randrange(self.lateness_count)
        if slot < LATENESS_SAMPLES:
            self.lateness_ms[slot] = value_ms

    def lateness_percentile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1, nearest rank) of lateness in ms, or None if nothing ran."""
        return percentile(self.lateness_ms, q)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile; None for an empty list."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def rounded_percentile(values: list[float], q: float) -> float | None:
    """:func:`percentile` rounded to three decimals, as the reports give it; None for an empty list."""
    value = percentile(values, q)
    return None if value is None else round(value, 3)


class Scheduler(Generic[T]):
    """Runs :class:`ScheduledStep` s at scaled, absolute deadlines; see the module docstring."""

    def __init__(
        self,
        run_step: Callable[[ScheduledStep[T]], Awaitable[None]],
        *,
        speed: float = 1.0,
        max_in_flight: int = 32,
        duration_ms: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not speed > 0 or math.isinf(speed):
            raise ConfigError(f"replay speed must be a positive finite number, got {speed}")
        if max_in_flight < 1:
            raise ConfigError(f"max in-flight steps must be at least 1, got {max_in_flight}")
        if duration_ms is not None and duration_ms < 0:
            raise ConfigError(f"replay duration must not be negative, got {duration_ms} ms")
        self._run_step = run_step
        self.speed = speed
        self._slots = asyncio.Semaphore(max_in_flight)
        self.duration_ms = duration_ms
        self.clock: Clock = clock or MonotonicClock()
        self.stats = ScheduleStats()
        self._tail: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._t0: float | None = None
        self._paused_total = 0.0
        self._paused_at: float | None = None
        self._paused_ms = 0.0
        """Where the trace clock stands while paused (exact at a limit, not recomputed from wall time)."""
        self._pause_reasons: set[str] = set()
        self._stopped = False
        self._limit_ms: float | None = None
        self._wakeup = asyncio.Event()  # set on pause, resume and stop: wakes a sleeping dispatcher

    # ---- control (safe from any task of the loop) -----------------------------------------------
    def pause(self, reason: str = "requested") -> None:
        """Stop the trace clock; started steps finish, no new step starts until :meth:`resume`.

        Pauses have reasons (a person, the Simulation controller, the cluster falling behind): the
        clock runs again only once every reason that paused it has resumed it."""
        self._reach_limit()
        self._pause_reasons.add(reason)
        if self._paused_at is None:
            self._paused_at = self.clock.now()
            self._paused_ms = self._elapsed_at(self._paused_at)
            self._wakeup.set()

    def resume(self, reason: str = "requested") -> None:
        """Withdraw ``reason``'s pause; the trace clock restarts where it stopped once none is left."""
        self._pause_reasons.discard(reason)
        if self._paused_at is not None and not self._pause_reasons:
            self._paused_total += self.clock.now() - self._paused_at
            self._paused_at = None
            self._wakeup.set()

    def paused_for(self, reason: str) -> bool:
        self._reach_limit()
        return reason in self._pause_reasons

    def limit(self, trace_ms: float | None) -> None:
        """Let the trace clock run up to ``trace_ms`` of trace time and stand still there until the
        limit moves on (None: no limit). Steps due at the limit start; later ones wait."""
        self._reach_limit()
        self._limit_ms = trace_ms
        if self.paused_for(LIMIT) and (trace_ms is None or trace_ms > self.sim_elapsed_ms()):
            self.resume(LIMIT)
        self._wakeup.set()

    @property
    def at_limit(self) -> bool:
        """Whether the trace clock stands at its limit."""
        return self.paused_for(LIMIT)

    def limit_reached_at(self) -> float | None:
        """The clock instant the trace clock reaches its limit if it runs on as it does now (None: no
        limit, or the clock stands still for another reason)."""
        self._reach_limit()
        if self._limit_ms is None or self._t0 is None or self._paused_at is not None:
            return None
        return self._instant_of(self._limit_ms)

    def _instant_of(self, offset_ms: float) -> float:
        """The clock instant the trace clock reaches ``offset_ms`` while it runs."""
        assert self._t0 is not None
        return self._t0 + self._paused_total + offset_ms / 1000.0 / self.speed

    def _reach_limit(self) -> None:
        """If the running clock has passed its limit since it was last looked at, it stopped there:
        paused as of the instant it reached the limit (so no trace time beyond it is ever counted)."""
        if self._limit_ms is None or self._t0 is None or self._paused_at is not None:
            return
        reached = self._instant_of(self._limit_ms)
        if self.clock.now() >= reached:
            self._pause_reasons.add(LIMIT)
            self._paused_at = reached
            self._paused_ms = self._limit_ms
            self._wakeup.set()

    def set_speed(self, speed: float) -> None:
        """Run the trace clock at ``speed`` from now on; trace time covered so far stays as it is (the
        clock is re-anchored), so no step already started becomes early or late by the change."""
        if not speed > 0 or math.isinf(speed):
            raise ConfigError(f"replay speed must be a positive finite number, got {speed}")
        if self._t0 is not None:
            covered_ms = self.sim_elapsed_ms()
            now = self._paused_at if self._paused_at is not None else self.clock.now()
            self._t0 = now - self._paused_total - covered_ms / 1000.0 / speed
        self.speed = speed
        self._wakeup.set()

    def stop(self) -> None:
        """Start no further step; :meth:`run` returns once started steps finished. Safe to call twice."""
        self._stopped = True
        self._wakeup.set()

    @property
    def started_at(self) -> float | None:
        """The clock instant the first step was due (None before :meth:`run`)."""
        return self._t0

    @property
    def paused(self) -> bool:
        return self._paused_at is not None

    @property
    def stopped(self) -> bool:
        return self._stopped

    def deadline(self, offset_ms: int) -> float:
        """The clock instant a step ``offset_ms`` after the first one is due (run must have started)."""
        assert self._t0 is not None, "deadline() before run()"
        return self._instant_of(offset_ms)

    def sim_elapsed_ms(self) -> float:
        """Trace time covered so far (wall time since start, minus pauses, times speed), never past
        ``duration_ms``: the trace ends there. A sample taken while the last steps drain, or while the
        cluster is waited for at the end, is of the trace's end; at speed max the clock had run 2.6
        trace seconds past a range's end by the last sample, so the report judged an instant the range
        does not have."""
        if self._t0 is None:
            return 0.0
        self._reach_limit()
        covered = self._paused_ms if self._paused_at is not None else self._elapsed_at(self.clock.now())
        return covered if self.duration_ms is None else min(covered, float(self.duration_ms))

    def _elapsed_at(self, now: float) -> float:
        """Trace time covered by clock instant ``now`` if the clock ran since the last pause."""
        if self._t0 is None:
            return 0.0
        return max(0.0, (now - self._t0 - self._paused_total) * 1000.0 * self.speed)

    # ---- running ----------------------------------------------------------------------------------
    async def run(
        self,
        steps: Iterable[ScheduledStep[T]] | AsyncIterable[ScheduledStep[T]],
        *,
        first_due_at: Callable[[int], float] | None = None,
    ) -> ScheduleStats:
        """Dispatch ``steps`` (sorted by ``ts_ms``) at their deadlines; returns when all started ones
        finished. An exception of ``run_step`` is a bug of the caller (it must report per-step failures
        itself); it cancels the other steps and propagates.

        ``steps`` may be an async stream (following a live topic): it is read as steps become due, a
        step recorded before the first one is due at once instead of being an error, and :meth:`stop`
        ends the stream. ``first_due_at(ts_ms)`` then anchors the clock: the clock instant the first
        step is due (in the past to catch up), instead of "now".
        """
        self._t0 = self.clock.now()
        streaming = not isinstance(steps, Iterable)
        first_ts: int | None = None
        try:
            async for step in _as_async(steps):
                if first_ts is None:
                    first_ts = step.ts_ms
                    if first_due_at is not None:
                        self._t0 = first_due_at(step.ts_ms)
                offset = step.ts_ms - first_ts
                if offset < 0 and streaming:
                    offset = 0
                elif offset < 0:
                    raise ValueError(f"steps are not sorted by time: {step.key} at {step.ts_ms}")
                if self.duration_ms is not None and offset > self.duration_ms:
                    self.stats.skipped_after_duration += 1
                    continue
                if not await self._wait_until_due(offset):
                    self.stats.not_started += 1
                    if streaming:
                        break  # a live stream has no end of its own
                    continue
                await self._slots.acquire()
                self._start(step, offset)
            if self.duration_ms is not None:
                await self._wait_until_due(self.duration_ms)
            await self._drain()
        except BaseException:
            for task in self._tasks:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*self._tasks, return_exceptions=True)
            raise
        return self.stats

    async def _drain(self) -> None:
        while self._tasks:
            done = await asyncio.gather(*list(self._tasks), return_exceptions=True)
            for result in done:
                if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                    raise result

    async def _wait_until_due(self, offset_ms: int) -> bool:
        """Sleep until the step at ``offset_ms`` is due, honouring pause and stop; False if stopped."""
        while not self._stopped:
            self._reach_limit()
            if self._paused_at is not None:
                # The trace clock stands still at the instant it was paused, and a step due by then
                # (late: the in-flight slots were full, or the loop was busy) still belongs to that
                # instant. Holding it back deadlocked the convergence governor: it held the clock
                # for owners whose creating steps were due but not yet started, which only the
                # clock's moving on would start (measured at 1,000 nodes: 101 of 200 Deployments
                # waited a minute, until the governor gave up on them).
                if offset_ms <= self._paused_ms:
                    self.stats.trace_position_ms = offset_ms
                    return True
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            due = self.deadline(offset_ms)
            beyond_limit = self._limit_ms is not None and offset_ms > self._limit_ms
            if beyond_limit:
                # wake when the clock reaches its limit, where it stops (next round of the loop)
                due = self.limit_reached_at() or due
            if self.clock.now() >= due and not beyond_limit:
                self.stats.trace_position_ms = offset_ms
                return True
            if self.clock.now() >= due:
                continue
            self._wakeup.clear()
            sleeper = asyncio.ensure_future(self.clock.sleep_until(due))
            waker = asyncio.ensure_future(self._wakeup.wait())
            try:
                await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for fut in (sleeper, waker):
                    if not fut.done():
                        fut.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await fut
        return False

    def _start(self, step: ScheduledStep[T], offset_ms: int) -> None:
        previous = self._tail.get(step.key)
        task = asyncio.create_task(self._execute(step, offset_ms, previous), name=f"replay-step {step.key}")
        self._tail[step.key] = task
        self._tasks.add(task)
        task.add_done_callback(self._forget(step.key))

    def _forget(self, key: str) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if self._tail.get(key) is task:
                del self._tail[key]

        return done

    async def _execute(
        self, step: ScheduledStep[T], offset_ms: int, previous: asyncio.Task[None] | None
    ) -> None:
        try:
            if previous is not None:
                # one object's changes stay in order; the predecessor's outcome is its own business
                await asyncio.gather(previous, return_exceptions=True)
            self.stats.add_lateness((self.clock.now() - self.deadline(offset_ms)) * 1000.0)
            self.stats.started += 1
            await self._run_step(step)
            self.stats.finished += 1
        finally:
            self._slots.release()


async def _as_async(steps: Iterable[T] | AsyncIterable[T]) -> AsyncIterator[T]:
    if isinstance(steps, AsyncIterable):
        async for step in steps:
            yield step
    else:
        for step in steps:
            yield step
