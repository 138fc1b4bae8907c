"""Per-owner fidelity: a replay sample is compared with the recording over the preceding settle, in trace
time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.formats.trace import read_trace
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey
from pipeline.replay.plan import desired_timelines, plan_replay
from pipeline.replay.report.fidelity import (
    BOUND_PODS,
    FidelityVerdict,
    OwnerSample,
    compare_owners,
    judge,
    range_over,
    trace_instants,
    value_at,
)
from pipeline.replay.report.report import ReplayReport

T = 1_800_000_000_000

WEB = [(0, 2), (10_000, 5), (20_000, 3), (30_000, 0)]


def test_recorded_count_is_a_step_function() -> None:
    assert value_at(WEB, -1) == 0
    assert value_at(WEB, 0) == 2
    assert value_at(WEB, 19_999) == 5
    assert value_at(WEB, 45_000) == 0
    assert range_over(WEB, 5_000, 25_000) == (2, 5)
    assert range_over(WEB, 12_000, 15_000) == (5, 5)


def test_a_sample_trailing_a_change_by_less_than_the_resolution_is_right() -> None:
    samples = [
        OwnerSample(5_000, {"web": 2}),
        OwnerSample(10_500, {"web": 2}),  # the simulated controller has not scaled up yet
        OwnerSample(15_000, {"web": 5}),
        OwnerSample(25_000, {"web": 3}),
    ]
    [web] = compare_owners({"web": WEB}, samples, settle_ms=1_000)
    assert (web.max_error, web.within_one, web.samples) == (0, 4, 4)
    assert (web.recorded_peak, web.replay_peak) == (5, 5)


def test_counts_outside_the_recorded_range_are_errors_per_owner() -> None:
    samples = [OwnerSample(15_000, {"web": 1, "stray": 2}), OwnerSample(35_000, {})]
    result = {o.owner: o for o in compare_owners({"web": WEB}, samples, settle_ms=1_000)}
    assert result["web"].max_error == 4  # 5 recorded, 1 replayed
    assert result["web"].within_one == 1  # the sample after the end: 0 and 0
    assert result["stray"].max_error == 2


# ---- one sample per instant of trace time ----------------------------------------------------------
def test_samples_while_the_clock_stood_still_count_once_as_the_state_it_went_on_from() -> None:
    # the clock held at 10 s while the cluster went 2, 3, 4, 5 pods: one instant, judged at 5
    held = [OwnerSample(10_000, {"web": n}) for n in (2, 3, 4, 5)]
    samples = [OwnerSample(5_000, {"web": 2}), *held, OwnerSample(15_000, {"web": 5})]
    assert trace_instants(samples) == [samples[0], held[-1], samples[-1]]
    [web] = compare_owners({"web": WEB}, trace_instants(samples), settle_ms=0)
    assert (web.samples, web.within_one, web.max_error) == (3, 3, 0)
    # every wall sample counted: the catching up at 10 s shows as misses
    [every] = compare_owners({"web": WEB}, samples, settle_ms=0)
    assert (every.samples, every.within_one, every.max_error) == (6, 4, 3)


def test_only_consecutive_samples_share_an_instant() -> None:
    # the clock does not run backwards; a repeated instant after another one is a separate sample
    samples = [OwnerSample(0, {"web": 2}), OwnerSample(1_000, {"web": 2}), OwnerSample(0, {"web": 9})]
    assert trace_instants(samples) == samples


def test_the_report_judges_instants_and_states_both_counts() -> None:
    report = ReplayReport("r", "trace.json", 5.0)
    report.recorded_by_owner = {"web": WEB}
    report.settle_ms = 1_000.0
    # the scale-up at 10 s: the governor held the clock at 12 s for 40 samples while the cluster
    # climbed from 2 to 5
    for t in range(0, 10_000, 500):
        report.add_sample(t, 2, 1, {"web": 2})
    for i in range(40):
        report.add_sample(12_000, 2 + i // 13, 1, {"web": 2 + i // 13})
    for t in range(12_500, 30_000, 500):
        report.add_sample(t, value_at(WEB, t), 1, {"web": value_at(WEB, t)})
    doc = report.to_json()["owner_fidelity"]
    assert (doc["wall_samples"], doc["trace_instants"]) == (20 + 40 + 35, 20 + 1 + 35)
    assert doc["verdict"] == "held", doc
    [every] = report.owner_fidelity(per_instant=False)
    assert every.max_error == 3
    assert every.within_one < every.samples


# ---- the verdict: held, degraded (the machine did not keep up), failed, unmeasured ------------------
SETTLE_MS = 10_000.0
"""A settle of 10 s of trace time (e.g. --max-lag 10)."""


def _judge(samples: list[OwnerSample], lateness_p99_ms: float | None = 5.0) -> FidelityVerdict:
    return judge({"web": WEB}, samples, SETTLE_MS, resolution_wall_s=1.0, lateness_p99_ms=lateness_p99_ms)


def test_a_replay_that_follows_the_recording_in_time_is_held() -> None:
    samples = [OwnerSample(t, {"web": value_at(WEB, t)}) for t in range(0, 40_000, 2_500)]
    verdict = _judge(samples)
    assert (verdict.verdict, verdict.reasons, verdict.settle_needed_ms) == ("held", (), SETTLE_MS)


def test_a_cluster_that_converges_slower_than_the_settle_is_degraded_and_counted_at_the_settle() -> None:
    # every change reached 25 trace seconds late: right, but slow
    samples = [OwnerSample(t, {"web": value_at(WEB, t - 25_000)}) for t in range(0, 60_000, 2_500)]
    [web] = compare_owners({"web": WEB}, samples, SETTLE_MS)
    assert web.max_error > BOUND_PODS
    verdict = _judge(samples)
    assert verdict.verdict == "degraded"
    assert verdict.settle_needed_ms == 30_000  # the first multiple of the settle that covers 25 s
    assert (
        f"needed up to 30 s of trace time to converge on the recorded pod counts, beyond the 10 s settle "
        f"({web.within_one} of {web.samples} owner-instants within the bound at the settle"
    ) in verdict.reasons[0]
    assert web.within_one < web.samples  # the figures stay those at the stated settle


def test_late_writes_degrade_a_replay_even_where_the_bound_held() -> None:
    samples = [OwnerSample(t, {"web": value_at(WEB, t)}) for t in range(0, 40_000, 2_500)]
    verdict = _judge(samples, lateness_p99_ms=1_800.0)
    assert verdict.verdict == "degraded"
    assert "lateness p99 1800 ms" in verdict.reasons[0]


def test_a_count_the_recording_never_had_is_a_failure_whatever_the_settle_time() -> None:
    samples = [OwnerSample(t, {"web": value_at(WEB, t)}) for t in range(0, 40_000, 2_500)]
    samples.append(OwnerSample(15_000, {"web": 9}))  # 9 pods where the recording never had more than 5
    verdict = _judge(samples)
    assert (verdict.verdict, verdict.settle_needed_ms) == ("failed", None)
    assert "even when the cluster is allowed 100 s of trace time to settle" in verdict.reasons[0]


def test_a_recording_without_lifecycles_is_unmeasured() -> None:
    verdict = judge({}, [OwnerSample(0, {"web": 2})], SETTLE_MS, resolution_wall_s=1.0, lateness_p99_ms=1.0)
    assert verdict.verdict == "unmeasured"


# ---- truth for owners without lifecycles: the pods they asked for ------------------------------------
def _deployment(replicas: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {} if replicas is None else {"replicas": replicas}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": spec,
    }


def _pod(name: str, *, owned: bool = False, phase: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop"}
    if owned:
        meta["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": "web-1", "apiVersion": "apps/v1", "uid": "u"}
        ]
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def test_owners_without_lifecycles_are_judged_by_the_pods_they_asked_for() -> None:
    web, batch = ObjectKey("apps/Deployment/shop/web"), ObjectKey("core/Pod/shop/batch")
    events = [
        Event.applied(T, web, _deployment(None), 1),  # unset replicas: Kubernetes defaults to 1
        Event.applied(T + 1_000, batch, _pod("batch"), 1),
        Event.applied(T + 1_000, ObjectKey("core/Pod/shop/web-1-x"), _pod("web-1-x", owned=True), 1),
        Event.applied(T + 10_000, web, _deployment(5), 1),
        Event.applied(T + 12_000, batch, _pod("batch", phase="Succeeded"), 1),
        Event.applied(T + 20_000, web, _deployment(5), 1),  # no change: no new step
        Event.deleted(T + 30_000, web, {}),
        Event.deleted(T + 31_000, ObjectKey("core/Pod/shop/never-seen"), {}),
    ]
    timelines = desired_timelines(events, T, lifecycle_kinds=set())
    assert timelines == {
        str(web): [(0, 1), (10_000, 5), (30_000, 0)],
        str(batch): [(1_000, 1), (12_000, 0)],
    }
    # kinds whose lifecycles were tracked are judged by them (a pod without one never ran)
    assert desired_timelines(events, T, lifecycle_kinds={("apps", "Deployment")}).keys() == {str(batch)}


def test_a_simkube_trace_without_lifecycles_gets_a_measured_verdict(simkube_traces: Path) -> None:
    plan = plan_replay(read_trace(simkube_traces / "simkube-trace.json"), speed=10)
    assert plan.desired_owners, "the Deployments of the trace are owners with desired pods"
    assert set(plan.desired_owners) <= set(plan.recorded_by_owner or {})
    report = ReplayReport("r", "simkube-trace.json", 10.0)
    report.recorded_by_owner = dict(plan.recorded_by_owner or {})
    report.desired_owners = plan.desired_owners
    report.settle_ms = 30_000.0
    # the replay followed every owner's spec.replicas, each change reaching Running 15 trace s late
    for t in range(0, 120_000, 2_500):
        running = {o: value_at(tl, t - 15_000) for o, tl in report.recorded_by_owner.items()}
        report.owner_samples.append(OwnerSample(t, {o: n for o, n in running.items() if n}))
    doc = report.to_json()["owner_fidelity"]
    assert doc["verdict"] == "held", doc
    assert {o["truth"] for o in doc["owners"]} == {"desired pods"}
    assert "the pods they asked for (spec.replicas)" in report.summary()
    assert "over the preceding 30 s of trace time" in report.summary()


def test_samples_too_far_apart_to_see_the_resolution_degrade_the_verdict() -> None:
    samples = [OwnerSample(t, {"web": value_at(WEB, t)}) for t in range(0, 40_000, 2_500)]
    verdict = judge(
        {"web": WEB}, samples, SETTLE_MS, resolution_wall_s=1.0, lateness_p99_ms=5.0, largest_sample_gap_s=1.6
    )
    assert verdict.verdict == "degraded"
    assert "1.6 s passed between two samples" in verdict.reasons[0]
