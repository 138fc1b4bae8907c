"""``--speed max``: the trace clock finds the speed the simulated cluster keeps up with; and the
simulated cluster's stated profile in the report."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.model.errors import ApiUnavailableError, ConfigError
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.clock.sampler import SpeedSeeker
from pipeline.replay.clock.schedule import ScheduledStep, Scheduler
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.setup import PROFILE_CONFIGMAP, note_zoned_nodes, read_cluster_profile
from tests.unit.test_replay_replayer import KwokLikeCluster, MemoryCluster, applied, fast, pod, trace
from tests.unit.test_replay_schedule import FakeClock, VirtualClock

ZONE_CHANGE = "kube-scheduler default topology spreading by hostname only"


async def test_a_new_speed_keeps_the_trace_time_covered_and_paces_what_follows() -> None:
    clock = FakeClock()

    async def run(step: ScheduledStep[str]) -> None:
        pass

    sched: Scheduler[str] = Scheduler(run, speed=1, clock=clock)
    await sched.run([])  # anchors the trace clock at 1000.0
    clock.t += 1.0
    sched.set_speed(10)
    assert sched.sim_elapsed_ms() == pytest.approx(1_000)  # nothing covered is lost or added
    assert sched.deadline(2_000) == pytest.approx(clock.t + 0.1)  # the next second of trace: 0.1 s
    clock.t += 0.5
    assert sched.sim_elapsed_ms() == pytest.approx(6_000)
    sched.pause()
    clock.t += 3.0
    sched.set_speed(2)  # while paused: the clock still stands still, and resumes at the new speed
    assert sched.sim_elapsed_ms() == pytest.approx(6_000)
    sched.resume()
    clock.t += 1.0
    assert sched.sim_elapsed_ms() == pytest.approx(8_000)
    with pytest.raises(ConfigError, match="positive finite"):
        sched.set_speed(0)


def test_the_seeker_speeds_up_while_the_cluster_keeps_up_and_halves_at_each_hold() -> None:
    seeker = SpeedSeeker(10)
    assert seeker.next(holding=False, new_hold=False) == 12.5
    assert seeker.next(holding=True, new_hold=True) == 6.25
    assert seeker.next(holding=True, new_hold=False) == 6.25  # the clock stands still meanwhile
    for _ in range(100):
        seeker.next(holding=False, new_hold=False)
    assert seeker.speed == SpeedSeeker.MAX_SPEED
    for _ in range(100):
        seeker.next(holding=True, new_hold=True)
    assert seeker.speed == SpeedSeeker.MIN_SPEED


def test_speed_max_without_the_governor_is_a_config_error() -> None:
    plan = plan_replay(trace([applied(0, pod("a"))]), speed=10)
    with pytest.raises(ConfigError, match="--max-lag"):
        Replayer(MemoryCluster(), plan, replace(fast(), max_speed=True))


def _lifecycle(ts: int, name: str) -> Event:
    key = key_of(pod(name))
    return Event.pod_lifecycle(ts, key, owner_key=key, pod_spec_hash=1, start_ms=ts, end_ms=None)


async def test_at_speed_max_a_cluster_that_keeps_up_is_replayed_faster_and_judged_at_that_speed() -> None:
    events = [e for i in range(5) for e in (applied(i * 1_000, pod(f"p{i}")), _lifecycle(i * 1_000, f"p{i}"))]
    settings = replace(fast(keep=True), speed=1, sample_interval_s=0.02, max_lag_s=1.0, max_speed=True)
    report = await Replayer(KwokLikeCluster(), plan_replay(trace(events), speed=1), settings).run()

    assert report.failed == 0
    assert report.speed_mode == "max"
    assert report.convergence is not None
    assert report.convergence["achieved_speed"]["requested"] == "max"
    achieved = report.convergence["achieved_speed"]["overall"]
    assert achieved is not None
    assert achieved > 1  # started at 1, sped up while pods ran at once
    assert report.speed == achieved
    # each sample is judged over the settle in trace time, whatever the clock's speed: --max-lag
    assert (report.settle_ms, report.settle_from) == (1_000.0, "--max-lag")
    assert report.clock_path is not None
    assert report.clock_path[0][1] == 0  # the path starts where trace time began
    assert report.verdict().verdict == "held", report.verdict()
    fidelity = report.to_json()["owner_fidelity"]
    assert (fidelity["settle_ms"], fidelity["settle_from"]) == (1_000.0, "--max-lag")
    assert fidelity["resolution_wall_s"] == settings.fidelity_resolution_s
    assert report.to_json()["timeline"]["trace_clock"][0]["trace_ms"] == 0
    assert report.to_json()["speed_mode"] == "max"
    assert "(max: as fast as the cluster kept up)" in report.summary()
    assert "speed max requested" in report.summary()


def _stating_profile(data: dict[str, str]) -> KwokLikeCluster:
    """A cluster whose profile ConfigMap holds ``data``."""
    cluster = KwokLikeCluster()
    namespace, name = PROFILE_CONFIGMAP
    cluster.objects[("ConfigMap", namespace, name)] = {
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }
    return cluster


async def test_the_cluster_profile_and_what_changes_scheduling_are_in_the_report() -> None:
    cluster = _stating_profile(
        {
            "profile": "large-sampled",
            "settings": json.dumps({"kube-scheduler": {"percentageOfNodesToScore": 10}}),
            "changesScheduling": json.dumps(["kube-scheduler percentageOfNodesToScore=10"]),
            "changesSchedulingOnZonedNodes": json.dumps([ZONE_CHANGE]),
        }
    )
    assert await read_cluster_profile(cluster) == {
        "profile": "large-sampled",
        "settings": {"kube-scheduler": {"percentageOfNodesToScore": 10}},
        "changes_scheduling": ["kube-scheduler percentageOfNodesToScore=10"],
        "changes_scheduling_on_zoned_nodes": [ZONE_CHANGE],
    }
    report = await Replayer(cluster, plan_replay(trace([applied(0, pod("a"))]), 1000), fast(keep=True)).run()
    assert report.to_json()["cluster_profile"]["profile"] == "large-sampled"
    assert (
        "simulated cluster profile: large-sampled; settings that can change where pods land: "
        "kube-scheduler percentageOfNodesToScore=10" in report.summary()
    )


def _node(name: str, **labels: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize(
    ("labels", "named"),
    [
        ({"kubernetes.io/hostname": "n2"}, False),
        ({"kubernetes.io/hostname": "n2", "topology.kubernetes.io/zone": "eu-1a"}, True),
        ({}, True),  # no hostname label: hostname-only spreading ignores the node, the default does not
    ],
)
async def test_a_setting_that_differs_only_on_zoned_nodes_is_named_once_such_a_node_exists(
    labels: dict[str, str], named: bool
) -> None:
    cluster = MemoryCluster()
    await cluster.apply(_node("n1", **{"kubernetes.io/hostname": "n1"}))
    await cluster.apply(_node("n2", **labels))
    profile: dict[str, object] = {
        "profile": "large",
        "changes_scheduling": [],
        "changes_scheduling_on_zoned_nodes": [ZONE_CHANGE],
    }
    await note_zoned_nodes(cluster, profile)
    await note_zoned_nodes(cluster, profile)  # named once, however often it is checked
    assert profile["changes_scheduling"] == ([ZONE_CHANGE] if named else [])


async def test_nodes_that_cannot_be_listed_count_as_zoned() -> None:
    class Unlisting(MemoryCluster):
        async def list_objects(
            self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
        ) -> list[dict[str, Any]]:
            raise ApiUnavailableError("list Node: HTTP 503", status=503)

    profile: dict[str, object] = {"profile": "large", "changes_scheduling_on_zoned_nodes": [ZONE_CHANGE]}
    await note_zoned_nodes(Unlisting(), profile)
    assert profile["changes_scheduling"] == [ZONE_CHANGE]  # not knowing is not "the same placements"


async def test_a_replay_onto_zoned_virtual_nodes_names_what_changes_their_scheduling() -> None:
    cluster = _stating_profile(
        {
            "profile": "large",
            "changesScheduling": "[]",
            "changesSchedulingOnZonedNodes": json.dumps([ZONE_CHANGE]),
        }
    )
    zoned = _node("zoned", **{"topology.kubernetes.io/zone": "eu-1a", "type": "kwok"})
    settings = replace(fast(keep=True), node_pools=((zoned, 1),))
    report = await Replayer(cluster, plan_replay(trace([applied(0, pod("a"))]), 1000), settings).run()
    assert report.cluster_profile is not None
    assert report.cluster_profile["changes_scheduling"] == [ZONE_CHANGE]
    assert f"settings that can change where pods land: {ZONE_CHANGE}" in report.summary()


async def test_a_cluster_without_a_stated_profile_reports_none() -> None:
    assert await read_cluster_profile(MemoryCluster()) is None
    report = await Replayer(
        MemoryCluster(), plan_replay(trace([applied(0, pod("a"))]), 1000), fast(keep=True)
    ).run()
    assert report.cluster_profile is None
    assert "simulated cluster profile" not in report.summary()


async def test_a_replay_expecting_a_profile_the_cluster_does_not_state_stops_before_any_event() -> None:
    cluster = KwokLikeCluster()
    settings = replace(fast(), expect_profile="large")
    with pytest.raises(ConfigError, match=r"states profile None .*not the expected 'large'.*--profile large"):
        await Replayer(cluster, plan_replay(trace([applied(0, pod("a"))]), 1000), settings).run()
    assert not [key for key in cluster.objects if key[0] == "Pod"]
    assert not [key for key in cluster.objects if key[0] == "ReplayRoot"]  # cleaned up all the same


def _early_ending_trace(end_ms: int) -> Any:
    """One bare pod at 0 s, its lifecycle recorded, and nothing more until the range ends at ``end_ms``."""
    events = [applied(0, pod("p0")), _lifecycle(0, "p0")]
    return build_segment(events, start_ms=0, end_ms=end_ms, kind=SegmentKind.TRACE)


async def test_a_replay_runs_to_the_ranges_end_not_to_its_last_event() -> None:
    plan = plan_replay(_early_ending_trace(20_000), speed=1000)
    assert (plan.last_step_ms, plan.span_ms) == (0, 20_000)
    report = await Replayer(KwokLikeCluster(), plan, fast(keep=True)).run()

    assert report.failed == 0
    # the simulated cluster ran, and was sampled, until the range's end: 20 s of trace, 20 ms of wall
    assert report.replay_timeline[-1][0] >= 20_000, report.replay_timeline[-3:]
    assert (report.trace_span_ms, report.trace_end, report.last_event_ms) == (20_000, "the trace's end", 0)
    as_json = report.to_json()
    assert (as_json["trace_span_ms"], as_json["trace_end"], as_json["last_event_ms"]) == (
        20_000,
        "the trace's end",
        0,
    )
    assert "for 20.0 s of trace (to the trace's end; last event at 0.0 s)" in report.summary()


async def test_a_duration_still_says_where_the_replay_ends() -> None:
    plan = plan_replay(_early_ending_trace(20_000), speed=1000)
    report = await Replayer(KwokLikeCluster(), plan, fast(keep=True, duration_ms=5_000)).run()
    assert 5_000 <= report.replay_timeline[-1][0] < 20_000, report.replay_timeline[-3:]
    assert (report.trace_span_ms, report.trace_end) == (5_000, "--duration")


async def test_at_speed_max_the_quiet_rest_of_the_range_is_covered_by_the_clock_not_waited_for() -> None:
    """Nothing changes after the last event: the governor finds nothing behind, the seeker speeds the
    clock up, and the range's end is reached in far less than its trace time (virtual time here)."""
    clock = VirtualClock()
    plan = plan_replay(_early_ending_trace(600_000), speed=1)
    settings = replace(fast(keep=True), speed=1, sample_interval_s=0.5, max_lag_s=5.0, max_speed=True)
    started = clock.now()
    report = await Replayer(KwokLikeCluster(), plan, settings, clock=clock).run()

    assert report.failed == 0
    assert report.replay_timeline[-1][0] == pytest.approx(600_000), report.replay_timeline[-3:]
    assert report.clock_path is not None
    assert report.clock_path[-1][1] == pytest.approx(600_000)
    assert report.verdict().verdict == "held", report.verdict()
    # 600 s of trace: the clock sped up from 1 (a fixed speed 1 would have taken 600 s)
    assert clock.now() - started < 120, (clock.now() - started, report.clock_path[-5:])
    assert report.speed > 5, report.speed
