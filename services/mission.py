"""The mission end to end on the local stack: record a scripted workload, replay it faster.

1. the watcher (``kubetape watch``) and the sink (``kubetape sink``) run as real processes against the
   stack's ``source`` cluster and Kafka broker;
2. a scripted workload runs on ``source``: a Deployment created, scaled 2→5→3, its image changed, then
   deleted, and bare pods that finish after a few seconds; with ``hpa``, then a Deployment whose HPA
   scales it for real under a rising, then falling load (:mod:`services.hpa_workload`: ``source`` serves
   the Metrics API, and the recording carries the HPA's decisions and the load);
3. both services stop gracefully (SIGTERM: the watcher flushes, the sink writes its open segments and
   commits), and ``kubetape export`` turns the recorded range into one trace;
4. ``kubetape replay`` applies that trace to the ``sim`` cluster at the chosen speed and reports fidelity.

Every stage runs through the same CLI a user types, so the demo proves the commands, not a shortcut.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.formats.wire.codec import decode_event
from pipeline.io.kafka.admin import topic_partitions
from pipeline.io.kafka.clients import new_consumer
from pipeline.io.kafka.reads import read_topic_range
from pipeline.io.kafka.settings import EVENTS_TOPIC, KafkaSettings
from pipeline.model.errors import StackError
from pipeline.model.events import EventType
from pipeline.model.keys import ClusterId
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON, KwokCluster
from pipeline.stack.stack import LocalStack
from services.hpa_workload import HpaWorkload
from services.kubetape_processes import KubetapeService, run_kubetape

Say = Callable[[str], None]
REPO_ROOT = Path(__file__).resolve().parents[1]
# Deployments, Jobs, CronJobs and bare pods, with lifecycles: what the scripted workload exercises.
TRACER_CONFIG = REPO_ROOT / "examples" / "tracer.yaml"
DEMO_MAX_LAG_S = 2.0
"""The demo replay's ``--max-lag`` (trace s), and so its settle. The scripted workload's steps are
about 4.5 trace seconds apart and its recording about 30 s long: a settle longer than a step forgives
the step (issue 46: at x10 the default settle was 30 trace s and every sample matched some count). A
busy machine needs up to a wall second after a scale-down, 10 trace s at x10, so the settle is made
short by letting the trace clock wait for the cluster, not by hoping the machine keeps up."""


@dataclass(frozen=True, slots=True)
class MissionResult:
    trace: Path
    report: dict[str, Any]
    summary: str
    inspect: str
    bootstrap: str
    """The broker the recording went through (its events topic holds the recorded range too)."""
    start_ms: int
    end_ms: int
    segments: Path
    report_path: Path
    cluster: str
    """The recorded cluster: its name in the stack and the id its events carry in the topic."""


def _until(check: Callable[[], tuple[bool, object]], what: str, timeout_s: float) -> None:
    """Poll ``check`` (done, what it saw) until done; a StackError naming ``what`` and the last state
    seen once ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, seen = check()
        if done:
            return
        if time.monotonic() > deadline:
            raise StackError(f"timed out after {timeout_s:.0f} s waiting for {what}; last seen: {seen}")
        time.sleep(0.5)


def live_pods(cluster: KwokCluster, namespace: str) -> set[str]:
    """The namespace's pods that have not finished: neither Succeeded nor Failed, nor being deleted."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))
    return {
        p["metadata"]["name"]
        for p in pods["items"]
        if p["status"].get("phase") not in ("Succeeded", "Failed")
        and not p["metadata"].get("deletionTimestamp")
    }


def recorded_pods(
    bootstrap: str, cluster_id: str, namespace: str, since_ms: int
) -> tuple[set[str], set[str]]:
    """From the events topic, the namespace's pods recorded since ``since_ms``: (started, ended)."""
    messages = asyncio.run(
        read_topic_range(
            KafkaSettings(bootstrap=bootstrap),
            EVENTS_TOPIC,
            int(time.time() * 1000) + 60_000,
            start_ms=since_ms,
            cluster=ClusterId(cluster_id),
        )
    )
    started, ended = set(), set()
    prefix = f"core/Pod/{namespace}/"
    for message in messages:
        if message.value is None:
            continue
        event = decode_event(message.value, f"{EVENTS_TOPIC} p{message.partition} @{message.offset}")
        if event.type is EventType.POD_LIFECYCLE and event.key.startswith(prefix):
            name = event.key.removeprefix(prefix)
            started.add(name)
            if event.pod_end_ms is not None:
                ended.add(name)
    return started, ended


def wait_recorded(
    bootstrap: str,
    cluster: KwokCluster,
    *,
    cluster_id: str,
    namespace: str,
    since_ms: int,
    timeout_s: float = 60.0,
) -> None:
    """Wait until the events topic holds the namespace's pods as the cluster has them now: each pod that
    still runs has started, every other pod the recording started has ended. Then a watcher can be
    stopped without its last changes missing from the recording."""

    def check() -> tuple[bool, object]:
        live = live_pods(cluster, namespace)
        started, ended = recorded_pods(bootstrap, cluster_id, namespace, since_ms)
        unended = started - ended - live
        unstarted = live - started
        return bool(started) and not unended and not unstarted, {
            "live": sorted(live),
            "recorded without their end": sorted(unended),
            "live but not recorded": sorted(unstarted),
        }

    _until(
        check, f"the recording of namespace {namespace} to catch up with cluster {cluster_id!r}", timeout_s
    )


def wait_committed(bootstrap: str, group: str, timeout_s: float = 60.0) -> None:
    """Wait until consumer ``group`` has committed the events topic up to its end: the sink has made
    everything published so far durable, so stopping it loses nothing of the recording."""

    async def positions() -> tuple[bool, object]:
        settings = KafkaSettings(bootstrap=bootstrap)
        partitions = await topic_partitions(settings, EVENTS_TOPIC)
        consumer = new_consumer(settings, group_id=group, role="mission-check")
        await consumer.start()
        try:
            ends = await consumer.end_offsets(partitions)
            committed = {tp.partition: await consumer.committed(tp) for tp in partitions}
        finally:
            await consumer.stop()
        behind = {
            tp.partition: (committed[tp.partition], end)
            for tp, end in ends.items()
            if (committed[tp.partition] or 0) < end
        }
        return not behind, {"partition: (committed, end)": behind}

    _until(lambda: asyncio.run(positions()), f"sink group {group} to commit the events topic", timeout_s)


_NODE_COLUMNS = (
    "NAME:.metadata.name,READY:.status.conditions[?(@.type=='Ready')].status,TAINTS:.spec.taints[*].key"
)


class _Workload:
    """The scripted workload, written with kubectl against the source cluster."""

    def __init__(self, cluster: KwokCluster, namespace: str) -> None:
        self.cluster = cluster
        self.ns = namespace

    def apply(self, manifest: dict[str, Any]) -> None:
        self.cluster.kubectl("apply", "-n", self.ns, "-f", "-", stdin=json.dumps(manifest))

    def running(self, selector: str) -> int:
        pods = json.loads(self.cluster.kubectl("get", "pods", "-n", self.ns, "-l", selector, "-o", "json"))
        return sum(
            1
            for p in pods["items"]
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        )

    def wait_running(self, selector: str, count: int, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.running(selector) == count:
                return
            time.sleep(0.5)
        raise StackError(
            f"workload: {selector} did not reach {count} Running pods in {timeout_s:.0f}s; last seen:\n"
            + self.cluster.kubectl("get", "pods", "-n", self.ns, "-l", selector, "-o", "wide")
            + self.cluster.kubectl("get", "nodes", "-o", "custom-columns=" + _NODE_COLUMNS)
            + self.cluster.kubectl(
                "get", "events", "-n", self.ns, "--field-selector=type=Warning", "-o",
                "custom-columns=OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message",
            )
        )  # fmt: skip

    def wait_default_service_account(self, timeout_s: float = 60.0) -> None:
        """Pods are refused until the namespace's default ServiceAccount exists. ``kubectl wait`` is no
        help here: it fails at once, instead of waiting, while the object does not exist yet."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            listed = self.cluster.kubectl("get", "serviceaccounts", "-n", self.ns, "-o", "name")
            if "serviceaccount/default" in listed.split():
                return
            time.sleep(0.3)
        raise StackError(
            f"workload: namespace {self.ns} has no default ServiceAccount after {timeout_s:.0f}s "
            f"(is kube-controller-manager of cluster {self.cluster.name!r} running? `kubetape stack status`)"
        )

    def run(self, say: Say) -> None:
        self.cluster.kubectl("create", "namespace", self.ns)
        self.wait_default_service_account()
        for replicas, image in ((2, "web:1"), (5, "web:1"), (5, "web:2"), (3, "web:2")):
            say(f"workload: Deployment web → {replicas} replicas, image {image}")
            self.apply(_deployment(replicas, image))
            self.wait_running("app=web", replicas)
            time.sleep(3)
        for name, lifetime in (("batch-a", "4s"), ("batch-b", "8s")):
            say(f"workload: bare pod {name} that finishes after {lifetime}")
            self.apply(_bare_pod(name, lifetime))
        time.sleep(10)
        say("workload: deleting Deployment web")
        self.cluster.kubectl("delete", "deployment", "web", "-n", self.ns, "--wait=true")
        time.sleep(3)


def _deployment(replicas: int, image: str) -> dict[str, Any]:
    labels = {"app": "web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": image,
                            "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}},
                        }
                    ]
                },
            },
        },
    }


def _bare_pod(name: str, lifetime: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "batch"},
            # On the source cluster this KWOK-stage annotation plays the part of a real
            # container that exits after a while.
            "annotations": {"kubetape.dev/lifetime": lifetime},
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "job", "image": "batch:1"}]},
    }


def run_mission(
    stack: LocalStack,
    workdir: Path,
    *,
    speed: float = 10.0,
    max_lag_s: float | None = DEMO_MAX_LAG_S,
    say: Say = print,
    source_cluster: str = "source",
    hpa: bool = False,
) -> MissionResult:
    """Record the scripted workload on ``source_cluster`` and replay it on ``sim``; returns the fidelity
    report. The export holds the whole recorded cluster at the range's start, so a cluster that holds
    nothing else gives a trace of the workload alone.
    ``max_lag_s``: the replay's ``--max-lag`` (the trace clock holds while the cluster is behind), and
    so the settle the verdict judges at (:data:`DEMO_MAX_LAG_S`); None: the default settle.
    ``hpa``: the workload ends with an HPA at work (``source`` started with the Metrics API; a
    ``source`` already running without it is refused by name)."""
    if hpa:  # only the recorded cluster needs metrics: the replay writes the HPA's recorded decisions
        stack.up([source_cluster], metrics=True)
    info = stack.up([source_cluster, "sim"])
    source = stack.cluster(source_cluster, info.bin_dir)
    # The workload needs untainted nodes made from the default skeleton (label type=kwok); other
    # nodes of the cluster may carry taints the workload does not tolerate.
    if not source.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name").strip():
        stack.add_nodes(source_cluster, DEFAULT_NODE_SKELETON, 3, prefix=f"{source_cluster}-node")
    workdir.mkdir(parents=True, exist_ok=True)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    segments = workdir / "segments"
    namespace = f"shop-{run_id}"

    group = f"kubetape-demo-{run_id}"
    say(f"recording: sink → {segments}, watcher on cluster '{source_cluster}', Kafka {info.bootstrap}")
    sink = KubetapeService(
        "sink",
        [
            "sink",
            "--bootstrap",
            info.bootstrap,
            "--segment-dir",
            str(segments),
            "--group",
            group,
            "--cluster",  # the name the watcher below records under
            source_cluster,
            "--window",
            "10s",
            "--idle-close",
            "2s",
        ],
        workdir / "sink.log",
    )
    watcher = KubetapeService(
        "watcher",
        [
            "watch",
            "--config",
            str(TRACER_CONFIG),
            "--kubeconfig",
            str(info.kubeconfigs[source_cluster]),
            "--bootstrap",
            info.bootstrap,
            "--cluster-id",
            source_cluster,
        ],
        workdir / "watcher.log",
    )
    try:
        sink.wait_ready()
        watcher.wait_ready()
        start_ms = int(time.time() * 1000)
        _Workload(source, namespace).run(say)
        if hpa:
            HpaWorkload(source, namespace).run(say)
        end_ms = int(time.time() * 1000)
        # the watcher stops once the topic holds the workload's last changes, and the sink once it has
        # made them durable (idle-close writes what it holds, then it commits)
        wait_recorded(
            info.bootstrap, source, cluster_id=source_cluster, namespace=namespace, since_ms=start_ms
        )
    finally:
        watcher_code = watcher.stop()
        try:
            wait_committed(info.bootstrap, group)
        finally:
            sink_code = sink.stop()
    if watcher_code != 0 or sink_code != 0:
        raise StackError(
            f"recording services did not stop cleanly (watcher {watcher_code}, sink {sink_code}); "
            f"see {workdir}/watcher.log and {workdir}/sink.log"
        )

    trace = workdir / f"recording-{run_id}.kts"
    say(f"exporting [{start_ms}, {end_ms}) → {trace}")
    run_kubetape(
        "export",
        "--segment-dir",
        str(segments),
        "--from",
        str(start_ms),
        "--to",
        str(end_ms),
        "--config",
        str(TRACER_CONFIG),
        "--exclude-namespace",
        "kube-system",
        "-o",
        str(trace),
    )
    summary_of_trace = run_kubetape("inspect", str(trace))

    report_path = workdir / f"replay-{run_id}.json"
    say(f"replaying on cluster 'sim' at speed {speed:g}")
    replay_out = run_kubetape(
        "replay",
        "--trace",
        str(trace),
        "--kubeconfig",
        str(info.kubeconfigs["sim"]),
        "--speed",
        f"{speed:g}",
        "--nodes",
        f"{DEFAULT_NODE_SKELETON}:3",
        "--report-json",
        str(report_path),
        "--sample-interval",
        "0.25",
        "--quiet",
        *([] if max_lag_s is None else ["--max-lag", f"{max_lag_s:g}"]),
    )
    report: dict[str, Any] = json.loads(report_path.read_text())
    return MissionResult(
        trace,
        report,
        replay_out,
        summary_of_trace,
        info.bootstrap,
        start_ms,
        end_ms,
        segments,
        report_path,
        source_cluster,
    )
