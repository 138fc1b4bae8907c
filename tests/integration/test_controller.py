"""The Simulation controller on the real ``sim`` KWOK cluster.

``kubetape controller`` runs as a real process. KWOK pods execute nothing: KWOK has no container
runtime, it only writes the statuses its stages describe, so no process of a pod it manages ever runs.
So the test plays the container: it runs the replayer Job's exact command line here (``kubetape
replay --spec`` of the replay document, the ConfigMaps it mounts (the document, the node pools)
written where the pod would mount them, the keys of its ``envFrom`` Secrets as its environment, the
kubeconfig added to the document), and gives the outcome to
the pod as annotations. KWOK plays the kubelet: the Job's pod runs on the node
``kubetape-kubelet-standin`` (a real node to the Job's affinity), and KWOK's ``pod-exit-as-annotated``
stage (pipeline/stack/resources/kwok-stages.yaml) ends it, Succeeded or Failed, with the replay report
(or the error's log tail) as the container's termination message. From there the real Job controller
completes the Job and the kubetape controller reads the result back.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from pipeline.controller.objects import REPLAY_SPEC_FILE
from pipeline.controller.spec import API_VERSION, KIND
from pipeline.io.kube.client import KubeClient, controller_client
from pipeline.io.kube.connect import kube_api
from pipeline.stack.state import StackInfo
from tests.polling import crd_established

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD = REPO_ROOT / "k8s" / "sim" / "simulation-crd.yaml"
SKELETON = REPO_ROOT / "pipeline" / "stack" / "resources" / "node-skeleton.yaml"
KUBETAPE = Path(sys.executable).parent / "kubetape"
NS = "kubetape-ctrl-test"
T = TypeVar("T")


# ---- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kubectl(stack_info: StackInfo, sim_kubeconfig: Path) -> Callable[..., str]:
    def run(*args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [str(stack_info.bin_dir / "kubectl"), "--kubeconfig", str(sim_kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    return run


KUBELET_STANDIN = "kubetape-kubelet-standin"
"""The node the replayer Jobs' pods run on here: KWOK-managed, but without the fake nodes' label, so the
Job's affinity (never on a simulated node) accepts it; see the module docstring."""


@pytest.fixture(scope="module")
def kubelet_standin(kubectl: Callable[..., str]) -> Iterator[str]:
    """The stand-in real node, for this module only (other modules' pods should not land on it)."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": KUBELET_STANDIN,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": KUBELET_STANDIN},
        },
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(node))
    try:
        yield KUBELET_STANDIN
    finally:
        kubectl("delete", "node", KUBELET_STANDIN, "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="module")
def simulation_cluster(kubectl: Callable[..., str], kubelet_standin: str) -> None:
    """The CRD installed for real, the controller's namespace and the replayer's service account."""
    kubectl("apply", "-f", str(CRD))
    crd_established(kubectl, "simulations.kubetape.dev")
    with contextlib.suppress(AssertionError):
        kubectl("create", "namespace", NS)
    with contextlib.suppress(AssertionError):
        kubectl("-n", NS, "create", "serviceaccount", "kubetape-replayer")


@pytest.fixture
async def kube(sim_kubeconfig: Path, simulation_cluster: None) -> AsyncIterator[KubeClient]:
    async with kube_api(sim_kubeconfig) as api:
        yield controller_client(api)


@dataclass
class ControllerProcess:
    identity: str
    process: subprocess.Popen[str]
    log: Path

    def stop(self) -> int:
        """SIGTERM, as Kubernetes stops a pod; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)

    def health_port(self) -> int:
        found = re.search(r"health on http://127\.0\.0\.1:(\d+)", self.log.read_text())
        assert found, self.log.read_text()
        return int(found.group(1))


def launch_controller(kubeconfig: Path, identity: str, log: Path) -> ControllerProcess:
    """``kubetape controller`` for the test namespace, logging to ``log``."""
    command = [
        str(KUBETAPE), "controller", "--kubeconfig", str(kubeconfig), "--namespace", NS,
        "--identity", identity, "--image", "kubetape:test", "--lease-duration", "4",
        "--renew-interval", "1", "--http-port", "0", "--log-format", "text",
    ]  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
    return ControllerProcess(identity, process, log)


def stop_controller(handle: ControllerProcess) -> None:
    code = handle.stop()
    assert code in (0, -9), f"controller {handle.identity} exited {code}:\n{handle.log.read_text()}"


@pytest.fixture
def start_controller(
    sim_kubeconfig: Path, simulation_cluster: None, tmp_path: Path
) -> Iterator[Callable[[str], ControllerProcess]]:
    started: list[ControllerProcess] = []

    def start(identity: str) -> ControllerProcess:
        handle = launch_controller(sim_kubeconfig, identity, tmp_path / f"controller-{identity}.log")
        started.append(handle)
        return handle

    yield start
    for handle in started:
        stop_controller(handle)


@dataclass
class Env:
    """What each test works with: the API, kubectl, controller processes, the cluster, a scratch dir."""

    kube: KubeClient
    kubectl: Callable[..., str]
    start_controller: Callable[[str], ControllerProcess]
    kubeconfig: Path
    tmp: Path


@pytest.fixture
def env(
    kube: KubeClient,
    kubectl: Callable[..., str],
    start_controller: Callable[[str], ControllerProcess],
    sim_kubeconfig: Path,
    tmp_path: Path,
) -> Env:
    return Env(kube, kubectl, start_controller, sim_kubeconfig, tmp_path)


# ---- helpers ----------------------------------------------------------------------------------------
async def eventually(
    check: Callable[[], Awaitable[T | None]],
    what: str,
    timeout_s: float = 60.0,
    last_seen: Callable[[], object] = lambda: "nothing",
) -> T:
    """Poll ``check`` until it returns something truthy (state, not timing, is what the tests assert);
    on time-out, the message names ``what`` and ``last_seen()``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:.0f} s waiting for {what}; last seen: {last_seen()}"
            )
        await asyncio.sleep(0.5)


FLOW_SPEED = 40
"""The speed of Simulations whose repetitions the test replays only to end them: what is under test is
the controller's flow (Jobs, queueing, the Lease, the status), not the replay, and bare-pods' 163 s of
trace take ~4 s at it instead of ~16 s at the default 10."""


def simulation(name: str, trace: Path, **spec: Any) -> dict[str, Any]:
    body = {"source": {"traceURL": str(trace)}, "speed": 10, "namespacePrefix": "ctrl", **spec}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": body}


async def until_phase(kube: KubeClient, name: str, phase: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The Simulation once its status says ``phase``; the status last seen is in the time-out message."""
    seen: dict[str, Any] = {}

    async def check() -> dict[str, Any] | None:
        sim = await kube.get(API_VERSION, KIND, None, name)
        seen["status"] = "no such Simulation" if sim is None else sim.get("status")
        if sim is not None and (sim.get("status") or {}).get("phase") == phase:
            return sim
        return None

    return await eventually(check, f"Simulation {name} {phase}", timeout_s, lambda: seen.get("status"))


async def job_for(kube: KubeClient, name: str) -> dict[str, Any] | None:
    return await kube.get("batch/v1", "Job", NS, name)


async def job_pod(kube: KubeClient, job: str) -> dict[str, Any] | None:
    pods = await kube.list_objects("v1", "Pod", namespace=NS, label_selector=f"job-name={job}")
    return pods[0] if pods else None


def replay_command(
    job: dict[str, Any], kubeconfig: Path, pod_dir: Path, mounted: dict[str, dict[str, str]]
) -> list[str]:
    """The Job's container command, made runnable here: the files of each ConfigMap it mounts
    (``mounted``: by mount path) written to a directory of ``pod_dir`` standing for the mount, the mount
    paths and the termination log in those files and the arguments pointed there, and the kubeconfig
    added to the replay document (the pod would use its service account)."""
    args: list[str] = job["spec"]["template"]["spec"]["containers"][0]["args"]
    here = {"/dev/termination-log": str(pod_dir / "termination-log")}
    here |= {mount_path: str(pod_dir / f"mount-{i}") for i, mount_path in enumerate(sorted(mounted))}

    def local(text: str) -> str:
        for path, local_path in here.items():
            text = text.replace(path, local_path)
        return text

    for mount_path, data in mounted.items():
        directory = Path(here[mount_path])
        directory.mkdir(parents=True, exist_ok=True)
        for file_name, mounted_text in data.items():
            text = local(mounted_text)
            if file_name == REPLAY_SPEC_FILE:
                document = yaml.safe_load(text)
                document["spec"]["kubeconfig"] = str(kubeconfig)
                text = yaml.safe_dump(document, sort_keys=False)
            (directory / file_name).write_text(text)
    return [str(KUBETAPE), *(local(arg) for arg in args)]


async def mounted_config_maps(kube: KubeClient, job: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The files of every ConfigMap the Job's container mounts, by mount path (each must exist)."""
    pod = job["spec"]["template"]["spec"]
    mount_paths = {m["name"]: m["mountPath"] for m in pod["containers"][0].get("volumeMounts") or []}
    mounted: dict[str, dict[str, str]] = {}
    for volume in pod.get("volumes") or []:
        if "configMap" in volume:
            config_map = await kube.get("v1", "ConfigMap", NS, volume["configMap"]["name"])
            assert config_map is not None, (
                f"ConfigMap {volume['configMap']['name']} the Job mounts is missing"
            )
            mounted[mount_paths[volume["name"]]] = config_map["data"]
    return mounted


async def container_environment(kube: KubeClient, job: dict[str, Any]) -> dict[str, str]:
    """The environment the Job's container would get: this process's, without any object store keys of
    its own, plus the keys of every Secret in the container's ``envFrom`` (as the kubelet sets them), so
    a source reads only with the credentials its Simulation names."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    for source in container.get("envFrom") or []:
        name = source["secretRef"]["name"]
        secret = await kube.get("v1", "Secret", NS, name)
        assert secret is not None, f"Secret {NS}/{name} of the Job's envFrom does not exist"
        environment |= {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    return environment


async def run_repetition_here(
    kube: KubeClient, job_name: str, kubeconfig: Path, pod_dir: Path
) -> tuple[int, str]:
    """Run what the Job's pod would run; returns (exit code, what the termination message would hold)."""
    job = await eventually(lambda: job_for(kube, job_name), f"Job {job_name}")
    process = await asyncio.create_subprocess_exec(
        *replay_command(job, kubeconfig, pod_dir, await mounted_config_maps(kube, job)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=await container_environment(kube, job),
    )
    output, _ = await process.communicate()
    (pod_dir / "container.log").write_bytes(output)  # for a look after a failure (`kubectl logs`)
    code = process.returncode
    assert code is not None
    report = pod_dir / "termination-log"
    if code == 0:
        return code, report.read_text()
    return code, output.decode()[-2048:]  # FallbackToLogsOnError: the log tail


def container_exits(kubectl: Callable[..., str], pod: str, *, exit_code: int, message: str) -> None:
    """The replay container ends with ``exit_code`` and ``message`` (the 4 KiB a kubelet keeps of a
    termination message); KWOK, standing in for the kubelet, writes the pod's status from these."""
    kubectl(
        "-n", NS, "annotate", "pod", pod,
        f"kubetape.dev/termination-message={message.encode()[:4096].decode('utf-8', 'ignore')}",
        f"kubetape.dev/exit-code={exit_code}",
    )  # fmt: skip


async def pod_status(kube: KubeClient, pod: str) -> dict[str, Any]:
    found = await kube.get("v1", "Pod", NS, pod)
    return (found or {}).get("status") or {}


async def finish_repetition(
    kube: KubeClient, kubectl: Callable[..., str], job_name: str, kubeconfig: Path, pod_dir: Path
) -> tuple[int, str]:
    code, message = await run_repetition_here(kube, job_name, kubeconfig, pod_dir)
    pod = await eventually(lambda: job_pod(kube, job_name), f"the pod of Job {job_name}")
    name = pod["metadata"]["name"]
    assert pod["spec"].get("nodeName") in (None, KUBELET_STANDIN), pod["spec"]
    container_exits(kubectl, name, exit_code=code, message=message)
    seen: dict[str, Any] = {}

    async def ended() -> dict[str, Any] | None:
        seen["status"] = await pod_status(kube, name)
        return seen["status"] if seen["status"].get("phase") in ("Succeeded", "Failed") else None

    status = await eventually(ended, f"KWOK to end pod {name}", last_seen=lambda: seen.get("status"))
    assert status["phase"] == ("Succeeded" if code == 0 else "Failed"), status
    return code, message


async def gone(kube: KubeClient, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
    return await kube.get(api_version, kind, namespace, name) is None


async def delete_simulation(kube: KubeClient, name: str) -> None:
    await kube.delete(API_VERSION, KIND, None, name)
    await eventually(lambda: gone(kube, API_VERSION, KIND, None, name), f"Simulation {name} deleted", 90)


# ---- tests ------------------------------------------------------------------------------------------
async def test_a_simulation_runs_its_repetition_as_a_job_and_succeeds(env: Env, simkube_traces: Path) -> None:
    kube, kubectl = env.kube, env.kubectl
    controller = env.start_controller("ctrl-main")
    trace = simkube_traces / "bare-pods.sktrace"
    await kube.create(
        simulation(
            "bare-pods", trace, speed=FLOW_SPEED, nodePools=[{"skeleton": node_skeleton(), "count": 2}]
        )
    )
    await kube.create(simulation("queued", trace))

    running = await until_phase(kube, "bare-pods", "Running")
    job = await eventually(lambda: job_for(kube, "bare-pods-r1"), "Job bare-pods-r1")
    assert job["metadata"]["ownerReferences"][0]["uid"] == running["metadata"]["uid"]
    lease = await kube.get("coordination.k8s.io/v1", "Lease", NS, "kubetape-simulation")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "ctrl-main"
    queued = await until_phase(kube, "queued", "Pending")
    assert "waiting for Simulation bare-pods" in queued["status"]["message"]
    assert await job_for(kube, "queued-r1") is None  # one simulation at a time

    code, report_text = await finish_repetition(
        kube, kubectl, "bare-pods-r1", env.kubeconfig, env.tmp / "pod"
    )
    assert code == 0, report_text
    report = json.loads(report_text)

    done = await until_phase(kube, "bare-pods", "Succeeded", 90)
    status = done["status"]
    assert status["completedRepetitions"] == 1
    (result,) = status["repetitions"]
    # the summary is read back even when the report is longer than the 4 KiB the kubelet keeps
    assert result["applied"] == report["events"]["applied"] > 0
    assert result["failed"] == report["events"]["failed"] == 0
    assert result["latenessP99Ms"] == report["lateness_ms"]["p99"]
    assert status["startTime"] <= status["completionTime"]
    events = kubectl("get", "events", "-n", "default", "--field-selector", "involvedObject.name=bare-pods")
    assert "JobCreated" in events
    assert "Succeeded" in events

    # the cluster is free again: the queued Simulation goes Pending → Running
    await until_phase(kube, "queued", "Running")

    async def lease_names_queued() -> bool:
        lease = await kube.get("coordination.k8s.io/v1", "Lease", NS, "kubetape-simulation")
        return bool(lease and lease["metadata"]["annotations"]["kubetape.dev/active-simulation"] == "queued")

    await eventually(lease_names_queued, "the Lease naming the active Simulation")

    await delete_simulation(kube, "queued")
    await delete_simulation(kube, "bare-pods")
    await eventually(lambda: gone(kube, "batch/v1", "Job", NS, "bare-pods-r1"), "Job bare-pods-r1 gone")
    assert controller.stop() == 0  # SIGTERM: a clean exit that gives the Lease up
    lease = await kube.get("coordination.k8s.io/v1", "Lease", NS, "kubetape-simulation")
    assert lease is not None
    assert lease["spec"].get("holderIdentity", "") == ""


async def test_deleting_a_running_simulation_removes_its_job_and_every_replayed_object(
    env: Env, simkube_traces: Path
) -> None:
    kube = env.kube
    env.start_controller("ctrl-delete")
    trace = simkube_traces / "bare-pods.sktrace"
    await kube.create(
        simulation("doomed", trace, speed=1, nodePools=[{"skeleton": node_skeleton(), "count": 2}])
    )
    job = await eventually(lambda: job_for(kube, "doomed-r1"), "Job doomed-r1")
    pools = await kube.get("v1", "ConfigMap", NS, "doomed-node-pools")
    assert pools is not None
    replay = await asyncio.create_subprocess_exec(
        *replay_command(job, env.kubeconfig, env.tmp / "pod", await mounted_config_maps(kube, job)),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    selector = "kubetape.dev/replay=doomed-r1"

    async def replayed_pods() -> list[dict[str, Any]]:
        return await kube.list_objects("v1", "Pod", label_selector=selector)

    await eventually(replayed_pods, "a replayed pod", 60)
    nodes = await kube.list_objects("v1", "Node", label_selector=selector)
    assert len(nodes) == 2

    await kube.delete(API_VERSION, KIND, None, "doomed")
    await eventually(lambda: gone(kube, "batch/v1", "Job", NS, "doomed-r1"), "Job doomed-r1 stopped")
    replay.kill()  # what the kubelet does to a deleted Job's pod (worst case: no chance to clean up)
    await replay.wait()

    leftovers: list[str] = []

    async def all_gone() -> bool:
        kinds = (
            ("v1", "Pod"),
            ("v1", "Node"),
            ("v1", "Namespace"),
            ("kubetape.dev/v1", "ReplayRoot"),
        )
        leftovers[:] = [
            f"{kind} {o['metadata']['name']}"
            for api_version, kind in kinds
            for o in await kube.list_objects(api_version, kind, label_selector=selector)
        ]
        return not leftovers

    await eventually(all_gone, "every replayed object removed", 90, lambda: leftovers)
    await eventually(lambda: gone(kube, API_VERSION, KIND, None, "doomed"), "Simulation doomed gone")
    await eventually(lambda: gone(kube, "v1", "ConfigMap", NS, "doomed-node-pools"), "node pools gone")
    await eventually(lambda: gone(kube, "v1", "ConfigMap", NS, "doomed-r1"), "replay document gone")


async def test_a_bad_source_or_a_failing_replay_fails_the_simulation_with_the_reason(
    env: Env, simkube_traces: Path
) -> None:
    kube, kubectl = env.kube, env.kubectl
    env.start_controller("ctrl-bad")
    segments = {"segments": {"claimName": "no-such-claim", "from": "-30m", "to": "now"}}
    await kube.create(simulation("no-volume", Path("/unused"), source=segments))
    failed = await until_phase(kube, "no-volume", "Failed")
    assert "PersistentVolumeClaim 'no-such-claim' does not exist" in failed["status"]["message"]
    assert await job_for(kube, "no-volume-r1") is None

    missing = env.tmp / "missing.sktrace"
    await kube.create(simulation("no-trace", missing))
    code, _log_tail = await finish_repetition(kube, kubectl, "no-trace-r1", env.kubeconfig, env.tmp / "pod")
    assert code != 0
    failed = await until_phase(kube, "no-trace", "Failed", 90)
    message = failed["status"]["message"]
    assert "repetition 1" in message
    assert "kubetape: error:" in message
    assert str(missing) in message
    for name in ("no-volume", "no-trace"):
        await delete_simulation(kube, name)


async def test_a_restarted_controller_continues_and_a_second_instance_waits(
    env: Env, simkube_traces: Path
) -> None:
    kube, kubectl = env.kube, env.kubectl
    first = env.start_controller("ctrl-first")
    await kube.create(
        simulation("survivor", simkube_traces / "bare-pods.sktrace", speed=FLOW_SPEED, repetitions=2)
    )
    await eventually(lambda: job_for(kube, "survivor-r1"), "Job survivor-r1")
    second = env.start_controller("ctrl-second")
    await eventually(lambda: _metric(second, "kubetape_controller_leader"), "the second instance serving")
    assert await _metric(second, "kubetape_controller_leader") == "0"  # it waits: the Lease is taken
    lease = await kube.get("coordination.k8s.io/v1", "Lease", NS, "kubetape-simulation")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "ctrl-first"

    first.kill()  # mid-run, no goodbye: the Lease expires after its 4 s
    await finish_repetition(kube, kubectl, "survivor-r1", env.kubeconfig, env.tmp / "pod-1")
    await eventually(
        lambda: job_for(kube, "survivor-r2"), "Job survivor-r2 created by the second instance", 60
    )
    lease = await kube.get("coordination.k8s.io/v1", "Lease", NS, "kubetape-simulation")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "ctrl-second"
    assert lease["spec"]["leaseTransitions"] >= 1
    await finish_repetition(kube, kubectl, "survivor-r2", env.kubeconfig, env.tmp / "pod-2")
    done = await until_phase(kube, "survivor", "Succeeded", 90)
    assert [r["index"] for r in done["status"]["repetitions"]] == [1, 2]
    jobs = await kube.list_objects(
        "batch/v1", "Job", namespace=NS, label_selector="kubetape.dev/simulation=survivor"
    )
    assert sorted(j["metadata"]["name"] for j in jobs) == ["survivor-r1", "survivor-r2"]  # nothing ran twice
    await delete_simulation(kube, "survivor")


def node_skeleton() -> dict[str, Any]:
    import yaml

    loaded: dict[str, Any] = yaml.safe_load(SKELETON.read_text())
    return loaded


async def _metric(controller: ControllerProcess, name: str) -> str | None:
    import aiohttp

    try:
        port = controller.health_port()
    except AssertionError:
        return None
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return line.rsplit(" ", 1)[1].removesuffix(".0")
    return None


async def test_the_sim_commands_create_pause_resume_list_and_delete(env: Env, simkube_traces: Path) -> None:
    kube = env.kube
    env.start_controller("ctrl-cli")

    def sim(*args: str) -> str:
        result = subprocess.run(
            [str(KUBETAPE), "sim", *args, "--kubeconfig", str(env.kubeconfig)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    trace = simkube_traces / "bare-pods.sktrace"
    sim("run", "by-cli", "--trace", str(trace), "--speed", "10", "--repetitions", "2", "--paused")
    paused = await until_phase(kube, "by-cli", "Paused")
    assert "paused before repetition 1 of 2" in paused["status"]["message"]
    assert await job_for(kube, "by-cli-r1") is None
    assert re.search(r"^by-cli\s+Paused\s+0/2\s+10\s", sim("list"), re.MULTILINE)

    sim("resume", "by-cli")
    await until_phase(kube, "by-cli", "Running")
    await eventually(lambda: job_for(kube, "by-cli-r1"), "Job by-cli-r1")
    sim("pause", "by-cli")  # the running repetition's trace clock stops; no further one starts
    paused = await until_phase(kube, "by-cli", "Paused")
    assert "repetition 1 of 2 holds its trace clock" in paused["status"]["message"]

    listed = json.loads(sim("list", "--json"))
    assert [s["metadata"]["name"] for s in listed] == ["by-cli"]
    assert "deleted and cleaned up" in sim("delete", "by-cli", "--wait")
    assert await kube.get(API_VERSION, KIND, None, "by-cli") is None
    await eventually(lambda: gone(kube, "batch/v1", "Job", NS, "by-cli-r1"), "Job by-cli-r1 gone")
