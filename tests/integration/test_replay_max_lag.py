"""``--speed max --max-lag`` keeps its word on the real stack: many owners take large steps at once, and
the test judges the replay itself, over (trace time, owner), against the pods each Deployment asked for
in the trace.

The oracle here is the test's own (no code of ``pipeline.replay.fidelity`` or the governor): an owner's
lag at a sample is how far back in trace time one must go for its Running pods to lie within one pod of
the counts the trace asked for since then. It finds, in the samples the replay took while its clock
moved, every owner within ``--max-lag``; and, judging the state at each trace instant (the last sample
there: the state when the clock went on) at the report's stated settle, the same fraction within one pod
as the report. Run against the code before the clock looked ahead (commit ad1827f), it found an owner
104 trace seconds behind at a sample taken while the clock moved (--max-lag 5) and 288 of 352
owner-instants within one pod at a 5 s settle, where the report said 352 of 352: its window widened
with the clock's speed. After: largest lag 5 s, 2336 of 2336 in both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import yaml

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.io.kube.pod_watch import PodWatch
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.settings import ReplaySettings
from pipeline.replay.workload_manifests import deployment
from pipeline.stack import kwok

MAX_LAG_MS = 5_000
OWNERS = 16
STEPS_MS = ((0, 1), (240_000, 24), (480_000, 2), (720_000, 20))
"""(trace ms, replicas of every owner): long quiet stretches, in which the clock speeds up, then every
owner steps at once."""
END_MS = 780_000
"""The range's end: a minute after the last step, which the replay runs through too (a replay runs to
its trace's end); longer costs CI wall time while the clock speeds up again after the last hold."""
TOLERANCE = 1

Timeline = list[tuple[int, int]]


def _trace_events() -> Iterator[Event]:
    for ts, replicas in STEPS_MS:
        for i in range(OWNERS):
            obj = deployment(f"web-{i}", "steps", replicas, cpu="100m", memory="64Mi")
            yield Event.applied(ts, key_of(obj), obj, 0)


def _asked_for() -> dict[str, Timeline]:
    """Per owner, (trace ms, replicas) at each change: straight from the trace's objects."""
    out: dict[str, Timeline] = {}
    for event in _trace_events():
        assert event.obj is not None
        out.setdefault(str(event.key), []).append((event.ts_ms, event.obj["spec"]["replicas"]))
    return out


def _asked_at(timeline: Timeline, at_ms: float) -> int:
    asked = 0
    for ts, replicas in timeline:
        if ts <= at_ms:
            asked = replicas
    return asked


def _lag_ms(timeline: Timeline, at_ms: float, running: int) -> float:
    """How far back from ``at_ms`` the trace's counts reach around ``running``: the shortest stretch of
    trace time before ``at_ms`` over whose asked-for counts ``running`` lies within one pod of their
    range (0: within one pod of what is asked for now). Walks back through every change, naively."""
    # (where the lag would start, where the window starts): now, then just before each change
    windows = [(at_ms, at_ms)] + [
        (ts, ts - 0.001) for ts in sorted((ts for ts, _ in timeline if ts <= at_ms), reverse=True)
    ]
    for start, window_start in windows:
        seen = [_asked_at(timeline, window_start)] + [n for ts, n in timeline if window_start < ts <= at_ms]
        if min(seen) - TOLERANCE <= running <= max(seen) + TOLERANCE:
            return at_ms - start
    return float("inf")


@pytest.mark.timeout(600)  # the replay waits for 400 pods at each of its steps on a shared machine
async def test_at_speed_max_no_owner_trails_beyond_max_lag_and_the_report_agrees_with_the_trace(
    sim_kubeconfig: Path, tmp_path: Path
) -> None:
    trace = build_segment(list(_trace_events()), start_ms=0, end_ms=END_MS, kind=SegmentKind.TRACE)
    settings = ReplaySettings(
        speed=10,
        replay_name="steps",
        namespace_prefix="steps",
        node_pools=((yaml.safe_load(kwok.DEFAULT_NODE_SKELETON.read_text()), 6),),
        max_lag_s=MAX_LAG_MS / 1000,
        max_speed=True,
    )

    async with kube_api(sim_kubeconfig) as api:
        report = await Replayer(
            KubeClient(api), plan_replay(trace, 10), settings, pod_watch=partial(PodWatch, api)
        ).run()
    assert report.failed == 0, report.summary()
    doc = report.to_json()
    (tmp_path / "report.json").write_text(json.dumps(doc))  # kept by pytest's basetemp for a look
    asked = _asked_for()
    # the replay's samples as taken (the JSON rounds their trace instants to the ms)
    samples = [(s.trace_ms, dict(s.running)) for s in report.owner_samples]

    # 1. While the clock moved (a sample at a trace instant the previous sample was not at), no owner
    # trailed the trace by more than --max-lag.
    moving_lags: list[tuple[float, str, float]] = []
    previous_ms: float | None = None
    for at_ms, running in samples:
        if at_ms != previous_ms and at_ms > 0:
            for owner, timeline in asked.items():
                moving_lags.append((_lag_ms(timeline, at_ms, running.get(owner, 0)), owner, at_ms))
        previous_ms = at_ms
    worst_lag, worst_owner, worst_at = max(moving_lags)

    # 2. At each trace instant, the state when the clock went on (the last sample there), judged at
    # the report's stated settle: the same fraction within one pod as the report's.
    fidelity = doc["owner_fidelity"]
    settle_ms = fidelity["settle_ms"]
    last_at: dict[float, dict[str, int]] = {}
    for at_ms, running in samples:
        last_at[at_ms] = running  # consecutive samples at one instant: the last wins
    judged = [
        _lag_ms(timeline, at_ms, running.get(owner, 0))
        for at_ms, running in last_at.items()
        for owner, timeline in asked.items()
    ]
    oracle_within = sum(1 for lag in judged if lag == 0 or lag < settle_ms)
    report_within = sum(o["samples_within_one_pod"] for o in fidelity["owners"])
    report_samples = sum(o["samples"] for o in fidelity["owners"])
    found = (
        f"oracle: largest lag while the clock moved {worst_lag:.0f} ms ({worst_owner} at trace "
        f"{worst_at} ms), {oracle_within}/{len(judged)} owner-instants within one pod at a "
        f"{settle_ms} ms settle; report: {report_within}/{report_samples}, verdict {fidelity['verdict']}"
    )
    assert worst_lag <= MAX_LAG_MS, found
    assert (oracle_within, len(judged)) == (report_within, report_samples), found

    # 2b. The replay ran to the range's end, past the last step, and was sampled there
    assert (doc["trace_end"], doc["trace_span_ms"], doc["last_event_ms"]) == (
        "the trace's end",
        END_MS,
        720_000,
    )
    assert samples[-1][0] == pytest.approx(END_MS), samples[-3:]

    # 3. The report states the settle it judged at, the largest lag and whose, and the clock's period.
    assert settle_ms == MAX_LAG_MS, found  # the default settle is --max-lag
    convergence = doc["convergence"]
    assert convergence["holds"] >= 1, found  # the steps did make the clock wait
    assert convergence["largest_lag"]["lag_ms"] == round(worst_lag, 3), (convergence["largest_lag"], found)
    assert convergence["largest_lag"]["lag_ms"] <= MAX_LAG_MS + convergence["clock_period_ms"], found
    assert 0 < convergence["clock_period_ms"] <= MAX_LAG_MS, convergence
    assert fidelity["verdict"] in ("held", "degraded"), (fidelity["reasons"], found)
    if fidelity["verdict"] == "degraded":  # only for the machine's reasons, never for a miss
        assert oracle_within == len(judged), (fidelity["reasons"], found)
