"""The mission end to end on the local stack: record a scripted workload, replay it faster.

1. the watcher (``kubetape watch``) and the sink (``kubetape sink``) run as real processes against the
   stack's ``source`` cluster and Kafka broker;
2. a scripted workload runs on ``source``: a Deployment created, scaled 2→5→3, its image changed, then
   deleted, and bare pods that finish after a few seconds;
3. both services stop gracefully (SIGTERM: the watcher flushes, the sink writes its open segments and
   commits), and ``kubetape export`` turns the recorded range into one trace;
4. ``kubetape replay`` applies that trace to the ``sim`` cluster at the chosen speed and reports fidelity.

Every stage runs through the same CLI a user types, so the demo proves the commands, not a shortcut.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.model.errors import StackError
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON, KwokCluster
from pipeline.stack.processes import free_port, http_probe
from pipeline.stack.stack import LocalStack

Say = Callable[[str], None]
REPO_ROOT = Path(__file__).resolve().parents[1]
# Deployments, Jobs, CronJobs and bare pods, with lifecycles: what the scripted workload exercises.
TRACER_CONFIG = REPO_ROOT / "examples" / "tracer.yaml"


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


class _Service:
    """A kubetape service subprocess whose readiness is polled over its loopback HTTP port."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.port = free_port()
        self.log = log
        self._log_handle = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", *argv, "--http-port", str(self.port)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StackError(
                    f"the {self.name} exited during start-up (code {self.proc.returncode}); see {self.log}"
                )
            if http_probe(f"http://127.0.0.1:{self.port}/readyz")() is None:
                return
            time.sleep(0.3)
        raise StackError(f"the {self.name} was not ready within {timeout_s:.0f}s; see {self.log}")

    def stop(self, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_handle.close()
        return self.proc.returncode


def _kubetape(*argv: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(
            f"`kubetape {' '.join(argv[:2])}` failed (exit {result.returncode}):\n"
            f"{result.stderr.strip()[-2000:]}"
        )
    return result.stdout


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
        raise StackError(f"workload: {selector} did not reach {count} Running pods in {timeout_s:.0f}s")

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
            "(is kube-controller-manager of the 'source' cluster running? `kubetape stack status`)"
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


def run_mission(stack: LocalStack, workdir: Path, *, speed: float = 10.0, say: Say = print) -> MissionResult:
    """Record the scripted workload on ``source`` and replay it on ``sim``; returns the fidelity report."""
    info = stack.up(["source", "sim"])
    source = stack.cluster("source", info.bin_dir)
    # The workload needs untainted nodes made from the default skeleton (label type=kwok); other
    # nodes of the cluster may carry taints the workload does not tolerate.
    if not source.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name").strip():
        stack.add_nodes("source", DEFAULT_NODE_SKELETON, 3, prefix="source-node")
    workdir.mkdir(parents=True, exist_ok=True)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    segments = workdir / "segments"
    namespace = f"shop-{run_id}"

    say(f"recording: sink → {segments}, watcher on cluster 'source', Kafka {info.bootstrap}")
    sink = _Service(
        "sink",
        [
            "sink",
            "--bootstrap",
            info.bootstrap,
            "--segment-dir",
            str(segments),
            "--group",
            f"kubetape-demo-{run_id}",
            "--cluster",  # the name the watcher below records under
            "source",
            "--window",
            "10s",
            "--idle-close",
            "2s",
        ],
        workdir / "sink.log",
    )
    watcher = _Service(
        "watcher",
        [
            "watch",
            "--config",
            str(TRACER_CONFIG),
            "--kubeconfig",
            str(info.kubeconfigs["source"]),
            "--bootstrap",
            info.bootstrap,
            "--cluster-id",
            "source",
        ],
        workdir / "watcher.log",
    )
    try:
        sink.wait_ready()
        watcher.wait_ready()
        start_ms = int(time.time() * 1000)
        _Workload(source, namespace).run(say)
        end_ms = int(time.time() * 1000)
        time.sleep(2)  # the last changes reach Kafka before the watcher is asked to stop
    finally:
        watcher_code = watcher.stop()
        time.sleep(3)  # idle-close lets the sink write what it holds before its own graceful stop
        sink_code = sink.stop()
    if watcher_code != 0 or sink_code != 0:
        raise StackError(
            f"recording services did not stop cleanly (watcher {watcher_code}, sink {sink_code}); "
            f"see {workdir}/watcher.log and {workdir}/sink.log"
        )

    trace = workdir / f"recording-{run_id}.kts"
    say(f"exporting [{start_ms}, {end_ms}) → {trace}")
    _kubetape(
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
    summary_of_trace = _kubetape("inspect", str(trace))

    report_path = workdir / f"replay-{run_id}.json"
    say(f"replaying on cluster 'sim' at speed {speed:g}")
    replay_out = _kubetape(
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
    )
    report: dict[str, Any] = json.loads(report_path.read_text())
    return MissionResult(
        trace, report, replay_out, summary_of_trace, info.bootstrap, start_ms, end_ms, segments, report_path
    )
