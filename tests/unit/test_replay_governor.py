"""Convergence-aware time scaling: the trace clock waits while the simulated cluster is behind."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.governor import ConvergenceGovernor
from pipeline.replay.plan import plan_replay
from pipeline.replay.pod_tally import PodCounts, PodSample, count_pods
from pipeline.replay.replayer import Replayer
from pipeline.replay.report import ReplayReport
from pipeline.replay.sampler import HOLD_CHECK_S, Sampler
from pipeline.replay.schedule import ScheduledStep, Scheduler
from tests.unit.test_replay_replayer import MemoryCluster, applied, fast, pod, trace
from tests.unit.test_replay_schedule import FakeClock

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
    """Pods run ``delay_s`` after they are applied, as on an overloaded control plane."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.applied_at: dict[str, float] = {}

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        live = await super().apply(obj, force=force)
        if obj["kind"] == "Pod":
            name = obj["metadata"]["name"]
            self.applied_at[name] = asyncio.get_running_loop().time()
            live["status"] = {"phase": "Pending"}
            asyncio.get_running_loop().call_later(self.delay_s, live["status"].update, {"phase": "Running"})
        return live


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
    cluster = SlowKwokCluster(delay_s=0.4)
    report = await Replayer(cluster, plan, settings).run()

    assert report.failed == 0
    assert cluster.applied_at["second"] - cluster.applied_at["first"] >= 0.35
    assert report.convergence is not None
    assert report.convergence["holds"] >= 1
    assert report.convergence["held_seconds"] >= 0.25
    assert report.convergence["achieved_speed"]["requested"] == 1
    assert "the trace clock waited for the cluster" in report.summary()

    unguarded_cluster = SlowKwokCluster(delay_s=0.4)
    unguarded = await Replayer(unguarded_cluster, plan, replace(settings, max_lag_s=None)).run()
    assert unguarded.convergence is None
    assert unguarded_cluster.applied_at["second"] - unguarded_cluster.applied_at["first"] < 0.35


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


async def _held_at_16_s(clock: FakeClock, pods: CountedPods) -> tuple[Sampler, ConvergenceGovernor]:
    """A sampler (one sample a second) whose governor holds the clock at trace 16 s: the recording
    has wanted 5 pods of web for longer than the 5 s lag, and 2 run."""
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
    clock.t += 16.0
    pods.counts = {"web": PodCounts(running=2, bound=3)}
    await sampler.sample_once()
    assert governor.holding
    return sampler, governor


async def test_a_held_clock_goes_on_when_the_cluster_caught_up_not_at_the_next_sample() -> None:
    clock = FakeClock()
    pods = CountedPods()
    sampler, governor = await _held_at_16_s(clock, pods)

    async def catch_up() -> None:  # the cluster catches up 0.25 s into the next interval
        while clock.now() < 1016.25:  # noqa: ASYNC110 (virtual time moves as the sampler sleeps)
            await asyncio.sleep(0)
        pods.counts = {"web": PodCounts(running=5)}

    catching_up = asyncio.create_task(catch_up())
    sampling = asyncio.create_task(sampler.sample_forever())
    while governor.holding and clock.now() < 1020:  # noqa: ASYNC110 (as above)
        await asyncio.sleep(0)
    released_at = clock.now()
    sampling.cancel()
    await catching_up
    # released within one look (0.1 s) of catching up, not at the next sample 1 s after the last
    assert 1016.25 <= released_at <= 1016.25 + HOLD_CHECK_S + 1e-9, released_at


async def test_a_listed_pod_source_is_only_read_at_each_sample() -> None:
    # listing every pod ten times a second would load the apiserver: only in-memory counts are polled
    clock = FakeClock()
    pods = CountedPods(in_memory=False)
    sampler, _ = await _held_at_16_s(clock, pods)
    sampling = asyncio.create_task(sampler.sample_forever())
    while clock.now() < 1019.5:  # noqa: ASYNC110 (virtual time moves as the sampler sleeps)
        await asyncio.sleep(0)
    sampling.cancel()
    assert pods.reads == 1 + 3, pods.reads  # the first sample, then one per second
