"""Replaying traces into the real ``sim`` KWOK cluster: pods appear and complete at the scaled times,
rejected objects and unknown kinds are reported without stopping the replay, cleanup removes everything."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.formats.trace import read_trace
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.io.kube.pod_watch import PodWatch
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.report.report import ReplayReport
from pipeline.replay.rewrite import LIFETIME_ANNOTATION, REPLAY_LABEL
from pipeline.replay.settings import ReplaySettings
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON


@dataclass
class PodTimes:
    """Wall seconds since the replay started at which a pod was first seen in each phase, and the start
    of the poll before each of those (the pod, or its phase, came about after that instant)."""

    seen: float
    not_before: float
    phases: dict[str, float] = field(default_factory=dict)
    phases_not_before: dict[str, float] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class Watched:
    """A finished replay's report, its pods as the test saw them, and the longest list call of the
    test's polls (how responsive the API was meanwhile)."""

    report: ReplayReport
    pods: dict[str, PodTimes]
    longest_list_s: float


async def replay_and_watch(
    kubeconfig: Path, trace: Path, settings: ReplaySettings, poll_s: float = 0.1
) -> Watched:
    """Run a replay while polling its pods; returns the report and when each pod reached each phase."""
    plan = plan_replay(read_trace(trace), settings.speed)
    pods: dict[str, PodTimes] = {}
    longest_list_s = 0.0
    async with kube_api(kubeconfig) as api:
        cluster = KubeClient(api)
        replayer = Replayer(cluster, plan, settings, source=str(trace), pod_watch=partial(PodWatch, api))
        run = asyncio.create_task(replayer.run())
        selector = f"{REPLAY_LABEL}={replayer.name}"
        previous_poll = time.monotonic()  # the replayer's default clock
        while not run.done():
            poll_started = time.monotonic()
            for pod in await cluster.list_objects("v1", "Pod", label_selector=selector):
                now = time.monotonic()
                meta = pod["metadata"]
                times = pods.setdefault(meta["name"], PodTimes(seen=now, not_before=previous_poll))
                times.annotations = meta.get("annotations") or {}
                phase = (pod.get("status") or {}).get("phase", "?")
                if phase not in times.phases:
                    times.phases[phase] = now
                    times.phases_not_before[phase] = previous_poll
            previous_poll = poll_started
            longest_list_s = max(longest_list_s, time.monotonic() - poll_started)
            await asyncio.wait({run}, timeout=poll_s)
        report = run.result()
    # times relative to the start of trace time (after the root and the nodes were set up)
    t0 = replayer.trace_started_at
    assert t0 is not None
    for times in pods.values():
        times.seen -= t0
        times.not_before -= t0
        times.phases = {phase: at - t0 for phase, at in times.phases.items()}
        times.phases_not_before = {phase: at - t0 for phase, at in times.phases_not_before.items()}
    return Watched(report, pods, longest_list_s)


SLACK_S = 0.05
"""Clock slack between the test's observations and the replayer's schedule (the same monotonic clock;
the replayer's own time stamps are taken a moment before or after the API call)."""


def node_settings(name: str, speed: float, **kwargs: Any) -> ReplaySettings:
    skeleton = yaml.safe_load(DEFAULT_NODE_SKELETON.read_text())
    return ReplaySettings(
        speed=speed,
        replay_name=name,
        namespace_prefix=name,
        node_pools=((skeleton, 2),),
        sample_interval_s=0.5,
        **kwargs,
    )


async def assert_cleaned_up(cluster: KubeClient, name: str) -> None:
    selector = f"{REPLAY_LABEL}={name}"
    assert await cluster.list_objects("v1", "Namespace", label_selector=selector) == []
    assert await cluster.list_objects("v1", "Node", label_selector=selector) == []
    assert await cluster.list_objects("v1", "Pod", label_selector=selector) == []


async def test_bare_pods_appear_and_complete_at_scaled_times(
    sim_kubeconfig: Path, simkube_traces: Path
) -> None:
    speed = 10.0
    # the last pod is created at the end of the trace: extend the run by 40 trace seconds to watch it
    settings = node_settings("bare", speed, duration_ms=202_000)
    watched = await replay_and_watch(sim_kubeconfig, simkube_traces / "bare-pods.sktrace", settings)
    report, pods = watched.report, watched.pods
    assert report.failed == 0, report.summary()
    assert report.applied == 4
    by_start = sorted(pods.items(), key=lambda item: item[1].seen)
    assert [name for name, _ in by_start] == [
        "bare-pod-1781282449",
        "bare-pod-1781282509",
        "bare-pod-1781282570",
        "bare-pod-1781282630",
    ]
    # Recorded at +0, +42, +102, +162 s, replayed at a tenth of that: each pod is created no earlier than
    # its scaled time, and no later than the replayer's own measure of how late it ran (its largest
    # lateness) allows, as far as the test's polls can tell when it appeared.
    # (an apply takes about as long as the test's own list calls: the longest of those is allowed too)
    late_s = report.to_json()["lateness_ms"]["max"] / 1000 + watched.longest_list_s + SLACK_S
    for (name, times), expected in zip(by_start, [0.0, 4.2, 10.2, 16.2], strict=True):
        assert times.seen >= expected - SLACK_S, f"{name} appeared early: {times}"
        assert times.not_before <= expected + late_s, f"{name} appeared later than reported: {times}"
    # recorded lifetimes 12 s, 30 s, 30 s, then one that never ended: each ran at least its scaled lifetime
    for (name, times), lifetime in zip(by_start[:3], [1.2, 3.0, 3.0], strict=True):
        assert times.annotations[LIFETIME_ANNOTATION] == f"{lifetime:.3f}s"
        assert "Succeeded" in times.phases, f"{name} never completed: {times}"
        ran_at_least = times.phases["Succeeded"] - times.phases_not_before["Running"]
        assert ran_at_least >= lifetime - SLACK_S, f"{name} ended early: {times}"
    last = by_start[3][1]
    assert "Running" in last.phases
    assert "Succeeded" not in last.phases
    assert LIFETIME_ANNOTATION not in last.annotations
    assert report.to_json()["lateness_ms"]["count"] == 4
    assert report.cleanup.startswith("done"), report.cleanup
    async with kube_api(sim_kubeconfig) as api:
        await assert_cleaned_up(KubeClient(api), "bare")


CRON_FIRST_S, CRON_LAST_S = 8.0, 22.0
"""Wall seconds from the replay's start within which the CronJob's first minute falls."""


def _until_next_minute_is_within(first_s: float, last_s: float) -> float:
    """Seconds to wait until the next wall-clock minute is between ``first_s`` and ``last_s`` away
    (none if it is now; at most ``first_s + 60 - last_s``)."""
    to_next = 60.0 - time.time() % 60.0
    if to_next < first_s:
        return to_next + 60.0 - last_s
    return max(to_next - last_s, 0.0)


async def test_cronjob_pods_complete_after_the_scaled_recorded_duration(
    sim_kubeconfig: Path, simkube_traces: Path
) -> None:
    # The CronJob fires on the wall-clock minute ("* * * * *"), as in SimKube: speed scales the trace
    # and the pods' run time, not cron. At speed 4 the 205 s trace lasts ~51 s and the Job's pod runs
    # 30 s / 4 = 7.5 s: the replay starts when the next minute is 8-22 s away, so the CronJob exists
    # before it (the replay's set-up takes a second or two) and its pod has about half the trace left
    # to start, run and complete. (At speed 2 without the wait the test took ~110 s.)
    speed = 4.0
    await asyncio.sleep(_until_next_minute_is_within(CRON_FIRST_S, CRON_LAST_S))
    watched = await replay_and_watch(
        sim_kubeconfig, simkube_traces / "cronjob.sktrace", node_settings("cron", speed), poll_s=0.25
    )
    report, pods = watched.report, watched.pods
    assert report.failed == 0, report.summary()
    assert (report.applied, report.deleted) == (1, 1)
    finished = [t for t in pods.values() if "Succeeded" in t.phases and "Running" in t.phases]
    assert finished, f"no job pod completed: {pods}"
    for times in finished:
        assert times.annotations[LIFETIME_ANNOTATION] == "7.500s"
        # ran its scaled duration: not less (the polls bracket when it started and ended)
        assert times.phases["Succeeded"] - times.phases_not_before["Running"] >= 7.5 - SLACK_S, times
    assert report.cleanup.startswith("done"), report.cleanup


async def test_rejected_object_and_unknown_kind_are_reported_and_replay_goes_on(
    sim_kubeconfig: Path, tmp_path: Path
) -> None:
    def config_map(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "app"}}

    invalid_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "broken", "namespace": "app"},
        "spec": {"containers": [{"name": "Not_A_DNS_Label", "image": "x"}]},
    }
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "app"}}
    objects = [config_map("first"), invalid_pod, widget, config_map("last")]
    events = [Event.applied(1_000 * i, key_of(o), o, 0) for i, o in enumerate(objects)]
    trace = tmp_path / "bad.ktrace"
    trace.write_bytes(encode_segment(build_segment(events, start_ms=0, end_ms=4_000, kind=SegmentKind.TRACE)))

    settings = ReplaySettings(speed=100, replay_name="bad", namespace_prefix="bad", keep=True)
    plan = plan_replay(read_trace(trace), settings.speed)
    async with kube_api(sim_kubeconfig) as api:
        cluster = KubeClient(api)
        replayer = Replayer(cluster, plan, settings, pod_watch=partial(PodWatch, api))
        report = await replayer.run()
        assert report.applied == 2
        assert report.failed == 2
        reasons = {f.key: f.reason for f in report.failures}
        assert set(reasons) == {"core/Pod/app/broken", "example.com/Widget/app/w"}
        assert "HTTP 422" in reasons["core/Pod/app/broken"]
        assert "Not_A_DNS_Label" in reasons["core/Pod/app/broken"]
        assert "no kind 'Widget'" in reasons["example.com/Widget/app/w"]
        assert "FAILED core/Pod/app/broken" in report.summary()
        # both config maps made it, including the one after the failures
        for name in ("first", "last"):
            assert await cluster.get("v1", "ConfigMap", "bad-app", name) is not None
        assert report.cleanup.startswith("kept")
        await replayer.cleanup()
        assert report.cleanup.startswith("done"), report.cleanup
        await assert_cleaned_up(cluster, "bad")


def test_cli_replays_a_simkube_trace_and_writes_the_report(
    sim_kubeconfig: Path, simkube_traces: Path, tmp_path: Path
) -> None:
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "replay",
            "--trace",
            str(simkube_traces / "bare-pods.sktrace"),
            "--kubeconfig",
            str(sim_kubeconfig),
            "--speed",
            "100",
            "--nodes",
            f"{DEFAULT_NODE_SKELETON}:1",
            "--namespace-prefix",
            "cli",
            "--name",
            "cli",
            "--report-json",
            str(report_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "[replay]" in done.stderr  # progress lines
    assert "4 applied" in done.stdout
    report = json.loads(report_path.read_text())
    assert report["events"]["applied"] == 4
    assert report["events"]["failed"] == 0
    assert report["lateness_ms"]["count"] == 4
    assert report["cleanup"].startswith("done")
    assert report["timeline"]["recorded"][0] == {"trace_ms": 0, "pods_running": 1}


async def test_a_pod_of_an_untracked_owner_replays_as_a_bare_pod_and_completes(
    sim_kubeconfig: Path, tmp_path: Path
) -> None:
    """A custom controller's pod as the watcher records it (its Widget owner is not tracked, so the pod is
    its own lifecycle owner): the replay creates it without the Widget (the garbage collector would
    delete a pod whose owner does not exist) and it completes after its scaled recorded lifetime."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "widget-pod",
            "namespace": "shop",
            "ownerReferences": [
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "name": "w",
                    "uid": "u-w",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    key = key_of(pod)
    events = [
        Event.applied(0, key, pod, 1),
        Event.pod_lifecycle(1_000, key, owner_key=key, pod_spec_hash=7, start_ms=1_000, end_ms=21_000),
    ]
    trace = tmp_path / "widget.kseg"
    trace.write_bytes(
        encode_segment(build_segment(events, start_ms=0, end_ms=30_000, kind=SegmentKind.TRACE))
    )
    watched = await replay_and_watch(sim_kubeconfig, trace, node_settings("widget", 10.0))
    assert watched.report.failed == 0, watched.report.summary()
    times = watched.pods["widget-pod"]
    assert times.annotations[LIFETIME_ANNOTATION] == "2.000s"
    assert "Succeeded" in times.phases, f"the bare pod never completed: {times}"
    # ran its scaled lifetime: not less (the polls bracket when it started and ended)
    assert times.phases["Succeeded"] - times.phases_not_before["Running"] >= 2.0 - SLACK_S, times
    async with kube_api(sim_kubeconfig) as api:
        await assert_cleaned_up(KubeClient(api), "widget")
