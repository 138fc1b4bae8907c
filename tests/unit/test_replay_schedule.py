"""The time-scaled scheduler on virtual time: deadlines, ordering per object, concurrency, pause, duration."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pipeline.model.errors import ConfigError
from pipeline.replay.clock.schedule import LIMIT, MonotonicClock, ScheduledStep, Scheduler, percentile


class FakeClock:
    """Virtual time: sleeping jumps the clock to the deadline (after letting other tasks run)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    async def sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(0)
        self.t = max(self.t, deadline)
        await asyncio.sleep(0)


class VirtualClock:
    """Discrete-event virtual time for tests with several sleeping tasks: time moves to the earliest
    deadline any task sleeps until, once every task has had its turns (:data:`TURNS` loop iterations
    without anyone waking), so sleepers wake in deadline order, each at its own deadline. (FakeClock
    jumps to whichever deadline is slept on first.)"""

    TURNS = 20

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self._deadlines: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep_until(self, deadline: float) -> None:
        self._deadlines.append(deadline)
        try:
            while self.t < deadline:
                for _ in range(self.TURNS):
                    await asyncio.sleep(0)
                    if self.t >= deadline:
                        return
                if min(self._deadlines) >= deadline:  # nobody wants to wake earlier: time moves on
                    self.t = deadline
        finally:
            self._deadlines.remove(deadline)


def steps(*spec: tuple[int, str]) -> list[ScheduledStep[str]]:
    return [ScheduledStep(ts, key, f"{key}@{ts}") for ts, key in spec]


async def test_steps_start_at_scaled_absolute_deadlines_without_drift() -> None:
    clock = FakeClock()
    started: list[tuple[str, float]] = []

    async def run(step: ScheduledStep[str]) -> None:
        started.append((step.payload, clock.now() - 1000.0))
        clock.t += 0.050  # every apply takes 50 ms of wall time: must not push later deadlines

    sched: Scheduler[str] = Scheduler(run, speed=10, clock=clock)
    stats = await sched.run(steps((5_000, "a"), (6_000, "b"), (7_000, "c"), (25_000, "d")))

    assert [p for p, _ in started] == ["a@5000", "b@6000", "c@7000", "d@25000"]
    assert [round(t, 3) for _, t in started] == [0.0, 0.1, 0.2, 2.0]
    assert stats.started == stats.finished == 4
    assert max(stats.lateness_ms) < 1e-6


async def test_same_object_steps_stay_in_order_even_when_due_together() -> None:
    clock = FakeClock()
    order: list[str] = []
    gate = asyncio.Event()

    async def run(step: ScheduledStep[str]) -> None:
        if step.payload == "x@0":
            await gate.wait()  # the first change of x is slow
        order.append(step.payload)
        if step.payload == "y@0":
            gate.set()

    sched: Scheduler[str] = Scheduler(run, speed=1, clock=clock, max_in_flight=8)
    await sched.run(steps((0, "x"), (0, "y"), (0, "x")))
    # y overtakes the slow x, but the second change of x waits for the first
    assert order == ["y@0", "x@0", "x@0"]


async def test_concurrency_is_bounded_and_lateness_is_measured() -> None:
    clock = FakeClock()
    in_flight = 0
    peak = 0

    async def run(step: ScheduledStep[str]) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0)
        clock.t += 0.010
        in_flight -= 1

    sched: Scheduler[str] = Scheduler(run, speed=1, clock=clock, max_in_flight=3)
    stats = await sched.run(steps(*[(0, f"k{i}") for i in range(9)]))
    assert peak == 3
    assert stats.finished == 9
    # later steps waited for slots: their lateness is real and recorded
    assert percentile(stats.lateness_ms, 1.0) == pytest.approx(max(stats.lateness_ms))
    assert max(stats.lateness_ms) >= 10.0


async def test_pause_shifts_every_later_deadline_by_the_paused_time() -> None:
    clock = FakeClock()
    started: list[float] = []
    sched: Scheduler[str]

    async def run(step: ScheduledStep[str]) -> None:
        started.append(round(clock.now() - 1000.0, 3))
        if step.key == "a":
            sched.pause()
            clock.t += 30.0  # 30 s pass while paused
            sched.resume()

    sched = Scheduler(run, speed=2, clock=clock)
    await sched.run(steps((0, "a"), (4_000, "b"), (6_000, "c")))
    assert started == [0.0, 32.0, 33.0]


async def test_steps_due_before_a_pause_still_start_while_it_lasts() -> None:
    """A pause stops the trace clock at an instant; steps due by then that had not started (every
    in-flight slot was busy) start anyway, and later ones wait for the resume."""
    clock = FakeClock()
    started: list[tuple[str, float]] = []
    sched: Scheduler[str]
    release = asyncio.Event()

    async def run(step: ScheduledStep[str]) -> None:
        started.append((step.key, round(clock.now() - 1000.0, 3)))
        if step.key == "slow":
            clock.t += 5.0  # the apiserver takes 5 s: "due" (at 1 s) waits for the only slot
            sched.pause("governor")
            release.set()

    started_while_paused: list[str] = []

    async def resume_later() -> None:
        await release.wait()
        for _ in range(20):  # let the dispatcher run while the clock is held
            await asyncio.sleep(0)
        started_while_paused.extend(k for k, _ in started)
        clock.t += 60.0
        sched.resume("governor")

    sched = Scheduler(run, speed=1, clock=clock, max_in_flight=1)
    resumer = asyncio.create_task(resume_later())
    await sched.run(steps((0, "slow"), (1_000, "due"), (10_000, "later")))
    await resumer
    assert started_while_paused == ["slow", "due"], "a step due before the pause started in it"
    # paused at 5 s for 60 s: "later" (10 s) starts at 70 s, "due" at once during the pause
    assert started == [("slow", 0.0), ("due", 5.0), ("later", 70.0)]


async def test_stop_prevents_new_steps_and_counts_them() -> None:
    clock = FakeClock()
    ran: list[str] = []
    sched: Scheduler[str]

    async def run(step: ScheduledStep[str]) -> None:
        ran.append(step.key)
        sched.stop()

    sched = Scheduler(run, clock=clock)
    stats = await sched.run(steps((0, "a"), (1_000, "b"), (2_000, "c")))
    assert ran == ["a"]
    assert stats.not_started == 2


async def test_duration_cuts_the_trace_and_extends_the_run() -> None:
    clock = FakeClock()
    ran: list[str] = []

    async def run(step: ScheduledStep[str]) -> None:
        ran.append(step.key)

    cut: Scheduler[str] = Scheduler(run, clock=clock, speed=1, duration_ms=1_500)
    stats = await cut.run(steps((0, "a"), (1_000, "b"), (2_000, "c")))
    assert ran == ["a", "b"]
    assert stats.skipped_after_duration == 1

    clock2 = FakeClock()
    longer: Scheduler[str] = Scheduler(run, clock=clock2, speed=2, duration_ms=60_000)
    await longer.run(steps((0, "z")))
    assert clock2.now() - 1000.0 == pytest.approx(30.0)


async def test_the_trace_clock_stops_at_the_duration_while_the_run_ends() -> None:
    """What is sampled after the last step (while steps drain, while the cluster is waited for) is of
    the trace's end, never of an instant past it."""
    clock = FakeClock()

    async def run(step: ScheduledStep[str]) -> None:
        clock.t += 3.0  # a step that takes 3 wall seconds, past the end at speed 10

    sched: Scheduler[str] = Scheduler(run, clock=clock, speed=10, duration_ms=20_000)
    await sched.run(steps((0, "a"), (19_000, "b")))
    assert clock.now() - 1000.0 > 2.0 + 3.0  # the run ended past the end in wall time
    assert sched.sim_elapsed_ms() == 20_000
    sched.set_speed(100)  # a new speed after the end moves nothing
    clock.t += 5.0
    assert sched.sim_elapsed_ms() == 20_000


async def test_unsorted_steps_are_rejected() -> None:
    async def run(step: ScheduledStep[str]) -> None:
        return None

    sched: Scheduler[str] = Scheduler(run, clock=FakeClock())
    with pytest.raises(ValueError, match="not sorted"):
        await sched.run(steps((1_000, "a"), (0, "b")))


@pytest.mark.parametrize(("speed", "slots"), [(0, 1), (-1, 1), (float("inf"), 1), (1, 0)])
def test_invalid_settings_are_config_errors(speed: float, slots: int) -> None:
    async def run(step: ScheduledStep[str]) -> None:
        return None

    with pytest.raises(ConfigError):
        Scheduler(run, speed=speed, max_in_flight=slots)


async def test_real_clock_never_starts_a_step_before_its_deadline() -> None:
    # how late steps start is measured by bench/bench_replay.py, not asserted here (shared machines)
    started: list[float] = []
    clock = MonotonicClock()

    async def run(step: ScheduledStep[str]) -> None:
        started.append(clock.now())

    sched: Scheduler[str] = Scheduler(run, speed=10, clock=clock)
    stats = await sched.run(steps(*[(i * 100, f"k{i}") for i in range(20)]))  # every 10 ms of wall time
    assert stats.finished == 20
    assert len(stats.lateness_ms) == 20
    assert min(stats.lateness_ms) >= 0.0


async def test_the_trace_clock_stops_at_its_limit_until_the_limit_moves_on() -> None:
    clock = VirtualClock()
    started: list[tuple[str, float]] = []

    async def run(step: ScheduledStep[str]) -> None:
        started.append((step.payload, round(clock.now() - 1000.0, 6)))

    sched: Scheduler[str] = Scheduler(run, speed=10, clock=clock)
    sched.limit(5_000)  # set before the run: the clock may cover 5 s of trace (0.5 s of wall)
    running = asyncio.create_task(sched.run(steps((0, "a"), (5_000, "b"), (6_000, "c"))))
    await clock.sleep_until(1003.0)
    assert sched.at_limit
    assert sched.sim_elapsed_ms() == 5_000  # exactly: no wall-time rounding beyond the limit
    assert started == [("a@0", 0.0), ("b@5000", 0.5)]  # a step due at the limit starts
    sched.limit(8_000)  # the clock goes on from where it stood, as after a pause
    assert not sched.paused_for(LIMIT)
    await running
    assert started[-1] == ("c@6000", 3.1)
    assert sched.stats.lateness_ms == [0.0, 0.0, 0.0]  # the limit's wait is not lateness
    await clock.sleep_until(1010.0)
    assert sched.sim_elapsed_ms() == 8_000  # the run is over, the clock stands at the limit


class TraceClockMachine(RuleBasedStateMachine):
    """The trace clock under pauses, limits and new speeds, against a naive model that moves the trace
    position step by step: on while it runs, capped at the limit."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.sched: Scheduler[str] = Scheduler(_no_step, speed=1, clock=self.clock)
        asyncio.run(self.sched.run([]))  # anchors trace time 0 at the clock's now
        self.position = 0.0
        self.speed = 1.0
        self.reasons: set[str] = set()
        self.limit: float | None = None
        self.beyond_limit = False
        """Whether the clock would have run clearly past its limit: it must stand there."""

    @rule(seconds=st.floats(0.001, 5.0))
    def time_passes(self, seconds: float) -> None:
        self.clock.t += seconds
        if not self.reasons:
            self.position += seconds * self.speed * 1000
            if self.limit is not None:
                self.beyond_limit = self.beyond_limit or self.position > self.limit + 1e-3
                self.position = min(self.position, self.limit)

    @rule(reason=st.sampled_from(["requested", "convergence"]))
    def pause(self, reason: str) -> None:
        self.sched.pause(reason)
        self.reasons.add(reason)

    @rule(reason=st.sampled_from(["requested", "convergence"]))
    def resume(self, reason: str) -> None:
        self.sched.resume(reason)
        self.reasons.discard(reason)

    @rule(ahead=st.one_of(st.none(), st.floats(0.0, 10_000.0)))
    def set_limit(self, ahead: float | None) -> None:
        self.limit = None if ahead is None else self.position + ahead
        self.sched.limit(self.limit)
        self.beyond_limit = False

    @rule(speed=st.floats(0.5, 100.0))
    def set_speed(self, speed: float) -> None:
        self.sched.set_speed(speed)
        self.speed = speed

    @invariant()
    def the_clock_stands_where_the_model_does(self) -> None:
        assert self.sched.sim_elapsed_ms() == pytest.approx(self.position, rel=1e-9, abs=1e-6)
        if self.beyond_limit:
            assert self.sched.at_limit


async def _no_step(step: ScheduledStep[str]) -> None:
    pass


TestTraceClock = TraceClockMachine.TestCase
TestTraceClock.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
