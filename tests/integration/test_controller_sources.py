"""Simulations replaying a recorded range, on the real stack: from the sink's segments on the S3 server,
and from the Kafka topic with Karpenter making the nodes.

One recording serves both: a workload's events on a topic of this module (published as the watcher
publishes them), compacted by the real ``kubetape sink`` into segments on the stack's s3proxy. Both
Simulations read the same range of it, so both replays must apply the same objects: those alive at the
range's start, and the changes inside it; what came before is folded in, what came after is left out.
The Job's pod is played as in :mod:`tests.integration.test_controller` (KWOK runs no containers: the
test runs the Job's command line, with the environment the kubelet would give it, and KWOK ends the
pod with the outcome).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.events import Event
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import key_of
from pipeline.replay.report.fidelity import BOUND_PODS
from pipeline.replay.workload_manifests import deployment, kwok_node_pool
from pipeline.stack import s3
from tests.integration.test_autoscaler import karpenter_sim  # noqa: F401 - fixture
from tests.integration.test_controller import (  # noqa: F401 - fixtures
    NS,
    ControllerProcess,
    Env,
    delete_simulation,
    env,
    finish_repetition,
    kube,
    kubectl,
    kubelet_standin,
    launch_controller,
    node_skeleton,
    simulation,
    simulation_cluster,
    start_controller,
    stop_controller,
    until_phase,
)
from tests.integration.test_sink import produce, unique_names, wait_committed
from tests.integration.test_sink_s3 import sink_process
from tests.polling import eventually

RANGE_S = 45
"""The recorded range, in seconds; a replay ends with its last event (at 30 s: three wall seconds at
×10, plus the governor's holds)."""
CREDENTIALS_SECRET = "ctrl-sources-s3"


@dataclass(frozen=True)
class Recording:
    """A recorded range on the topic and in the S3 store, and what a replay of it must apply."""

    bootstrap: str
    topic: str
    store: str
    start_ms: int
    end_ms: int
    applied: int
    """Objects alive at the start, and changes inside the range."""
    deleted: int
    peaks: dict[str, int]
    """Most pods each Deployment asked for inside the range, by its name."""


def _deployment(name: str, replicas: int, version: int) -> dict[str, Any]:
    obj = deployment(name, "shop", replicas, cpu="1", memory="256Mi")
    obj["metadata"] |= {"uid": f"uid-{name}", "resourceVersion": str(version)}
    return obj


def _applied(ts_ms: int, obj: dict[str, Any]) -> Event:
    meta = obj["metadata"]
    return Event.applied(
        ts_ms,
        key_of(obj),
        obj,
        object_spec_hash(obj),
        uid=meta["uid"],
        resource_version=meta["resourceVersion"],
    )


def _deleted(ts_ms: int, obj: dict[str, Any]) -> Event:
    meta = obj["metadata"]
    return Event.deleted(ts_ms, key_of(obj), obj, uid=meta["uid"], resource_version=meta["resourceVersion"])


@pytest.fixture(scope="module")
async def recording(
    kafka_bootstrap: str, s3_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Recording:
    """A shop's Deployments on a topic of its own, and the sink's segments of them on S3."""
    topic, group, dead_letters = unique_names("ctrl-sources")
    store = f"s3://{s3.BUCKET}/tests/ctrl-sources-{uuid.uuid4().hex[:8]}"
    start_ms = (int(time.time()) - 600) * 1000  # recent: the broker's retention keeps it
    end_ms = start_ms + RANGE_S * 1000

    def at(second: int) -> int:
        return start_ms + second * 1000

    events = [
        # before the range: folded into the state at its start
        _applied(at(-120), _deployment("base", 1, 10)),
        _applied(at(-90), _deployment("old", 1, 11)),
        _applied(at(-60), _deployment("gone", 1, 12)),
        _deleted(at(-30), _deployment("gone", 1, 13)),
        # inside: a new Deployment, a scale-up, a deletion
        _applied(at(5), _deployment("web", 4, 20)),
        _applied(at(20), _deployment("web", 6, 21)),
        _deleted(at(30), _deployment("old", 1, 22)),
        # after the range: left out
        _applied(at(RANGE_S + 10), _deployment("late", 1, 30)),
    ]
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 2)
    log = tmp_path_factory.mktemp("ctrl-sources") / "sink.log"
    with pytest.MonkeyPatch.context() as env_vars:
        for name, value in s3_env.items():
            env_vars.setenv(name, value)  # the sink process reaches the S3 server with these
        with sink_process(kafka_bootstrap, (topic, group, dead_letters), store, log) as sink:
            await produce(kafka_bootstrap, topic, events)  # while the sink process starts
            # the sink commits an offset once the segments holding it are stored
            await wait_committed(kafka_bootstrap, group, topic, 2, within=120)
            sink.terminate()
            assert sink.wait(timeout=60) == 0, log.read_text()[-3000:]
    return Recording(
        kafka_bootstrap,
        topic,
        store,
        start_ms,
        end_ms,
        applied=4,  # base and old at the start; web created, then scaled
        deleted=1,  # old
        peaks={"base": 1, "old": 1, "web": 6},
    )


@pytest.fixture(scope="module")
def controller(
    sim_kubeconfig: Path,
    simulation_cluster: None,  # noqa: F811 - the fixture imported above
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControllerProcess]:
    """One controller for the module's Simulations, started first: it starts while the recording is made."""
    log = tmp_path_factory.mktemp("ctrl-sources-controller") / "controller.log"
    handle = launch_controller(sim_kubeconfig, "ctrl-sources", log)
    yield handle
    stop_controller(handle)


@pytest.fixture
def s3_credentials(env: Env, s3_env: dict[str, str]) -> Iterator[str]:  # noqa: F811 - fixture
    """The Secret a Simulation names for the S3 server's keys (the replayer Job's ``envFrom``)."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": CREDENTIALS_SECRET, "namespace": NS},
        "stringData": s3_env,
    }
    env.kubectl("apply", "-f", "-", stdin=json.dumps(secret))
    try:
        yield CREDENTIALS_SECRET
    finally:
        env.kubectl("-n", NS, "delete", "secret", CREDENTIALS_SECRET, "--ignore-not-found")


def _range(recording: Recording) -> dict[str, str]:
    return {"from": str(recording.start_ms), "to": str(recording.end_ms)}


async def _run_to_success(sim: Env, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Play the pod of ``name``'s only repetition; the Simulation once Succeeded, and the full report."""
    await until_phase(sim.kube, name, "Running")
    code, output = await finish_repetition(
        sim.kube, sim.kubectl, f"{name}-r1", sim.kubeconfig, sim.tmp / name
    )
    assert code == 0, output
    done = await until_phase(sim.kube, name, "Succeeded", 90)
    return done, json.loads(output)


def _assert_replayed_the_recording(
    done: dict[str, Any], report: dict[str, Any], recording: Recording
) -> None:
    """The counts a user reads in the Simulation's status are the range's, and its workload ran."""
    (repetition,) = done["status"]["repetitions"]
    assert (repetition["applied"], repetition["failed"]) == (recording.applied, 0), repetition
    events = report["events"]
    assert (events["applied"], events["deleted"], events["failed"]) == (
        recording.applied,
        recording.deleted,
        0,
    )
    # the pods each recorded owner had on the simulated cluster: never more than it asked for, and (the
    # clock waits for an owner more than one pod behind, spec.maxLag) within one pod of its peak
    fidelity = report["owner_fidelity"]
    peaks = {o["owner"].rsplit("/", 1)[1]: o["replay_peak"] for o in fidelity["owners"]}
    assert set(peaks) == set(recording.peaks), fidelity
    for owner, peak in recording.peaks.items():
        assert peak - BOUND_PODS <= peaks[owner] <= peak, (owner, fidelity)
    assert report["convergence"]["given_up_owners"] == {}, report["convergence"]


async def test_a_simulation_replays_a_range_of_segments_on_s3(
    controller: ControllerProcess,
    recording: Recording,
    env: Env,  # noqa: F811 - the fixture imported above
    s3_credentials: str,
) -> None:
    source = {"segments": {"url": recording.store, "credentialsSecret": s3_credentials, **_range(recording)}}
    # the clock waits for pods more than one behind (maxLag), so each Deployment's peak is reached
    await env.kube.create(
        simulation(
            "from-s3",
            Path("/unused"),
            source=source,
            maxLag="5s",
            nodePools=[{"skeleton": node_skeleton(), "count": 1}],
        )
    )
    done, report = await _run_to_success(env, "from-s3")
    assert report["source"] == f"segments {recording.store} [{recording.start_ms}, {recording.end_ms})"
    _assert_replayed_the_recording(done, report, recording)
    await delete_simulation(env.kube, "from-s3")


async def test_a_simulation_replays_a_topic_range_with_karpenter_making_the_nodes(
    controller: ControllerProcess,
    recording: Recording,
    karpenter_sim: str,  # noqa: F811 - the fixtures imported above
    env: Env,  # noqa: F811
) -> None:
    source = {"topic": {"bootstrap": recording.bootstrap, "topic": recording.topic, **_range(recording)}}
    pool = kwok_node_pool("ctrl-general", ("kwok-standard-4", "kwok-standard-8"), cpu_limit="32")
    await env.kube.create(
        simulation(
            "from-topic",
            Path("/unused"),
            source=source,
            maxLag="5s",
            autoscaler={"provider": "karpenter", "nodePools": [pool]},
        )
    )
    done, report = await _run_to_success(env, "from-topic")
    assert report["source"].startswith(f"topic {recording.topic} on {recording.bootstrap}")
    _assert_replayed_the_recording(done, report, recording)
    # no fixed nodes: every pod ran on a node Karpenter launched for the replay's NodePool
    autoscale = report["autoscale"]
    assert autoscale is not None, report
    assert autoscale["nodes_at_start"] == 0, autoscale
    assert autoscale["launches"] >= 1, autoscale

    await delete_simulation(env.kube, "from-topic")

    async def karpenter_nodes() -> list[str]:
        listed = await env.kube.list_objects("v1", "Node", label_selector="karpenter.sh/nodepool")
        return [n["metadata"]["name"] for n in listed]

    # the NodePool went with the replay's root: Karpenter removes its nodes
    await eventually(karpenter_nodes, lambda names: not names, "Karpenter's nodes removed", timeout_s=120)
