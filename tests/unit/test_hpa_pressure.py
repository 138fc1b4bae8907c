"""The pressure measure of a replay with the HPA deciding (seconds above the HPA's target and above the
requests, pending-pod seconds, pod- and node-hours), against a naive reference that walks trace time a
millisecond at a time; and the usage driver feeding it what it writes and the pods it sees."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pipeline.model.keys import ObjectKey
from pipeline.replay.hpa.load import LoadModel, RecordedLoad
from pipeline.replay.hpa.pressure import OwnerTick, PressureMeter, pod_cpu_request_m
from pipeline.replay.hpa.replay import HpaReplay, UsageDriver
from pipeline.replay.hpa.targets import plan_hpas
from tests import hpa_recording as rec
from tests.unit.test_hpa_replay import Clock, Cluster, node, pod, steps_of

WEB = ObjectKey("apps/Deployment/shop/web")
DB = ObjectKey("apps/Deployment/shop/db")
TARGETS: dict[ObjectKey, float | None] = {WEB: 50.0, DB: None}

ticks = st.builds(
    OwnerTick,
    running=st.integers(0, 5),
    pending=st.integers(0, 3),
    cpu_per_pod_m=st.none() | st.integers(0, 400).map(float),
    request_per_pod_m=st.none() | st.integers(0, 200).map(float),
)


def naive(history: list[tuple[int, dict[ObjectKey, OwnerTick], int]]) -> dict[str, Any]:
    """Walk every trace millisecond from the first tick to the last, with the state of the last tick at
    or before it (a tick earlier than one before it counts from that one's time)."""
    out: dict[str, Any] = {"node_ms": 0, "owners": {}}
    effective: list[int] = []
    for at_ms, _, _ in history:
        effective.append(max(at_ms, effective[-1]) if effective else at_ms)
    for owner in TARGETS:
        out["owners"][owner] = {"pod": 0, "pending": 0, "above": 0, "overload": 0}
    if not history:
        return out
    for t in range(effective[0], effective[-1]):
        index = max(i for i, e in enumerate(effective) if e <= t)
        _, owners, nodes = history[index]
        out["node_ms"] += nodes
        for owner, tick in owners.items():
            sums = out["owners"][owner]
            sums["pod"] += tick.running
            sums["pending"] += tick.pending
            if tick.running > 0 and tick.cpu_per_pod_m is not None and tick.request_per_pod_m:
                utilization = 100 * tick.cpu_per_pod_m / tick.request_per_pod_m
                target = TARGETS[owner]
                sums["above"] += 1 if target is not None and utilization > target else 0
                sums["overload"] += 1 if utilization > 100 else 0
    return out


class PressureAgainstNaive(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.meter = PressureMeter(TARGETS)
        self.history: list[tuple[int, dict[ObjectKey, OwnerTick], int]] = []
        self.now_ms = 0

    @rule(
        step_ms=st.integers(-50, 150),
        owners=st.dictionaries(st.sampled_from(sorted(TARGETS)), ticks),
        nodes=st.integers(0, 4),
    )
    def tick(self, step_ms: int, owners: dict[ObjectKey, OwnerTick], nodes: int) -> None:
        self.now_ms += step_ms
        self.meter.observe(self.now_ms, owners, nodes)
        self.history.append((self.now_ms, owners, nodes))

    @invariant()
    def sums_match_the_millisecond_walk(self) -> None:
        expected = naive(self.history)
        assert self.meter.node_seconds == pytest.approx(expected["node_ms"] / 1000, abs=1e-9)
        for owner, sums in expected["owners"].items():
            got = self.meter.owners[owner]
            assert got.pod_seconds == pytest.approx(sums["pod"] / 1000, abs=1e-9), owner
            assert got.pending_pod_seconds == pytest.approx(sums["pending"] / 1000, abs=1e-9), owner
            assert got.above_target_seconds == pytest.approx(sums["above"] / 1000, abs=1e-9), owner
            assert got.overload_seconds == pytest.approx(sums["overload"] / 1000, abs=1e-9), owner


TestPressureAgainstNaive = PressureAgainstNaive.TestCase
TestPressureAgainstNaive.settings = settings(max_examples=50, stateful_step_count=12, deadline=None)


@given(st.lists(ticks, min_size=2, max_size=6))
def test_the_totals_are_the_owners_sums_in_hours_and_seconds(owner_ticks: list[OwnerTick]) -> None:
    meter = PressureMeter(TARGETS)
    for second, tick in enumerate(owner_ticks):
        meter.observe(second * 1000.0, {WEB: tick, DB: tick}, 2)
    totals = meter.totals()
    web, db = meter.owners[WEB], meter.owners[DB]
    assert totals["pod_hours"] == pytest.approx((web.pod_seconds + db.pod_seconds) / 3600, abs=1e-6)
    assert totals["overload_seconds"] == pytest.approx(web.overload_seconds + db.overload_seconds, abs=1e-3)
    assert totals["node_hours"] == pytest.approx(2 * (len(owner_ticks) - 1) / 3600, abs=1e-6)
    assert db.above_target_seconds == 0, "an HPA without a CPU target is not judged against one"


def test_a_busier_pod_set_spends_more_seconds_above_target_and_overloaded() -> None:
    # the same 360m load, over 6 pods (60 % of 100m) and over 3 (120 %), for 10 trace seconds each
    meter = PressureMeter({WEB: 50.0})
    meter.observe(0, {WEB: OwnerTick(6, 0, 60.0, 100.0)}, 2)
    meter.observe(10_000, {WEB: OwnerTick(3, 1, 120.0, 100.0)}, 2)
    meter.observe(20_000, {WEB: OwnerTick(3, 0, 120.0, 100.0)}, 2)
    figures = meter.to_json()["owners"][str(WEB)]
    assert figures["above_target_seconds"] == 20.0
    assert figures["overload_seconds"] == 10.0
    assert figures["pending_pod_seconds"] == 10.0
    assert figures["pod_hours"] == pytest.approx(90 / 3600, abs=1e-6)
    assert figures["peak_utilization_percent"] == 120.0
    assert meter.to_json()["node_hours"] == pytest.approx(40 / 3600, abs=1e-6)


def test_a_pods_cpu_request_is_summed_over_its_containers() -> None:
    def with_requests(*cpus: str | None) -> dict[str, Any]:
        containers = [{"resources": {"requests": {"cpu": c}}} if c else {} for c in cpus]
        return {"spec": {"containers": containers}}

    assert pod_cpu_request_m(with_requests("100m", "0.25")) == 350.0
    assert pod_cpu_request_m(with_requests(None, "1")) == 1000.0
    assert pod_cpu_request_m(with_requests(None)) is None
    assert pod_cpu_request_m(with_requests("lots")) is None


async def test_the_usage_driver_measures_the_load_it_writes_against_the_hpas_target() -> None:
    # recorded at 200 s: 360m over 2 pods; the simulation runs 3 pods of 100m (120 %, above 50 % and 100 %)
    # and one pending, for the 10 trace seconds between two updates, on one node
    _, plan = plan_hpas(steps_of(rec.recording([], span_ms=300_000)), 10.0)
    load = RecordedLoad.from_samples(rec.rising_load(300_000), plan.owners)
    requesting = []
    for name in ("web-a", "web-b", "web-c"):
        body = pod(name)
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": f"{rec.REQUEST_M}m"}}
        requesting.append(body)
    cluster = Cluster([*requesting, pod("web-p", phase="Pending"), node("kwok-0")])
    now = [200_000.0]
    driver = UsageDriver(cluster, HpaReplay(plan, load, LoadModel.CONSERVE), "r1", lambda: now[0], Clock())
    await driver.update()
    now[0] += 10_000
    await driver.update()
    pressure = driver.report()["pressure"]
    web = pressure["owners"][str(rec.OWNER)]
    assert web["target_utilization_percent"] == rec.TARGET_PERCENT
    assert (web["above_target_seconds"], web["overload_seconds"]) == (10.0, 10.0)
    assert web["pending_pod_seconds"] == 10.0
    assert web["pod_hours"] == pytest.approx(30 / 3600, abs=1e-6)
    assert pressure["node_hours"] == pytest.approx(10 / 3600, abs=1e-6)


def test_the_report_summary_gives_each_owners_pressure() -> None:
    from pipeline.replay.report.report import ReplayReport

    meter = PressureMeter({WEB: 50.0})
    meter.observe(0, {WEB: OwnerTick(3, 1, 120.0, 100.0)}, 1)
    meter.observe(36_000, {WEB: OwnerTick(3, 0, 120.0, 100.0)}, 1)
    report = ReplayReport("r1", "trace", 1.0)
    report.pod_autoscaling = {
        "load_model": "conserve",
        "owners": [],
        "usage_writes": 0,
        "usage_write_failures": 0,
        "settings": [],
        "pressure": meter.to_json(),
    }
    assert (
        f"{WEB}: 0.0300 pod-hours; 36 s above its 50 % target, 36 s above its requests, 36 pending-pod "
        "seconds (trace time)"
    ) in report.summary()
