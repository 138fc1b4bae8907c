"""An autoscaled replay on the real ``sim`` cluster: Karpenter (its KWOK provider, started by the
stack's own code) launches nodes for pods the starting capacity cannot hold, and consolidation removes
them once the trace scales the workload down.

Karpenter is built by the test suite's set-up (``scripts/bootstrap.sh --for-tests``, which scripts/test.sh
runs) or, in a targeted run, on first use here; a build that cannot be made fails with CI=true and skips
elsewhere, like the rest of the stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.model.errors import StackError
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.workload_manifests import deployment, kwok_node_pool
from pipeline.stack.karpenter import KarpenterSettings
from pipeline.stack.stack import LocalStack
from pipeline.stack.state import StackState
from tests.polling import eventually_sync

REPLICAS = 12
"""One CPU each; the pool's largest type has 8, so Karpenter needs at least two nodes."""
SPEED = 10.0
RUNNING_BOUND_S = 90.0
"""Wall seconds from a pod's creation to Running, Karpenter's launch included, on a loaded 2-core box."""
CONSOLIDATION_BOUND_S = 150.0
"""consolidateAfter 30 s is 3 s at ×10, the disruption polling 1 s, the validation delay 1.5 s; then
Karpenter drains and deletes the node, on a machine the other tests load too."""
# the waits below (Karpenter's start, the replay, consolidation, cleanup) add up to more than the default
# 300 s on a loaded machine; each has its own deadline
pytestmark = pytest.mark.timeout(900)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="module")
def karpenter_sim(local_stack: LocalStack) -> Iterator[str]:
    """Karpenter beside the session's ``sim`` cluster, for this module only (built on first use)."""
    try:
        local_stack.build_autoscaler()
    except StackError as exc:
        message = f"Karpenter could not be built: {exc}"
        if _in_ci():
            pytest.fail(f"{message} (CI=true, so this is a failure)")
        pytest.skip(message)
    local_stack.start_karpenter("sim", KarpenterSettings())
    try:
        yield "sim"
    finally:
        local_stack.stop_karpenter("sim")


def _deployment(replicas: int) -> dict[str, Any]:
    return deployment("web", "shop", replicas, cpu="1", memory="256Mi", container="web", image="web:1")


def _write_trace(path: Path) -> None:
    """Twelve one-CPU pods at 0 s, none from 60 s of trace time on."""
    events = [
        Event.applied(0, key_of(_deployment(REPLICAS)), _deployment(REPLICAS), 0),
        Event.applied(60_000, key_of(_deployment(0)), _deployment(0), 1),
    ]
    path.write_bytes(encode_segment(build_segment(events, start_ms=0, end_ms=70_000, kind=SegmentKind.TRACE)))


def _write_pool(
    path: Path,
    consolidate_after: str = "30s",
    instance_types: tuple[str, ...] = ("kwok-standard-4", "kwok-standard-8"),
) -> None:
    pool = kwok_node_pool("general", instance_types, consolidate_after=consolidate_after, cpu_limit="64")
    path.write_text(yaml.safe_dump(pool))


def _nodes_of(local_stack: LocalStack, pool: str, cluster_name: str = "sim") -> list[str]:
    cluster = local_stack.cluster(cluster_name, local_stack.info().bin_dir)
    listed = json.loads(cluster.kubectl("get", "nodes", "-l", f"karpenter.sh/nodepool={pool}", "-o", "json"))
    return [n["metadata"]["name"] for n in listed["items"]]


def _consolidatable_waits(local_stack: LocalStack, pool: str) -> dict[str, float]:
    """Per NodeClaim of ``pool`` marked Consolidatable: seconds from its last pod event (or its
    initialisation, without one) to that mark, from the NodeClaim's own status."""
    cluster = local_stack.cluster("sim", local_stack.info().bin_dir)
    listed = json.loads(
        cluster.kubectl("get", "nodeclaims", "-l", f"karpenter.sh/nodepool={pool}", "-o", "json")
    )
    waits = {}
    for claim in listed["items"]:
        status = claim.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        marked = conditions.get("Consolidatable")
        since = status.get("lastPodEventTime") or conditions.get("Initialized", {}).get("lastTransitionTime")
        if marked is None or marked.get("status") != "True" or not since:
            continue
        waits[claim["metadata"]["name"]] = (
            _instant(marked["lastTransitionTime"]) - _instant(since)
        ).total_seconds()
    return waits


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _listening(port: int) -> list[str]:
    """Local addresses listening on ``port`` (hex, as the kernel's socket tables give them)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                found.append(local)
    return found


def test_karpenter_listens_on_loopback_only_and_reports_healthy(
    local_stack: LocalStack, karpenter_sim: str
) -> None:
    running = StackState.load(local_stack.state_path).karpenter[karpenter_sim]
    for port in (running.metrics_port, running.health_port):
        # 0100007F is 127.0.0.1; upstream would listen on 00000000 (every interface)
        assert _listening(port) == [f"0100007F:{port:04X}"]
    status = local_stack.status()["autoscalers"]
    assert status[karpenter_sim]["healthy"] is True, status  # type: ignore[index]


def test_karpenter_launches_nodes_for_pending_pods_and_consolidation_removes_them(
    local_stack: LocalStack, karpenter_sim: str, tmp_path: Path
) -> None:
    trace, pool, report_path = tmp_path / "burst.ktrace", tmp_path / "pool.yaml", tmp_path / "report.json"
    _write_trace(trace)
    _write_pool(pool)
    sim = local_stack.info().kubeconfigs[karpenter_sim]
    name = "autoscaled"
    done = subprocess.run(
        [
            sys.executable, "-m", "services.cli", "replay", "--trace", str(trace), "--kubeconfig", str(sim),
            "--speed", str(SPEED), "--autoscaler", "karpenter", "--nodepool", str(pool),
            "--stack-dir", str(local_stack.stack_dir), "--name", name, "--namespace-prefix", name,
            # the trace clock waits for the pods to run (the governor), so the scale-down follows them
            "--max-lag", "5", "--keep", "--quiet", "--report-json", str(report_path),
        ],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    autoscale = report["autoscale"]
    assert autoscale is not None, done.stdout

    # the batch windows were divided by the speed on the stack's Karpenter, the NodePool's timers too
    running = StackState.load(local_stack.state_path).karpenter[karpenter_sim]
    assert running.batch_idle_s == pytest.approx(0.1)
    assert running.batch_max_s == pytest.approx(1.0)
    settings = {s["name"]: s for s in autoscale["settings"]}
    assert settings["NodePool general: spec.disruption.consolidateAfter"]["applied"] == "3s"
    # and the two constants kubetape's build exposes: disruption polling and consolidation validation
    assert running.polling_period_s == pytest.approx(1.0)
    assert running.validation_delay_s == pytest.approx(1.5)
    assert settings["Karpenter disruption polling period (kubetape build patch)"]["applied"] == "1s"

    # nothing could run at first (no nodes); Karpenter launched at least two 8-CPU-or-smaller nodes
    assert autoscale["nodes_at_start"] == 0, done.stdout
    assert autoscale["launches"] >= 2, done.stdout
    assert autoscale["nodes_peak"] >= 2, done.stdout
    assert max(s["pods_running"] for s in report["timeline"]["replay"]) == REPLICAS, done.stdout
    p2r = autoscale["pending_to_running"]
    assert p2r["pods"] == REPLICAS, done.stdout
    assert p2r["p99_wall_s"] <= RUNNING_BOUND_S, done.stdout
    assert autoscale["pending_pod_seconds"] > 0
    assert autoscale["node_hours"] > 0

    # the trace scaled to zero: consolidation (the pool is kept with --keep) removes every node
    pool_name = autoscale["node_pools"][0]
    replay_ended = time.monotonic()
    waits: dict[str, float] = {}  # NodeClaim → seconds from its last pod event to Consolidatable

    def nodes_left() -> list[str]:
        waits.update(_consolidatable_waits(local_stack, pool_name))
        return _nodes_of(local_stack, pool_name)

    eventually_sync(
        nodes_left,
        lambda nodes: not nodes,
        f"consolidation to remove the nodes of NodePool {pool_name}",
        timeout_s=CONSOLIDATION_BOUND_S,
        interval_s=1.0,
    )
    consolidated_after_s = time.monotonic() - replay_ended
    print(done.stdout)  # the report's summary, shown with -s or on a failure below
    print(f"nodes consolidated {consolidated_after_s:.1f} s after the replay ended; waits {waits}")
    # Karpenter marks a NodeClaim Consolidatable once consolidateAfter has passed since its last pod
    # event: 3 s here (30 s ÷ 10), never the unscaled 30 s (timestamps have 1 s resolution)
    assert waits, f"no NodeClaim of {pool_name} was seen Consolidatable before it went"
    assert all(2.0 <= wait < 30.0 for wait in waits.values()), waits
    cluster = local_stack.cluster("sim", local_stack.info().bin_dir)
    cluster.kubectl("delete", "replayroot", f"kubetape-{name}", "--cascade=foreground", "--timeout=120s")


SWEEP_HIGH, SWEEP_LOW = 12, 2
SWEEP_SCALE_DOWN_MS, SWEEP_STEP_MS, SWEEP_END_MS = 60_000, 5_000, 450_000
"""Twelve one-CPU pods for the first trace minute, then down to two for the rest (about 34 s of wall time
at ×10): consolidation acts within it, and what it saves (a node for most of it) outweighs how many nodes
Karpenter happened to launch for the peak (two or three, a few trace minutes). In the full runs before
this tail was cut from 900 s, every WhenEmptyOrUnderutilized run that consolidated at all did so at trace
second 195-196 (the last step is at 105 s): a 450 s trace leaves it 250 trace seconds, about three times
what it took. The other repetition of that policy kept both nodes to the end in each of those runs, so
the policies are compared by their means over two repetitions.

The scale-down goes one replica at a time, SWEEP_STEP_MS apart. The ReplicaSet controller deletes first
the pods on the node holding the most of its pods, ranking them once per scale-down: one step of 12 → 2
from an 8 + 4 peak would delete all eight and two of the four, leaving both pods on one node, and then
WhenEmpty consolidates as well as WhenEmptyOrUnderutilized and the sweep has nothing to tell apart.
Single steps rebalance at each one, so the two pods left sit on two nodes: WhenEmpty must keep both,
WhenEmptyOrUnderutilized can pack them onto one."""


def _end_marker() -> dict[str, Any]:
    """A replay ends with its last event: this one keeps it going to the trace's end, through the quiet
    tail where consolidation happens."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "end", "namespace": "shop"}}


def _write_sweep_trace(path: Path) -> None:
    events = [
        Event.applied(0, key_of(_deployment(SWEEP_HIGH)), _deployment(SWEEP_HIGH), 0),
    ]
    for step, replicas in enumerate(range(SWEEP_HIGH - 1, SWEEP_LOW - 1, -1)):
        at_ms = SWEEP_SCALE_DOWN_MS + step * SWEEP_STEP_MS
        events.append(Event.applied(at_ms, key_of(_deployment(replicas)), _deployment(replicas), len(events)))
    events.append(Event.applied(SWEEP_END_MS - 1_000, key_of(_end_marker()), _end_marker(), len(events)))
    segment = build_segment(events, start_ms=0, end_ms=SWEEP_END_MS, kind=SegmentKind.TRACE)
    path.write_bytes(encode_segment(segment))


@pytest.mark.timeout(1800)
# the recording of the last test runs on source meanwhile: its waits overlap the sweep's replays
@pytest.mark.usefixtures("autoscaled_recording")
async def test_a_sweep_over_consolidation_policies_orders_node_hours_and_draws_both_on_the_frontier_chart(
    local_stack: LocalStack, karpenter_sim: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pipeline.analytics.compare import run_metrics
    from pipeline.analytics.report_html import render_report
    from pipeline.replay.autoscale.axes import AutoscalerAxes, autoscaler_variants
    from pipeline.replay.inputs import read_node_pools
    from pipeline.stack.kwok import DEFAULT_NODE_SKELETON
    from services.cli import main
    from services.sweep import AutoscalerSweep, parse_node_option, run_sweep, write_sweep_outputs

    trace, pool, out = tmp_path / "burst.ktrace", tmp_path / "pool.yaml", tmp_path / "sweep"
    _write_sweep_trace(trace)
    # one instance type: the peak then takes the same nodes under either policy, and node-hours differ by
    # what consolidation does after the scale-down, not by which sizes Karpenter happened to launch first
    _write_pool(pool, instance_types=("kwok-standard-8",))
    policies = ["WhenEmpty", "WhenEmptyOrUnderutilized"]
    variants = autoscaler_variants(read_node_pools(pool), AutoscalerAxes(consolidation_policies=policies))
    result = await run_sweep(
        local_stack.info().kubeconfigs[karpenter_sim],
        trace,
        out,
        speeds=[SPEED],
        nodes=[parse_node_option(f"{DEFAULT_NODE_SKELETON}:2")],  # 16 CPUs: the peak fits
        repetitions=2,
        autoscaler=AutoscalerSweep(variants, local_stack.stack_dir),
        max_lag_s=5.0,  # the clock waits for Karpenter's nodes, so the scale-down follows the pods
        say=print,
    )
    by_policy: dict[str, list[float]] = {}
    node_hours_of: dict[str, float] = {}
    for run in result.runs:
        policy = run.info.labels.get("consolidation", "fixed")
        node_hours_of[run.info.name] = run_metrics(run)["node_hours"]
        by_policy.setdefault(policy, []).append(node_hours_of[run.info.name])
        running = [s["pods_running"] for s in run.report["timeline"]["replay"]]
        assert max(running) == SWEEP_HIGH, (run.info.name, running)
        if policy != "fixed":  # every autoscaled run started from zero nodes and got some from Karpenter
            autoscale = run.report["autoscale"]
            assert autoscale["nodes_at_start"] == 0, (run.info.name, autoscale)
            assert autoscale["launches"] >= 1, (run.info.name, autoscale)
    print(json.dumps(by_policy))
    assert {policy: len(hours) for policy, hours in by_policy.items()} == {
        "fixed": 2,
        "WhenEmpty": 2,
        "WhenEmptyOrUnderutilized": 2,
    }
    # the sweep's own observation saw Karpenter's nodes (they carry the replay label)
    assert min(by_policy["WhenEmpty"]) > 0, by_policy
    # the two pods left sit on two nodes: WhenEmpty keeps both, WhenEmptyOrUnderutilized packs them onto one
    mean = {policy: sum(hours) / len(hours) for policy, hours in by_policy.items()}
    assert mean["WhenEmptyOrUnderutilized"] < mean["WhenEmpty"], by_policy

    configs = {run.info.labels.get("consolidation", "fixed"): run.info.config for run in result.runs}
    assert set(result.points) == set(configs.values())
    assert result.frontier, result.points
    write_sweep_outputs(result, out, render_report)
    document = json.loads((out / "sweep.json").read_text())
    assert set(document["points"]) == set(configs.values())
    html = (out / "report.html").read_text()
    for config in configs.values():
        assert f'data-config="{config}"' in html, config

    # compare sets the Karpenter runs beside the fixed-pool runs of the same trace
    capsys.readouterr()
    assert main(["compare", str(out), "--json", "--node-price", "0.384"]) == 0
    rows = json.loads(capsys.readouterr().out)["autoscaler_vs_fixed"]
    kinds = {row["provisioning"].split(" ")[0] for row in rows}
    assert kinds == {"fixed", "karpenter"}, rows
    for row in rows:
        assert row["node_hours"] == pytest.approx(node_hours_of[row["run"]], rel=1e-3), row
        assert row["cost"] is not None, row  # fixed pools by --node-price, Karpenter's by its prices
        assert row["pending_to_running_p50_s"] is not None, row


RECORD_CONSOLIDATE_AFTER = "10s"
"""Short enough that the recording on ``source`` (real time, Karpenter's default timers) consolidates
within about a minute; the replay scales it like every setting (1 s at ×10)."""
RECORD_HOLD_S = 60.0
"""Recorded seconds at the peak, and after consolidation: six scaled seconds each at ×10."""


def _recording_tracer(path: Path) -> None:
    """The example tracer config with Nodes tracked too: the autoscaler's nodes are part of the recording."""
    from services.mission import TRACER_CONFIG

    config = yaml.safe_load(TRACER_CONFIG.read_text())
    config["trackedObjects"]["v1.Node"] = {}
    path.write_text(yaml.safe_dump(config))


def _on_karpenter_nodes(deployment: dict[str, Any]) -> dict[str, Any]:
    """Pods that only a Karpenter node takes: ``source`` keeps the static nodes other tests of the session
    added, which would otherwise hold the workload and leave Karpenter nothing to launch."""
    deployment["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "Exists"}]}
                ]
            }
        }
    }
    return deployment


def _record_autoscaled_workload(local_stack: LocalStack, pool: Path, workdir: Path) -> Path:
    """Karpenter on ``source`` launches nodes for twelve pods and consolidates after the scale-down to
    two, while the watcher and the sink record it; returns the exported trace."""
    from services.kubetape_processes import KubetapeService, run_kubetape
    from services.mission import wait_committed, wait_recorded  # the demo's own waits, reused

    info = local_stack.info()
    source = local_stack.cluster("source", info.bin_dir)
    tracer, segments, trace = workdir / "tracer.yaml", workdir / "segments", workdir / "recorded.kts"
    _recording_tracer(tracer)
    source.kubectl("apply", "-f", str(pool))
    source.kubectl("create", "namespace", "shop")
    sink = KubetapeService(
        "sink",
        ["sink", "--bootstrap", info.bootstrap, "--segment-dir", str(segments),
         "--group", "autoscaled-recording", "--cluster", "source", "--window", "10s", "--idle-close", "2s"],
        workdir / "sink.log",
    )  # fmt: skip
    watcher = KubetapeService(
        "watcher",
        ["watch", "--config", str(tracer), "--kubeconfig", str(info.kubeconfigs["source"]),
         "--bootstrap", info.bootstrap, "--cluster-id", "source"],
        workdir / "watcher.log",
    )  # fmt: skip
    try:
        sink.wait_ready()
        watcher.wait_ready()
        start_ms = int(time.time() * 1000)
        source.kubectl("apply", "-f", "-", stdin=json.dumps(_on_karpenter_nodes(_deployment(REPLICAS))))
        eventually_sync(
            lambda: source.kubectl(
                "get", "pods", "-n", "shop", "--field-selector=status.phase=Running", "-o", "name"
            ),
            lambda names: len(names.split()) == REPLICAS,
            f"Karpenter on source to launch nodes for {REPLICAS} pods",
            timeout_s=RUNNING_BOUND_S,
        )
        time.sleep(RECORD_HOLD_S)  # the peak lasts beyond the replay's settle (10 wall s = 100 trace s)
        source.kubectl("apply", "-f", "-", stdin=json.dumps(_on_karpenter_nodes(_deployment(2))))
        pool_name = yaml.safe_load(pool.read_text())["metadata"]["name"]
        eventually_sync(
            lambda: _nodes_of(local_stack, pool_name, cluster_name="source"),
            lambda nodes: len(nodes) <= 1,
            "consolidation on source to leave one node for two pods",
            timeout_s=CONSOLIDATION_BOUND_S,
            interval_s=2.0,
        )
        time.sleep(RECORD_HOLD_S)  # and the consolidated cluster is compared for a while too
        end_ms = int(time.time() * 1000)
        # stopped once the topic holds the pods as they are now, and the sink once that is durable
        wait_recorded(info.bootstrap, source, cluster_id="source", namespace="shop", since_ms=start_ms)
    finally:
        watcher.stop()
        try:
            wait_committed(info.bootstrap, "autoscaled-recording")
        finally:
            sink.stop()
    run_kubetape("export", "--segment-dir", str(segments), "--from", str(start_ms), "--to", str(end_ms),
              "--config", str(tracer), "-o", str(trace))  # fmt: skip
    return trace


@dataclass
class _BackgroundRecording:
    """The autoscaled recording on ``source``, made in a thread while other tests of the module replay on
    ``sim``: it is minutes of real time spent mostly waiting for Karpenter's unscaled timers."""

    local_stack: LocalStack
    pool: Path
    future: Future[Path]
    cleaned: bool = False

    def trace(self) -> Path:
        """The exported trace, once the recording is done; ``source`` is cleaned up either way."""
        try:
            return self.future.result()
        finally:
            self.clean()

    def clean(self) -> None:
        """The workload, its pool and Karpenter gone from ``source``. Called on the main thread only: the
        stack's state file (which stop_karpenter rewrites) has one writer at a time."""
        if self.cleaned:
            return
        self.cleaned = True
        source = self.local_stack.cluster("source", self.local_stack.info().bin_dir)
        # not waited for: a failure of the recording stays the failure reported
        source.kubectl("delete", "namespace", "shop", "--ignore-not-found", "--wait=false")
        source.kubectl("delete", "-f", str(self.pool), "--ignore-not-found", "--wait=false")
        self.local_stack.stop_karpenter("source")


@pytest.fixture(scope="module")
def autoscaled_recording(
    local_stack: LocalStack, source_nodes: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[_BackgroundRecording]:
    """Starts the recording of ``_record_autoscaled_workload`` in the background (``source_nodes``: as in
    the full suite, static nodes on source too). The sweep asks for it so that the recording's waits
    overlap the sweep's replays; the recording's test collects it."""
    workdir = tmp_path_factory.mktemp("autoscaled-recording")
    pool = workdir / "pool.yaml"
    _write_pool(pool, RECORD_CONSOLIDATE_AFTER)
    local_stack.start_karpenter("source", KarpenterSettings())  # here, on the main thread (see clean)
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autoscaled-recording")
    recording = _BackgroundRecording(
        local_stack, pool, executor.submit(_record_autoscaled_workload, local_stack, pool, workdir)
    )
    try:
        yield recording
    finally:
        executor.shutdown(wait=True)
        recording.clean()


def test_an_autoscaled_recording_replays_under_karpenter_with_the_recorded_node_count(
    local_stack: LocalStack, karpenter_sim: str, autoscaled_recording: _BackgroundRecording, tmp_path: Path
) -> None:
    pool, report_path = autoscaled_recording.pool, tmp_path / "report.json"
    trace = autoscaled_recording.trace()
    done = subprocess.run(
        [
            sys.executable, "-m", "services.cli", "replay", "--trace", str(trace), "--kubeconfig",
            str(local_stack.info().kubeconfigs[karpenter_sim]), "--speed", str(SPEED),
            "--autoscaler", "karpenter", "--nodepool", str(pool), "--stack-dir", str(local_stack.stack_dir),
            "--name", "rerun", "--namespace-prefix", "rerun", "--max-lag", "5", "--quiet",
            "--report-json", str(report_path),
        ],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stdout)
    report = json.loads(report_path.read_text())
    fidelity = report["autoscale"]["node_count_fidelity"]
    # the recording carried Karpenter's nodes on source: at least two for twelve one-CPU pods
    assert fidelity["recorded_peak"] >= 2, fidelity
    # and none of them was replayed as a fixed node: the simulated Karpenter launched its own
    assert report["autoscale"]["nodes_at_start"] == 0
    assert report["autoscale"]["launches"] >= 2, report["autoscale"]
    # every scaled second after the settle is within the tolerance the report states
    assert fidelity["seconds_compared"] >= 5, fidelity
    assert fidelity["held"] is True, [e for e in fidelity["per_scaled_second"] if e["error"]]
    assert "autoscaler nodes vs recording" in done.stdout
