"""Recording at scale: the real ``kubetape watch`` and ``kubetape sink`` record a seeded cluster of
``--pods`` pods through the local stack's Kafka, the recording is checked exact against what was applied,
and every component's peak memory and CPU is measured. Prints one JSON document.

On a private local stack (Kafka and one KWOK cluster ``source`` of profile ``--profile``, with
``--nodes`` fake nodes of the default skeleton, 110 pods each):

1. the sink (10-s windows) and the watcher (``examples/tracer.yaml``: Deployments with their pods as
   lifecycles) start and are ready;
2. *ramp*: ``--deployments`` Deployments whose replicas add up to ``--pods`` are created
   (:mod:`bench.record_workload`, seeded); the controllers and the scheduler make the pods Running;
   with ``--late-watcher``, a second watcher is then started on the ramped cluster and stopped once
   ready: its peak RSS is the cost of a watcher's initial list (or a re-list) of every pod at once;
3. *steady*: ``--changes-per-min`` changes for ``--steady`` seconds (scale, annotate, roll);
4. the cluster settles (every Deployment's rollout done, no pod terminating), the recording catches up
   (the events topic's end stays still and the sink has committed it), the watcher and the sink stop
   (SIGTERM), and ``kubetape export`` writes the recorded range as one trace;
5. *exact*: the trace folded to its final state against the apiserver's own lists at the end: every
   Deployment's spec equal (sanitized as the recorder does), the pods live in the cluster exactly the
   recording's started-and-unended lifecycles, each under its Deployment, and the Deployments' recorded
   spec versions exactly the creations, scales and rolls applied (the annotate changes must add none).

Memory and CPU: the watcher's, the sink's and the export's peak RSS and CPU seconds exactly, from the
kernel's accounting of each child at its exit (``wait4``); the stack's processes (kube-apiserver, etcd,
kwok-controller, kube-controller-manager, kube-scheduler, Kafka) from ``/proc/PID/status`` ``VmHWM``
(the kernel's own peak, over the process's life) and ``/proc/PID/stat``, sampled every second (CPU
counted from once the nodes are up: the stack's start-up is not in it); plus the wall time of each phase
and the machine's load average.

Usage::

    .venv/bin/python -m bench.bench_record --pods 5000                     # ~10 min
    nice -n 19 .venv/bin/python -m bench.bench_record --pods 50000 --deployments 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.cpu_usage import TICKS_PER_S, process_cpu_s
from bench.record_workload import (
    ANNOTATION,
    ROLLOUT_ANNOTATION,
    Change,
    ChangeKind,
    expected_spec_changes,
    initial_replicas,
    names,
    nodes_for,
    steady_changes,
)
from pipeline.formats.trace import initial_events, read_trace
from pipeline.io.kafka.admin import topic_partitions
from pipeline.io.kafka.clients import new_consumer
from pipeline.io.kafka.settings import EVENTS_TOPIC, KafkaSettings
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.model.events import Event, EventType
from pipeline.model.keys import GroupVersionKind
from pipeline.model.sanitize import sanitize
from pipeline.model.tracer_config import load_tracer_config
from pipeline.replay import workload_manifests
from pipeline.stack.ports import free_port
from pipeline.stack.processes import http_probe
from services.kubetape_processes import REPO_ROOT

TRACER_CONFIG = REPO_ROOT / "examples" / "tracer.yaml"
NAMESPACE = "rec"
CLUSTER_ID = "source"
GROUP = "bench-record"
IN_FLIGHT = 16
MIB = 1024 * 1024


def say(message: str) -> None:
    print(f"[bench_record {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- processes and what they cost --------------------------------------------------------------------
@dataclass
class Measured:
    """A kubetape command as a child process, its peak RSS and CPU taken from the kernel at its exit
    (``wait4``, by :mod:`bench.peak_of`, which starts it: see there why not by this process)."""

    name: str
    argv: list[str]
    log: Path
    port: int | None = None
    runner: list[str] = field(default_factory=lambda: ["-m", "services.cli"])
    """How the command is run by this interpreter: the CLI, or :mod:`bench.traced_watch` around it."""
    proc: subprocess.Popen[bytes] = field(init=False)
    """The :mod:`bench.peak_of` process around the command."""
    _usage: Path = field(init=False)
    """Where :mod:`bench.peak_of` writes the command's figures (and, beside it, its pid)."""
    peak_rss_mib: float | None = None
    cpu_s: float | None = None
    exit_code: int | None = None

    def __post_init__(self) -> None:
        http = ["--http-port", str(self.port)] if self.port is not None else []
        self._usage = self.log.with_name(f"{self.log.stem}.usage.json")
        self._usage.unlink(missing_ok=True)
        self._usage.with_name(self._usage.name + ".pid").unlink(missing_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "bench.peak_of", str(self._usage)),
                    *(sys.executable, *self.runner, *self.argv, *http),
                ],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(
                    f"the {self.name} exited at start-up ({self.proc.returncode}); see {self.log}"
                )
            if http_probe(f"http://127.0.0.1:{self.port}/readyz")() is None:
                return
            time.sleep(0.5)
        raise SystemExit(f"the {self.name} was not ready within {timeout_s:.0f} s; see {self.log}")

    @property
    def pid(self) -> int:
        """The command's own pid (not its :mod:`bench.peak_of` starter's), once it has started."""
        pid_file = self._usage.with_name(self._usage.name + ".pid")
        deadline = time.monotonic() + 30.0
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return int(pid_file.read_text())

    def finish(self, *, terminate: bool, timeout_s: float = 600.0) -> int:
        """Stop it (SIGTERM) or let it end, and take its peak RSS and CPU from ``wait4``."""
        if terminate:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait()
        try:
            usage = json.loads(self._usage.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"bench_record: no figures of the {self.name} ({exc}); see {self.log}") from None
        self.exit_code = usage["exit_code"]
        self.peak_rss_mib = round(usage["maxrss_kib"] * 1024 / MIB, 1)  # KiB on Linux
        self.cpu_s = round(usage["cpu_s"], 1)
        return int(usage["exit_code"])


def resident_mib(pid: int) -> dict[str, float]:
    """A live process's resident memory now and its peak so far (VmRSS, VmHWM) in MiB; empty once gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        name: round(int(fields[field].split()[0]) / 1024, 1)
        for name, field in (("rss_mib", "VmRSS"), ("peak_mib", "VmHWM"))
        if field in fields
    }


WATCHER_COUNTERS = (
    "kubetape_relists_total",
    "kubetape_watch_errors_total",
    "kubetape_events_published_total",
)
"""The watcher's counters the report gives: its re-lists and broken or expired watches say whether it
listed every pod again during the run."""


def scrape_counters(port: int | None, names: tuple[str, ...] = WATCHER_COUNTERS) -> dict[str, float]:
    """The service's ``/metrics`` lines of ``names`` (every label set), as ``name{labels}`` → value."""
    if port is None:
        return {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:  # the figures are missing from the report, the run still counts
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(names):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def proc_peak(pid: int) -> tuple[float, float] | None:
    """(VmHWM in MiB, CPU seconds) of a live process, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cpu = process_cpu_s(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, IndexError, ValueError):
        return None
    hwm = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), "0")
    return int(hwm) / 1024, cpu


class StackSampler:
    """Every second, the stack processes' kernel peak RSS and CPU seconds (the last seen of each)."""

    def __init__(self, pids: dict[int, str]) -> None:
        self.pids = pids
        self.seen: dict[int, tuple[float, float]] = {}
        self.first_cpu: dict[int, float] = {}
        """CPU seconds of each at the first sample: the run's share is counted from there."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def sample(self) -> None:
        for pid in self.pids:
            if (got := proc_peak(pid)) is not None:
                self.seen[pid] = got
                self.first_cpu.setdefault(pid, got[1])

    def stop(self) -> dict[str, dict[str, float]]:
        self._stop.set()
        self._thread.join()
        self.sample()
        out: dict[str, dict[str, float]] = {}
        for pid, (hwm, cpu) in self.seen.items():
            name = self.pids[pid]
            entry = out.setdefault(name, {"peak_rss_mib": 0.0, "cpu_s": 0.0})
            entry["peak_rss_mib"] = round(max(entry["peak_rss_mib"], hwm), 1)
            entry["cpu_s"] = round(entry["cpu_s"] + cpu - self.first_cpu[pid], 1)
        return out


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return f"pid {pid}"


# ---- the cluster side ----------------------------------------------------------------------------------
def deployment(name: str, replicas: int) -> dict[str, Any]:
    # 10m CPU: a node's 110 pods, not its 8 CPUs, bound how many it holds
    return workload_manifests.deployment(
        name, NAMESPACE, replicas, cpu="10m", memory="16Mi", container="app", image="registry.example/app:1"
    )


async def nodes_ready(cluster: KubeClient, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    ready = 0
    while time.monotonic() < deadline:
        ready = sum(
            1
            for node in await cluster.list_objects("v1", "Node", label_selector="type=kwok")
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []
            )
        )
        if ready >= count:
            await asyncio.sleep(2.0)  # kubernetes-sigs/kwok#1572: see bench_scale.nodes_ready
            return
        await asyncio.sleep(1.0)
    raise SystemExit(f"bench_record: only {ready} of {count} nodes Ready after {timeout_s:.0f} s")


def rollout_state(deployments: list[dict[str, Any]]) -> tuple[int, int]:
    """(Deployments not settled, pods ready in all): settled is observed, updated, all ready, no old pod."""
    unsettled = ready = 0
    for d in deployments:
        spec, status = d.get("spec") or {}, d.get("status") or {}
        want = spec.get("replicas", 1)
        ready += status.get("readyReplicas") or 0
        if (
            status.get("observedGeneration") != d["metadata"].get("generation")
            or status.get("updatedReplicas") != want
            or status.get("readyReplicas") != want
            or status.get("replicas") != want
        ):
            unsettled += 1
    return unsettled, ready


async def wait_settled(cluster: KubeClient, what: str, timeout_s: float) -> float:
    """Wait until every Deployment has settled; the seconds it took."""
    started = time.monotonic()
    last_report = 0.0
    while True:
        items = await cluster.list_objects("apps/v1", "Deployment", namespace=NAMESPACE)
        unsettled, ready = rollout_state(items)
        if not unsettled:
            return time.monotonic() - started
        now = time.monotonic()
        if now - started > timeout_s:
            raise SystemExit(
                f"bench_record: {what}: {unsettled} Deployments not settled after {timeout_s:.0f} s "
                f"({ready} pods ready)"
            )
        if now - last_report > 30:
            say(f"{what}: {ready} pods ready, {unsettled} Deployments not settled ({now - started:.0f} s)")
            last_report = now
        await asyncio.sleep(5.0)


async def run_limited(jobs: list[Any], limit: int) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(job: Any) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


async def apply_change(cluster: KubeClient, name: str, change: Change) -> None:
    if change.kind is ChangeKind.SCALE:
        patch: dict[str, Any] = {"spec": {"replicas": change.replicas}}
    elif change.kind is ChangeKind.ANNOTATE:
        patch = {"metadata": {"annotations": {ANNOTATION: str(change.serial)}}}
    else:
        patch = {
            "spec": {"template": {"metadata": {"annotations": {ROLLOUT_ANNOTATION: str(change.serial)}}}}
        }
    await cluster.merge_patch("apps/v1", "Deployment", NAMESPACE, name, patch)


async def steady(cluster: KubeClient, deployment_names: list[str], changes: list[Change]) -> dict[str, Any]:
    """Apply the changes on their schedule (open loop); how late they went out."""
    t0 = time.monotonic()
    late: list[float] = []
    pending: set[asyncio.Task[None]] = set()
    for change in changes:
        delay = t0 + change.at_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        late.append(max(-delay, 0.0))
        task = asyncio.create_task(apply_change(cluster, deployment_names[change.index], change))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.gather(*pending)
    late.sort()
    return {
        "changes": len(changes),
        "by_kind": dict(Counter(c.kind.value for c in changes)),
        "wall_s": round(time.monotonic() - t0, 1),
        "late_s_p99": round(late[int(len(late) * 0.99)] if late else 0.0, 2),
    }


async def topic_ends(bootstrap: str) -> dict[int, int]:
    settings = KafkaSettings(bootstrap=bootstrap)
    partitions = await topic_partitions(settings, EVENTS_TOPIC)
    consumer = new_consumer(settings, group_id=GROUP, role="bench-check")
    await consumer.start()
    try:
        ends = await consumer.end_offsets(partitions)
        committed = {tp.partition: (await consumer.committed(tp)) or 0 for tp in partitions}
    finally:
        await consumer.stop()
    return {tp.partition: end - committed[tp.partition] for tp, end in ends.items()} | {
        -1 - tp.partition: end for tp, end in ends.items()
    }


async def wait_recording_caught_up(bootstrap: str, still_s: float, timeout_s: float) -> float:
    """Wait until the events topic's end has not moved for ``still_s`` (the watcher has published what
    the cluster did) and the sink has committed it; the seconds it took."""
    started = time.monotonic()
    last: dict[int, int] | None = None
    since = time.monotonic()
    while time.monotonic() - started < timeout_s:
        now = await topic_ends(bootstrap)
        ends = {k: v for k, v in now.items() if k < 0}
        lag = sum(v for k, v in now.items() if k >= 0)
        if ends != last:
            last, since = ends, time.monotonic()
        elif time.monotonic() - since >= still_s and lag == 0:
            return time.monotonic() - started
        await asyncio.sleep(2.0)
    raise SystemExit(
        f"bench_record: the recording did not catch up within {timeout_s:.0f} s (last ends {last})"
    )


# ---- exactness ------------------------------------------------------------------------------------------
async def live_state(cluster: KubeClient) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The apiserver's own lists at the end: the namespace's Deployments and pods (all pages)."""
    deployments = await cluster.resolve(GroupVersionKind("apps", "v1", "Deployment"))
    pods = await cluster.resolve(GroupVersionKind("", "v1", "Pod"))
    if deployments is None or pods is None:
        raise SystemExit("bench_record: the apiserver serves no Deployments or Pods")
    ds = [
        d for d in (await cluster.list_all(deployments)).items if d["metadata"].get("namespace") == NAMESPACE
    ]
    ps = [p for p in (await cluster.list_all(pods)).items if p["metadata"].get("namespace") == NAMESPACE]
    return ds, ps


def fold(events: list[Event]) -> tuple[dict[str, Event], dict[str, Event], Counter[str]]:
    """The trace's final objects and lifecycles by key, and the APPLIED events per object key."""
    objects: dict[str, Event] = {}
    lifecycles: dict[str, Event] = {}
    applied: Counter[str] = Counter()
    for event in events:
        if event.type is EventType.APPLIED:
            objects[event.key] = event
            applied[event.key] += 1
        elif event.type is EventType.DELETED:
            objects.pop(event.key, None)
        elif event.type is EventType.POD_LIFECYCLE:
            lifecycles[event.key] = event
    return objects, lifecycles, applied


def judge(
    trace_path: Path,
    live_deployments: list[dict[str, Any]],
    live_pods: list[dict[str, Any]],
    expected_versions: dict[str, int],
) -> dict[str, Any]:
    """The recording against the cluster and the plan; ``exact`` only if every check holds."""
    config = load_tracer_config(TRACER_CONFIG)
    trace = read_trace(trace_path)
    events = initial_events(trace)
    in_keyframe = len(events) - len(trace.events)
    objects, lifecycles, _ = fold(events)
    _, _, applied = fold(list(trace.events))
    d_prefix, p_prefix = f"apps/Deployment/{NAMESPACE}/", f"core/Pod/{NAMESPACE}/"

    spec_mismatch = []
    for d in live_deployments:
        key = d_prefix + d["metadata"]["name"]
        want = sanitize(d, config, api_version="apps/v1", kind="Deployment").get("spec")
        got = (objects[key].obj or {}).get("spec") if key in objects else None
        if got != want:
            spec_mismatch.append(key)
    recorded_deployments = {k for k in objects if k.startswith(d_prefix)}
    live_keys = {d_prefix + d["metadata"]["name"] for d in live_deployments}

    live = {
        p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get("app", "")
        for p in live_pods
        if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") == "Running"
    }
    not_running = len(live_pods) - len(live)
    ours = {k.removeprefix(p_prefix): e for k, e in lifecycles.items() if k.startswith(p_prefix)}
    unended = {name for name, e in ours.items() if e.pod_end_ms is None}
    wrong_owner = [name for name in set(live) & unended if ours[name].owner_key != d_prefix + live[name]]
    version_mismatch = {
        key: (applied.get(key, 0), want)
        for key, want in expected_versions.items()
        if applied.get(key, 0) != want
    }
    checks = {
        "deployments_recorded_as_live": recorded_deployments == live_keys,
        "deployment_specs_equal": not spec_mismatch,
        "live_pods_are_the_unended_lifecycles": set(live) == unended,
        "pods_under_their_deployment": not wrong_owner,
        "spec_versions_as_applied": not version_mismatch,
        "no_pod_left_terminating_or_pending": not_running == 0,
    }
    return {
        "exact": all(checks.values()),
        "checks": checks,
        "trace_events": len(trace.events),
        "keyframe_entries": in_keyframe,
        "deployments": len(live_deployments),
        "deployment_versions_applied": sum(expected_versions.values()),
        "deployment_versions_recorded": sum(v for k, v in applied.items() if k.startswith(d_prefix)),
        "live_pods": len(live),
        "pod_lifecycles_recorded": len(ours),
        "pod_lifecycles_ended": len(ours) - len(unended),
        "examples": {
            "spec_mismatch": spec_mismatch[:5],
            "version_mismatch": dict(list(version_mismatch.items())[:5]),
            "live_not_recorded": sorted(set(live) - unended)[:5],
            "recorded_not_live": sorted(unended - set(live))[:5],
            "wrong_owner": wrong_owner[:5],
        },
    }


# ---- the run --------------------------------------------------------------------------------------------
async def drive(
    kubeconfig: Path,
    args: argparse.Namespace,
    replicas: list[int],
    changes: list[Change],
    after_ramp: Callable[[], dict[str, Any]],
    *,
    mark: Callable[[str], None],
) -> tuple[dict[str, Any], tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    deployment_names = names(args.deployments)
    phases: dict[str, Any] = {}
    async with kube_api(kubeconfig) as api:
        cluster = KubeClient(api)
        await cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        while await cluster.get("v1", "ServiceAccount", NAMESPACE, "default") is None:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        say(f"ramp: {args.deployments} Deployments, {args.pods} pods")
        t0 = time.monotonic()
        await run_limited(
            [cluster.create(deployment(n, r)) for n, r in zip(deployment_names, replicas, strict=True)],
            IN_FLIGHT,
        )
        created_s = time.monotonic() - t0
        settled_s = await wait_settled(cluster, "ramp", args.timeout)
        phases["ramp"] = {
            "created_s": round(created_s, 1),
            "wall_s": round(settled_s + created_s, 1),
            "pods_per_s": round(args.pods / (settled_s + created_s), 1),
        }
        say(f"ramp done in {settled_s + created_s:.0f} s")
        mark("ramp_settled")
        phases["after_ramp"] = after_ramp()  # nothing else runs on this loop meanwhile
        say(f"steady: {len(changes)} changes over {args.steady:.0f} s")
        phases["steady"] = await steady(cluster, deployment_names, changes)
        phases["steady"]["settle_s"] = round(
            await wait_settled(cluster, "after the steady phase", args.timeout), 1
        )
        mark("steady_settled")
        # pods deleted by rollouts leave once KWOK has finished them: none may be left terminating
        t1 = time.monotonic()
        while True:
            live = await live_state(cluster)
            terminating = sum(1 for p in live[1] if p["metadata"].get("deletionTimestamp"))
            if not terminating or time.monotonic() - t1 > 300:
                break
            await asyncio.sleep(3.0)
        phases["terminating_drained_s"] = round(time.monotonic() - t1, 1)
        return phases, live


async def final_lists(kubeconfig: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    async with kube_api(kubeconfig) as api:
        return await live_state(KubeClient(api))


def late_watcher(workdir: Path, info: Any, wanted: bool) -> dict[str, Any]:
    """With ``wanted``: a second watcher (its own cluster id, which the sink does not record) started on
    the ramped cluster and stopped once ready: its peak RSS is what listing every pod at once costs, as
    a watcher starting on (or re-listing) a cluster of this size pays."""
    if not wanted:
        return {}
    watcher = Measured(
        "late watcher",
        ["watch", "--config", str(TRACER_CONFIG), "--kubeconfig", str(info.kubeconfigs["source"]),
         "--bootstrap", info.bootstrap, "--cluster-id", "bench-record-late"],
        workdir / "late-watcher.log",
        port=free_port(),
    )  # fmt: skip
    t0 = time.monotonic()
    watcher.wait_ready(timeout_s=1800)
    ready_s = time.monotonic() - t0
    watcher.finish(terminate=True)
    say(f"a watcher started on the ramped cluster: ready in {ready_s:.0f} s, peak {watcher.peak_rss_mib} MiB")
    return {
        "late_watcher": {
            "ready_s": round(ready_s, 1),
            "peak_rss_mib": watcher.peak_rss_mib,
            "cpu_s": watcher.cpu_s,
            "exit_code": watcher.exit_code,
        }
    }


def recorder(info: Any, workdir: Path, segments: Path, *, trace_watcher: bool) -> tuple[Measured, Measured]:
    """The sink and the watcher started (not yet ready) on the stack; the watcher under tracemalloc
    (:mod:`bench.traced_watch`, its report ``watcher-heap.json`` in ``workdir``) with ``trace_watcher``."""
    sink = Measured(
        "sink",
        ["sink", "--bootstrap", info.bootstrap, "--segment-dir", str(segments), "--group", GROUP,
         "--cluster", CLUSTER_ID, "--window", "10s", "--idle-close", "2s"],
        workdir / "sink.log",
        port=free_port(),
    )  # fmt: skip
    traced = ["-m", "bench.traced_watch", str(workdir / "watcher-heap.json"), "--"]
    watcher = Measured(
        "watcher",
        ["watch", "--config", str(TRACER_CONFIG), "--kubeconfig", str(info.kubeconfigs["source"]),
         "--bootstrap", info.bootstrap, "--cluster-id", CLUSTER_ID],
        workdir / "watcher.log",
        port=free_port(),
        runner=traced if trace_watcher else ["-m", "services.cli"],
    )  # fmt: skip
    return sink, watcher


def start_stack_sampler(stack: Any, info: Any) -> StackSampler:
    """Sampling the source cluster's processes and Kafka's, their CPU counted from now (the stack's
    start-up and the nodes' are not in it)."""
    from pipeline.stack.kwok import cluster_processes
    from pipeline.stack.state import StackState

    source = stack.cluster("source", info.bin_dir)
    kafka = StackState.load(stack.state_path).kafka
    pids = {pid: process_name(pid) for pid in cluster_processes(source)}
    for node in kafka.nodes if kafka else []:
        if node.pid:
            pids[node.pid] = "kafka"
    sampler = StackSampler(pids)
    sampler.sample()
    sampler.start()
    return sampler


def measure(stack: Any, info: Any, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    from pipeline.stack.kwok import DEFAULT_NODE_SKELETON

    kubeconfig = info.kubeconfigs["source"]
    t0 = time.monotonic()
    stack.add_nodes("source", DEFAULT_NODE_SKELETON, args.nodes, prefix="rec")

    async def ready() -> None:
        async with kube_api(kubeconfig) as api:
            await nodes_ready(KubeClient(api), args.nodes, args.timeout)

    asyncio.run(ready())
    nodes_s = time.monotonic() - t0
    sampler = start_stack_sampler(stack, info)

    replicas = initial_replicas(args.pods, args.deployments, args.seed)
    changes = steady_changes(
        replicas, changes_per_min=args.changes_per_min, steady_s=args.steady, seed=args.seed
    )
    expected = expected_spec_changes(args.deployments, changes, replicas)
    segments = workdir / "segments"
    sink, watcher = recorder(info, workdir, segments, trace_watcher=args.trace_watcher)
    try:
        sink.wait_ready()
        watcher.wait_ready(timeout_s=900.0 if args.trace_watcher else 120.0)  # traced: imports are slow
    except SystemExit:  # neither may outlive the run (the stack goes down next)
        watcher.finish(terminate=True, timeout_s=30.0)
        sink.finish(terminate=True, timeout_s=30.0)
        raise
    marks: dict[str, dict[str, dict[str, float]]] = {}

    def mark(phase: str) -> None:
        """The watcher's and the sink's resident memory at the end of ``phase`` (and their peak so far)."""
        marks[phase] = {m.name: resident_mib(m.pid) for m in (watcher, sink)}

    mark("ready")
    start_ms = int(time.time() * 1000)
    counters: dict[str, float] = {}
    try:
        phases, _ = asyncio.run(
            drive(
                kubeconfig,
                args,
                replicas,
                changes,
                partial(late_watcher, workdir, info, args.late_watcher),
                mark=mark,
            )
        )
        caught_up_s = asyncio.run(wait_recording_caught_up(info.bootstrap, args.still, args.timeout))
        mark("caught_up")
        end_ms = int(time.time() * 1000)
        live = asyncio.run(final_lists(kubeconfig))
        counters = scrape_counters(watcher.port)
    finally:
        watcher_code = watcher.finish(terminate=True)
        sink_code = sink.finish(terminate=True)
    components = sampler.stop()
    trace = workdir / "recording.kts"
    export = Measured(
        "export",
        ["export", "--segment-dir", str(segments), "--from", str(start_ms), "--to", str(end_ms + 1),
         "--config", str(TRACER_CONFIG), "--exclude-namespace", "kube-system", "-o", str(trace)],
        workdir / "export.log",
    )  # fmt: skip
    export_code = export.finish(terminate=False)
    if export_code != 0:
        raise SystemExit(f"bench_record: export failed ({export_code}); see {workdir / 'export.log'}")
    verdict = judge(
        trace,
        live[0],
        live[1],
        {
            f"apps/Deployment/{NAMESPACE}/{n}": v
            for n, v in zip(names(args.deployments), expected, strict=True)
        },
    )
    store_bytes = sum(p.stat().st_size for p in segments.rglob("*") if p.is_file())
    kubetape = {
        m.name: {"peak_rss_mib": m.peak_rss_mib, "cpu_s": m.cpu_s, "exit_code": m.exit_code}
        for m in (watcher, sink, export)
    }
    return {
        "recording": verdict,
        "memory_and_cpu": {**kubetape, **components},
        "memory_by_phase": marks,
        "watcher_counters": counters,
        "watcher_traced": args.trace_watcher,
        "within_512_mib": {
            name: (kubetape[name]["peak_rss_mib"] or 0) <= 512 for name in ("watcher", "sink")
        },
        "phases": {"nodes_s": round(nodes_s, 1), **phases, "recording_caught_up_s": round(caught_up_s, 1)},
        "recorded_ms": end_ms - start_ms,
        "store_bytes": store_bytes,
        "trace_bytes": trace.stat().st_size,
        "clean_stops": watcher_code == 0 and sink_code == 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=5000, help="pods at the end of the ramp (default 5000)")
    parser.add_argument("--deployments", type=int, help="Deployments (default: one per 50 pods)")
    parser.add_argument("--nodes", type=int, help="fake nodes, 110 pods each (default: 1.25x the pods' need)")
    parser.add_argument("--changes-per-min", type=float, default=100.0)
    parser.add_argument("--steady", type=float, default=300.0, help="seconds of changes after the ramp")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", default="large", help="stack profile of the source cluster")
    parser.add_argument("--still", type=float, default=15.0, help="seconds the topic's end must stay still")
    parser.add_argument("--timeout", type=float, default=3600.0, help="limit of each wait, in seconds")
    parser.add_argument(
        "--late-watcher",
        action="store_true",
        help="after the ramp, start a second watcher on the full cluster and measure its initial list",
    )
    parser.add_argument(
        "--trace-watcher",
        action="store_true",
        help="run the watcher under tracemalloc (bench.traced_watch): watcher-heap.json in the run's "
        "directory says where its memory went (slower, and its peak is not the untraced one's)",
    )
    parser.add_argument("--keep", type=Path, help="keep the run's directory (logs, segments, trace) here")
    args = parser.parse_args()
    args.deployments = args.deployments or max(args.pods // 50, 1)
    args.nodes = args.nodes or nodes_for(args.pods)

    from pipeline.stack.progress import stderr_reporter
    from pipeline.stack.stack import LocalStack

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kubetape-bench-record-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        stack = LocalStack(Path(tmp) / "stack", report=stderr_reporter)
        try:
            info = stack.up(["source"], profile=args.profile)
            result = measure(stack, info, workdir, args)
        finally:
            stack.down()
    print(
        json.dumps(
            {
                "benchmark": "record",
                "machine": {
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                    "load1": os.getloadavg()[0],
                },
                "settings": {
                    "pods": args.pods,
                    "deployments": args.deployments,
                    "nodes": args.nodes,
                    "changes_per_min": args.changes_per_min,
                    "steady_s": args.steady,
                    "seed": args.seed,
                    "profile": args.profile,
                    "ticks_per_s": TICKS_PER_S,
                },
                **result,
                "total_seconds": round(time.monotonic() - started, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
