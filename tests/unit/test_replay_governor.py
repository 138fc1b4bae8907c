"""Convergence-aware time scaling: the trace clock waits while the simulated cluster is behind."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.clock.governor import ConvergenceGovernor
from pipeline.replay.clock.sampler import CONVERGENCE, HOLD_CHECK_S, Sampler
from pipeline.replay.clock.schedule import ScheduledStep, Scheduler
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.report.pod_tally import PodCounts, PodSample, count_pods
from pipeline.replay.report.report import ReplayReport
from tests.unit.test_replay_replayer import MemoryCluster, applied, fast, pod, trace
from tests.unit.test_replay_schedule import VirtualClock

WEB = [(0, 2), (10_000, 5), (20_000, 3)]


async def _nothing(step: ScheduledStep[Event]) -> None:
    pass


def test_an_owner_behind_the_recordings_last_max_lag_holds_the_clock() -> None:
    governor = ConvergenceGovernor({"web": WEB}, max_lag_ms=5_000)
    # 12 s: the recording had 2 and 5 over the last 5 s, so 2 running is not behind (yet)
    assert governor.observe(0.0, 12_000, {"web": PodCounts(running=2, unscheduled=3)}) is False
    # 16 s: the recording has been at 5 for longer than the lag; 3 pods still wait for a node
    assert governor.observe(1.0, 16_000, {"web": PodCounts(running=2, unscheduled=3)}) is True
    assert governor.observe(1.5, 16_000, {"web": PodCounts(running=2, bound=3)}) is True
    assert governor.observe(2.5, 16_000, {"web": PodCounts(running=5)}) is False
    report = governor.report.to_json(5_000, 10.0)
    assert (report["holds"], report["held_seconds"]) == (1, 1.5)
    assert report["bottleneck_share"] == {"kwok": 0.5, "scheduling": 0.5}
    assert report["given_up_owners"] == {}


def test_too_many_pods_are_behind_too_and_a_missing_pod_is_the_controllers() -> None:
    governor = ConvergenceGovernor({"web": WEB}, max_lag_ms=1_000)
    assert governor.observe(0.0, 25_000, {"web": PodCounts(running=5)}) is True  # scale-down not done
    assert governor.observe(0.1, 25_000, {}) is True  # no pod at all: 0 against 3
    assert governor.report.bottlenecks == {"controllers": 2}


def test_an_owner_that_never_converges_is_given_up_after_the_longest_hold() -> None:
    governor = ConvergenceGovernor({"web": WEB, "api": [(0, 3)]}, max_lag_ms=1_000, max_hold_s=10)
    counts = {"web": PodCounts(running=0, unscheduled=5), "api": PodCounts(running=3)}
    assert governor.observe(0.0, 15_000, counts) is True
    assert governor.observe(9.0, 15_000, counts) is True
    assert governor.observe(10.5, 15_000, counts) is False  # given up: the clock runs on
    assert governor.report.given_up == {"web": 15_000}
    assert governor.observe(11.0, 16_000, counts) is False  # and web no longer holds it
    assert governor.observe(11.5, 17_000, {"web": PodCounts(running=5), "api": PodCounts(running=2)}) is False
    assert (
        governor.observe(11.6, 17_000, {"web": PodCounts(running=5), "api": PodCounts()}) is True
    )  # api: 0 of 3


def test_a_slow_cluster_that_keeps_converging_is_waited_for_past_the_longest_hold() -> None:
    """At scale the first pods take minutes to start: while the owners behind get closer, the hold
    goes on; once they stop getting closer for ``max_hold_s``, they are given up on."""
    big = [(0, 400)]
    governor = ConvergenceGovernor({"big": big}, max_lag_ms=1_000, max_hold_s=10)
    for second in range(0, 40, 2):  # 10 pods more every 2 s: 40 s of hold, 4x the longest
        running = 10 + 5 * second
        assert governor.observe(float(second), 5_000, {"big": PodCounts(running=running)}) is True, second
    assert governor.report.given_up == {}
    stuck = {"big": PodCounts(running=250, unscheduled=150)}
    assert governor.observe(45.0, 5_000, stuck) is True  # closer still (250 of 400): progress at 45 s
    assert governor.observe(55.0, 5_000, stuck) is True  # 10 s without progress: not more yet
    assert governor.observe(55.5, 5_000, stuck) is False  # more than 10 s: given up on
    assert governor.report.given_up == {"big": 5_000}
    report = governor.report.to_json(1_000, 10.0)
    assert (report["holds"], report["held_seconds"]) == (1, 55.5)


def test_progress_is_any_owner_behind_getting_closer_even_while_another_falls_behind() -> None:
    """One owner's pods start while another's are evicted (faster than the first gains): the owners
    behind get no closer in total, but one of them does at every sample, so the hold goes on; once
    none does for ``max_hold_s``, they are given up on together."""
    governor = ConvergenceGovernor({"up": [(0, 100)], "other": [(0, 50)]}, max_lag_ms=1_000, max_hold_s=10)
    for second in range(0, 30, 2):
        counts = {"up": PodCounts(running=2 * second), "other": PodCounts(running=50 - 3 * second)}
        assert governor.observe(float(second), 5_000, counts) is True, second
    assert governor.report.given_up == {}
    stuck = {"up": PodCounts(running=60, unscheduled=40), "other": PodCounts(running=0)}
    assert governor.observe(30.0, 5_000, stuck) is True  # up: 56 -> 60 running, closer
    assert governor.observe(40.0, 5_000, stuck) is True
    assert governor.observe(40.5, 5_000, stuck) is False
    assert governor.report.given_up == {"up": 5_000, "other": 5_000}


def test_an_owner_given_up_on_holds_the_clock_again_once_it_caught_up() -> None:
    governor = ConvergenceGovernor({"web": WEB}, max_lag_ms=1_000, max_hold_s=10)
    stuck = {"web": PodCounts(running=0, unscheduled=5)}
    assert governor.observe(0.0, 15_000, stuck) is True
    assert governor.observe(10.5, 15_000, stuck) is False
    assert governor.observe(11.0, 16_000, stuck) is False  # given up: does not hold
    assert governor.observe(12.0, 17_000, {"web": PodCounts(running=5)}) is False  # caught up
    # the recording goes to 3 at 20 s; 5 running there is behind again, and now it holds
    assert governor.observe(13.0, 22_000, {"web": PodCounts(running=5)}) is True


def test_pods_are_counted_by_recorded_owner_and_progress() -> None:
    def p(owner: str, phase: str | None, node: str | None = None, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"annotations": {"o": owner}}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}

    pods = [p("a", "Running", "n"), p("a", "Pending"), p("a", "Pending", "n"), p("a", "Running", "n", True)]
    pods += [p("b", "Succeeded", "n"), {"metadata": {}}]
    assert count_pods(pods, "o") == {"a": PodCounts(running=1, unscheduled=1, bound=1)}


class SlowKwokCluster(MemoryCluster):
    """Pods run ``delay_s`` (of ``clock``'s time) after they are applied, as on an overloaded control
    plane."""

    def __init__(self, delay_s: float, clock: VirtualClock) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.clock = clock
        self.applied_at: dict[str, float] = {}

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        live = await super().apply(obj, force=force)
        if obj["kind"] == "Pod":
            self.applied_at[obj["metadata"]["name"]] = self.clock.now()
            live["status"] = {"phase": "Pending"}
        return live

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]:
        for (k, _, name), live in self.objects.items():
            if k == "Pod" and self.clock.now() >= self.applied_at[name] + self.delay_s:
                live["status"] = {"phase": "Running"}
        return await super().list_objects(
            api_version, kind, label_selector=label_selector, namespace=namespace
        )


def _lifecycle(ts: int, name: str) -> Event:
    key = key_of(pod(name))
    return Event.pod_lifecycle(ts, key, owner_key=key, pod_spec_hash=1, start_ms=ts, end_ms=None)


async def test_the_trace_clock_waits_for_a_slow_cluster_and_the_report_says_so() -> None:
    # two pods 100 ms of trace apart at speed 1; each takes 0.4 s to run: without the governor the
    # second is applied while the first is still pending, with it (no pod of tolerance, so that one
    # pod can be behind) only once the first runs
    events = [
        applied(0, pod("first")),
        _lifecycle(0, "first"),
        applied(100, pod("second")),
        _lifecycle(100, "second"),
    ]
    plan = plan_replay(trace(events), speed=1)
    settings = replace(fast(keep=True), speed=1, sample_interval_s=0.02, max_lag_s=0.05, max_lag_tolerance=0)
    clock = VirtualClock()
    cluster = SlowKwokCluster(delay_s=0.4, clock=clock)
    report = await Replayer(cluster, plan, settings, clock=clock).run()

    assert report.failed == 0
    # the clock stood at trace 0.05 s (the first max_lag behind) until the first ran, 0.4 s after it
    # was applied, and a sample (0.02 s apart) saw it; the second was due 0.05 s of trace later
    apart = cluster.applied_at["second"] - cluster.applied_at["first"]
    assert 0.4 + 0.05 <= apart <= 0.4 + settings.sample_interval_s + 0.05 + 1e-9, apart
    assert report.convergence is not None
    assert report.verdict().verdict == "held", report.verdict()
    assert report.convergence["holds"] == 1
    # held from the sample at trace 0.05 s (where the first was max_lag behind) until it ran
    assert 0.4 - 0.05 - settings.sample_interval_s <= report.convergence["held_seconds"] <= 0.4
    assert report.convergence["achieved_speed"]["requested"] == 1
    assert report.convergence["largest_lag"]["lag_ms"] == 50.0  # no more than --max-lag while it moved
    assert "the trace clock waited for the cluster" in report.summary()
    assert (
        "largest lag while the clock moved: 0.05 s (core/Pod/prod/first at trace 0.05 s)" in report.summary()
    )

    clock = VirtualClock()
    unguarded_cluster = SlowKwokCluster(delay_s=0.4, clock=clock)
    unguarded = await Replayer(unguarded_cluster, plan, replace(settings, max_lag_s=None), clock=clock).run()
    assert unguarded.convergence is None
    assert unguarded_cluster.applied_at["second"] - unguarded_cluster.applied_at["first"] == pytest.approx(
        0.1
    )


class CountedPods:
    """A pod source whose counts the test sets: in memory (as a pod watch keeps them) or not (as a
    listing), counting its reads."""

    def __init__(self, *, in_memory: bool = True) -> None:
        self.in_memory = in_memory
        self.counts: dict[str, PodCounts] = {}
        self.reads = 0

    async def start(self) -> None:
        pass

    async def sample(self) -> PodSample:
        self.reads += 1
        return PodSample(
            running=sum(c.running for c in self.counts.values()), nodes=0, by_owner=dict(self.counts)
        )

    async def stop(self) -> None:
        pass


async def _held_at_15_s(
    clock: VirtualClock, pods: CountedPods
) -> tuple[Sampler, ConvergenceGovernor, Scheduler[Event]]:
    """A sampler whose governor holds the clock at trace 15 s: the recording has wanted 5 pods of web
    since 10 s, 5 s (the lag) ago, and 2 run. The clock stops by itself at each horizon the governor
    set (5 s ahead at most; 15 s, where web falls behind), and a sample is taken there."""
    scheduler: Scheduler[Event] = Scheduler(_nothing, speed=1, clock=clock)
    await scheduler.run([])  # anchors trace time 0 at the clock's now
    governor = ConvergenceGovernor({"web": WEB}, max_lag_ms=5_000)
    sampler = Sampler(
        MemoryCluster(),
        pods,
        scheduler,
        ReplayReport(replay_name="r", source="t", speed=1),
        clock,
        interval_s=1.0,
        governor=governor,
        seeker=None,
        autoscale=None,
        on_progress=None,
        steps_total=0,
    )
    pods.counts = {"web": PodCounts(running=2, bound=3)}
    for horizon_ms in (5_000, 10_000, 15_000):
        clock.t += 20.0  # long after: the clock stood at the horizon
        assert scheduler.sim_elapsed_ms() == horizon_ms
        await sampler.sample_once()
    assert governor.holding
    assert scheduler.paused_for(CONVERGENCE)
    return sampler, governor, scheduler


async def test_a_held_clock_goes_on_when_the_cluster_caught_up_not_at_the_next_sample() -> None:
    clock = VirtualClock()
    pods = CountedPods()
    sampler, governor, scheduler = await _held_at_15_s(clock, pods)
    held_at = clock.now()

    async def catch_up() -> None:  # the cluster catches up 0.25 s into the next interval
        await clock.sleep_until(held_at + 0.25)
        pods.counts = {"web": PodCounts(running=5)}

    catching_up = asyncio.create_task(catch_up())
    sampling = asyncio.create_task(sampler.sample_forever())
    while governor.holding and clock.now() < held_at + 5:
        await clock.sleep_until(clock.now() + 0.001)
    released_at = clock.now() - held_at
    sampling.cancel()
    await catching_up
    # released within one look (0.1 s) of catching up, not at the next sample 1 s after the last
    assert 0.25 <= released_at <= 0.25 + HOLD_CHECK_S + 0.001 + 1e-9, released_at
    # and the trace clock runs again from where it was held
    assert not scheduler.paused_for(CONVERGENCE)
    await clock.sleep_until(clock.now() + 1.0)
    assert scheduler.sim_elapsed_ms() > 15_000


async def test_a_listed_pod_source_is_only_read_at_each_sample() -> None:
    # listing every pod ten times a second would load the apiserver: only in-memory counts are polled,
    # and a listed clock that reached its horizon waits for the next sample
    clock = VirtualClock()
    pods = CountedPods(in_memory=False)
    sampler, _, _ = await _held_at_15_s(clock, pods)
    reads = pods.reads
    sampling = asyncio.create_task(sampler.sample_forever())
    await clock.sleep_until(clock.now() + 3.5)
    sampling.cancel()
    assert pods.reads - reads == 3, pods.reads  # one per second


async def test_the_clock_stops_at_the_governors_horizon_and_a_sample_is_taken_there() -> None:
    """At speed 1000 the clock would cover 500 s of trace between two samples; it stops where web,
    whose pods stay at 2, would be 5 s behind the change to 5 at trace 10 s, and is looked at there."""
    clock = VirtualClock()
    scheduler: Scheduler[Event] = Scheduler(_nothing, speed=1000, clock=clock)
    governor = ConvergenceGovernor({"web": WEB}, max_lag_ms=5_000, max_advance_ms=60_000)
    pods = CountedPods()
    pods.counts = {"web": PodCounts(running=2)}
    report = ReplayReport(replay_name="r", source="t", speed=1000)
    sampler = Sampler(
        MemoryCluster(),
        pods,
        scheduler,
        report,
        clock,
        interval_s=0.5,
        governor=governor,
        seeker=None,
        autoscale=None,
        on_progress=None,
        steps_total=0,
    )
    running = asyncio.create_task(scheduler.run([]))
    sampling = asyncio.create_task(sampler.sample_forever())
    await clock.sleep_until(clock.now() + 0.4)  # before the first regular sample
    assert scheduler.sim_elapsed_ms() == 15_000
    # looked at where it stopped: at 5 s, where web's first two pods would have been 5 s late had they
    # not been running, and at 15 s
    assert [s.trace_ms for s in report.owner_samples] == [5_000, 15_000]
    assert governor.holding
    sampling.cancel()
    scheduler.stop()
    await running
    lag = governor.report.to_json(5_000, 1000)["largest_lag"]
    assert lag == {"lag_ms": 5_000, "owner": "web", "trace_ms": 15_000}


async def test_at_the_end_of_trace_time_a_held_clock_waits_for_the_cluster_before_the_last_sample() -> None:
    """The replay's last instant is judged, as every instant is, by the state the cluster reached when
    the clock went on: not mid-way through the last change."""
    clock = VirtualClock()
    pods = CountedPods()
    sampler, governor, _ = await _held_at_15_s(clock, pods)
    held_at = clock.now()

    async def catch_up() -> None:
        await clock.sleep_until(held_at + 2.0)
        pods.counts = {"web": PodCounts(running=5)}

    catching_up = asyncio.create_task(catch_up())
    await sampler.sample_to_the_end()
    await catching_up
    assert not governor.holding
    assert held_at + 2.0 <= clock.now() <= held_at + 2.0 + HOLD_CHECK_S + 1e-9
