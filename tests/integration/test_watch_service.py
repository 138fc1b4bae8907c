"""``kubetape watch`` against the real local stack: a scripted workload on the ``source`` KWOK cluster
produces the expected events (with lifecycles) on the real broker; a kill -9 and restart loses and
duplicates nothing; a forced 410 leads to a re-list, a gap event and the correct final state."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from pipeline.formats.wire.codec import decode_event, encode_event
from pipeline.io.kafka.admin import topic_partitions
from pipeline.io.kafka.clients import new_consumer
from pipeline.io.kafka.headers import is_from_cluster
from pipeline.io.kafka.settings import EVENTS_TOPIC, RESUME_TOPIC, STATE_TOPIC, KafkaSettings
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ClusterId, split_message_key
from pipeline.stack import kwok
from pipeline.stack.stack import LocalStack
from pipeline.stack.state import StackInfo
from pipeline.watch.event_time import TIME_SOURCE_ANNOTATION
from tests.polling import crd_established

REPO = Path(__file__).resolve().parents[2]

TRACER = """\
trackedObjects:
  apps/v1.Deployment: {trackLifecycle: true}
  batch/v1.CronJob: {trackLifecycle: true}
  batch/v1.Job: {trackLifecycle: true}
  v1.Pod: {trackLifecycle: true, skipOwned: true}
namespaces: {allow: ["wt-*"]}
"""

pytestmark = pytest.mark.timeout(600)


# ---- the watcher as a real process ------------------------------------------------------------------
@dataclass
class WatcherProcess:
    proc: asyncio.subprocess.Process
    lines: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    reader: asyncio.Task[None] | None = None

    async def wait_ready(self) -> None:
        # 120 s: a watcher's first lists took over 60 s at a load average of 16 on 2 cores
        last = "no HTTP port yet"
        try:
            async with asyncio.timeout(120):
                while not self.port:
                    assert self.proc.returncode is None, f"watcher exited: {self.lines[-5:]}"
                    await asyncio.sleep(0.1)
                async with aiohttp.ClientSession() as http:
                    while True:
                        async with http.get(f"http://127.0.0.1:{self.port}/readyz") as resp:
                            if resp.status == 200:
                                return
                            last = f"/readyz {resp.status}: {(await resp.text())[:300]}"
                        await asyncio.sleep(0.2)
        except TimeoutError:
            lines = self.lines[-5:]
            raise AssertionError(f"watcher not ready in 120 s ({last}); its last lines: {lines}") from None

    async def wait_readyz(self, status: int, why: str) -> None:
        """Poll /readyz until it answers ``status`` (60 s at most)."""
        last = 0
        try:
            async with aiohttp.ClientSession() as http, asyncio.timeout(60):
                while last != status:
                    async with http.get(f"http://127.0.0.1:{self.port}/readyz") as resp:
                        last = resp.status
                    await asyncio.sleep(0.2)
        except TimeoutError:
            raise AssertionError(f"/readyz still answers {last}, not {status} ({why})") from None

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{self.port}/metrics") as resp:
            return await resp.text()

    async def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        if self.reader is not None:
            await self.reader
        return code

    async def kill9(self) -> None:
        self.proc.kill()
        await self.proc.wait()
        if self.reader is not None:
            await self.reader


async def start_watcher(config: Path, kubeconfig: Path, bootstrap: str, *extra: str) -> WatcherProcess:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli",
        "watch",
        "--config",
        str(config),
        "--kubeconfig",
        str(kubeconfig),
        "--bootstrap",
        bootstrap,
        "--http-port",
        "0",
        "--log-level",
        "debug",
        *extra,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    watcher = WatcherProcess(proc)

    async def read() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            try:
                line = json.loads(raw)
            except ValueError:
                line = {"msg": raw.decode(errors="replace")}
            watcher.lines.append(line)
            found = re.search(r"http://127\.0\.0\.1:(\d+)", str(line.get("msg", "")))
            if found:
                watcher.port = int(found.group(1))

    watcher.reader = asyncio.create_task(read())
    await watcher.wait_ready()
    return watcher


@contextlib.asynccontextmanager
async def running_watcher(
    config: Path, kubeconfig: Path, bootstrap: str, *extra: str
) -> AsyncIterator[WatcherProcess]:
    watcher = await start_watcher(config, kubeconfig, bootstrap, *extra)
    try:
        yield watcher
    finally:
        if watcher.proc.returncode is None:
            await watcher.kill9()
        for line in watcher.lines:  # shown by pytest when the test fails
            print("watcher:", json.dumps(line))


# ---- the workload ---------------------------------------------------------------------------------
class Workload:
    """kubectl on the source cluster (the only writes; the watcher itself only lists and watches)."""

    def __init__(self, info: StackInfo, namespace: str) -> None:
        self.kubectl_bin = info.bin_dir / "kubectl"
        self.kubeconfig = info.kubeconfigs["source"]
        self.ns = namespace

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        argv = [str(self.kubectl_bin), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def cluster_id(self) -> ClusterId:
        """The cluster id a watcher of this cluster records under by default: its kube-system UID."""
        return ClusterId(
            self.kubectl("get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}").strip()
        )

    def apply(self, manifest: dict[str, Any]) -> None:
        self.kubectl("apply", "-n", self.ns, "-f", "-", stdin=json.dumps(manifest))

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            self.kubectl("get", "pods", "-n", self.ns, "-l", selector, "-o", "json")
        )["items"]
        return items

    async def wait_pods(
        self, selector: str, predicate: Callable[[list[dict[str, Any]]], bool], what: str
    ) -> None:
        deadline = time.monotonic() + 120
        pods: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            pods = self.pods(selector)
            if predicate(pods):
                return
            await asyncio.sleep(0.5)
        phases = [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
        raise AssertionError(f"timed out waiting for {what}; pods: {phases}")

    async def wait_running(self, selector: str, n: int, image: str | None = None) -> None:
        def ok(pods: list[dict[str, Any]]) -> bool:
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            running = [p for p in live if p["status"].get("phase") == "Running"]
            images = {p["spec"]["containers"][0]["image"] for p in live}
            return len(live) == n and len(running) == n and (image is None or images == {image})

        await self.wait_pods(selector, ok, f"{n} running pods ({selector}, image {image})")


def deployment(name: str, replicas: int, image: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "c", "image": image, "resources": {"requests": {"cpu": "100m"}}}]
                },
            },
        },
    }


def bare_pod(name: str, lifetime: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "bare"},
            "annotations": {"kubetape.dev/lifetime": lifetime},
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]},
    }


def cronjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": "* * * * *",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "busybox:1"}],
                        },
                    }
                }
            },
        },
    }


# ---- reading the topic back -----------------------------------------------------------------------
async def read_topic(
    bootstrap: str, topic: str, cluster: ClusterId | None = None
) -> list[tuple[str, bytes | None, int]]:
    """Every (key, value, timestamp) of ``topic`` up to its current end; with ``cluster``, only that
    cluster's records, keyed as its watcher meant them (without the cluster prefix of the Kafka key)."""
    tps = await topic_partitions(KafkaSettings(bootstrap), topic)
    consumer = new_consumer(KafkaSettings(bootstrap), group_id=None)
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[str, bytes | None, int]] = []
        async with asyncio.timeout(60):
            while True:
                positions = [await consumer.position(tp) for tp in tps]
                if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                    return out
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    for m in msgs:
                        key = m.key.decode()
                        if cluster is not None:
                            own = (
                                split_message_key(key, cluster)
                                if is_from_cluster(m.headers, cluster)
                                else None
                            )
                            if own is None:
                                continue
                            key = own
                        out.append((key, m.value, m.timestamp))
    finally:
        await consumer.stop()


async def events_in(bootstrap: str, namespace: str) -> list[Event]:
    """The namespace's events (and every gap marker), in event-time order (ties keep topic order)."""
    records = await read_topic(bootstrap, EVENTS_TOPIC)
    events = []
    for key, value, timestamp in records:
        assert value is not None
        event = decode_event(value, f"{EVENTS_TOPIC} key {key}")
        assert event.ts_ms == timestamp, "the Kafka timestamp is the event time"
        if f"/{namespace}/" in key or event.type is EventType.GAP:
            events.append(event)
    return sorted(events, key=lambda e: e.ts_ms)


def effective(events: list[Event]) -> list[tuple[Any, ...]]:
    """What a consumer keeps: events with exact repeats (same key, type and content) dropped."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for e in events:
        ident = (e.key, e.type.value, e.spec_hash, e.owner_key, e.pod_start_ms, e.pod_end_ms, e.uid)
        if ident not in seen:
            seen.add(ident)
            out.append(ident)
    return out


async def wait_events(bootstrap: str, namespace: str, done: Callable[[list[Event]], bool]) -> list[Event]:
    deadline = time.monotonic() + 60
    while True:
        events = await events_in(bootstrap, namespace)
        if done(events) or time.monotonic() > deadline:
            return events
        await asyncio.sleep(1)


def lifecycles_by_pod(events: list[Event]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for e in events:
        if e.type is EventType.POD_LIFECYCLE:
            out.setdefault(e.key, []).append(e)
    return out


def deployment_history(events: list[Event], name: str, ns: str) -> list[tuple[str, Any, Any]]:
    key = f"apps/Deployment/{ns}/{name}"
    history = []
    for e in events:
        if e.key != key:
            continue
        if e.type is EventType.DELETED:
            history.append(("deleted", None, None))
        else:
            assert e.obj is not None
            spec = e.obj["spec"]
            history.append(("applied", spec["replicas"], spec["template"]["spec"]["containers"][0]["image"]))
    return history


# ---- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tracer_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("watch") / "tracer.yaml"
    path.write_text(TRACER)
    return path


def expected_deployment_history() -> list[tuple[str, Any, Any]]:
    return [
        ("applied", 2, "app:1"),
        ("applied", 5, "app:1"),
        ("applied", 3, "app:1"),
        ("applied", 3, "app:2"),
        ("deleted", None, None),
    ]


def deployment_story_recorded(events: list[Event], ns: str) -> bool:
    """Whether the topic holds the whole Deployment story: its five changes and an end for each of its
    8 pods. Waiting for the Deployment's deletion alone is not enough: the last 3 pods are removed by
    garbage collection after it, so their end lifecycles are published after the deletion event (a read
    in between saw those 3 pods with a start only, which is how this test once flaked)."""
    ended = [
        key
        for key, lcs in lifecycles_by_pod(events).items()
        if key.startswith(f"core/Pod/{ns}/web-") and any(e.pod_end_ms is not None for e in lcs)
    ]
    return len(deployment_history(events, "web", ns)) >= 5 and len(ended) >= 8


def check_deployment_lifecycles(events: list[Event], ns: str) -> None:
    """8 pods in all (2, +3, then 3 from the rollout), each: a start, then an end, under the Deployment."""
    pods = {k: v for k, v in lifecycles_by_pod(events).items() if k.startswith(f"core/Pod/{ns}/web-")}
    assert len(pods) == 8, sorted(pods)
    hashes = set()
    for key, lcs in pods.items():
        phases = [(e.pod_start_ms is not None, e.pod_end_ms is not None) for e in lcs]
        assert phases == [(True, False), (True, True)], f"{key}: {phases}"
        assert lcs[0].pod_start_ms == lcs[1].pod_start_ms
        assert lcs[1].pod_end_ms is not None
        assert lcs[1].pod_start_ms is not None
        assert lcs[1].pod_end_ms >= lcs[1].pod_start_ms
        assert {e.owner_key for e in lcs} == {f"apps/Deployment/{ns}/web"}
        hashes.add(lcs[0].pod_spec_hash)
    assert len(hashes) == 2, "one pod-spec hash per image"


async def deployment_steps(w: Workload, steps: range, between: Callable[[int], Any] | None = None) -> None:
    """The scripted Deployment story: create (2), scale to 5, to 3, change the image, delete."""
    for step in steps:
        if step == 0:
            w.apply(deployment("web", 2, "app:1"))
            await w.wait_running("app=web", 2)
        elif step == 1:
            w.kubectl("scale", "-n", w.ns, "deployment/web", "--replicas=5")
            await w.wait_running("app=web", 5)
        elif step == 2:
            w.kubectl("scale", "-n", w.ns, "deployment/web", "--replicas=3")
            await w.wait_running("app=web", 3)
        elif step == 3:
            w.kubectl("set", "image", "-n", w.ns, "deployment/web", "c=app:2")
            await w.wait_running("app=web", 3, image="app:2")
        elif step == 4:
            w.kubectl("delete", "-n", w.ns, "deployment/web", "--wait=true")
            await w.wait_pods("app=web", lambda pods: not pods, "web pods to be gone")
        if between is not None:
            await between(step)


async def compact_etcd(stack: LocalStack, cluster: str, revision: int) -> None:
    """Compact the cluster's etcd through its HTTP gateway (what kube-apiserver does every 5 minutes)."""
    cluster_dir = stack.kwok_workdir / "clusters" / cluster
    ports = [
        m.group(1)
        for f in cluster_dir.glob("*.yaml")
        for m in [re.search(r"etcdPort:\s*(\d+)", f.read_text())]
        if m
    ]
    assert ports, f"no etcdPort in {cluster_dir}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{ports[0]}/v3/kv/compaction",
            json={"revision": str(revision), "physical": True},
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()


# ---- tests ----------------------------------------------------------------------------------------
async def test_scripted_workload_produces_the_expected_events(
    stack_info: StackInfo, source_nodes: list[str], tracer_config: Path
) -> None:
    ns = "wt-flow"
    w = Workload(stack_info, ns)
    w.kubectl("create", "namespace", ns)
    async with running_watcher(tracer_config, w.kubeconfig, stack_info.bootstrap) as watcher:
        w.apply(cronjob("tick"))
        await deployment_steps(w, range(5))
        w.apply(bare_pod("solo-a", "2s"))
        w.apply(bare_pod("solo-b", "3s"))
        await w.wait_pods(
            "app=bare",
            lambda pods: len(pods) == 2 and all(p["status"].get("phase") == "Succeeded" for p in pods),
            "bare pods to finish",
        )
        # the CronJob fires at the next full minute; its Job's pod completes at once (KWOK pod-complete)
        await w.wait_pods(
            "app=tick",
            lambda pods: any(p["status"].get("phase") == "Succeeded" for p in pods),
            "a CronJob pod to finish",
        )

        def complete(events: list[Event]) -> bool:
            lcs = lifecycles_by_pod(events)
            ends = [k for k, v in lcs.items() if any(e.pod_end_ms is not None for e in v)]
            return len(deployment_history(events, "web", ns)) == 5 and len(ends) >= 8 + 2 + 1

        events = await wait_events(stack_info.bootstrap, ns, complete)
        metrics = await watcher.metrics()
        assert await watcher.terminate() == 0, watcher.lines[-5:]

    assert not [e for e in events if e.type is EventType.GAP and e.gap_reason != "initial"]
    assert deployment_history(events, "web", ns) == expected_deployment_history()
    check_deployment_lifecycles(events, ns)

    # bare pods: published as objects (not owned) and each its own lifecycle owner, with an end
    for name in ("solo-a", "solo-b"):
        key = f"core/Pod/{ns}/{name}"
        assert [e.type for e in events if e.key == key and e.type is EventType.APPLIED] == [EventType.APPLIED]
        lcs = lifecycles_by_pod(events)[key]
        assert {e.owner_key for e in lcs} == {key}
        assert lcs[-1].pod_end_ms is not None

    # the CronJob and its Job; the Job's pod lifecycle belongs to the Job (first tracked owner)
    keys = {e.key for e in events if e.type is EventType.APPLIED}
    assert f"batch/CronJob/{ns}/tick" in keys
    jobs = {k for k in keys if k.startswith(f"batch/Job/{ns}/tick-")}
    assert jobs
    tick_pods = {k: v for k, v in lifecycles_by_pod(events).items() if "/tick-" in k}
    assert tick_pods
    assert all(lc.owner_key in jobs for v in tick_pods.values() for lc in v)
    # owned pods are not published as objects (skipOwned), status churn was not republished
    assert not [e for e in events if e.key.startswith(f"core/Pod/{ns}/web-") and e.type is EventType.APPLIED]
    assert len(effective(events)) == len(events), "no event was published twice"

    # the service's metrics name what it did
    assert 'kubetape_events_published_total{kind="apps/v1.Deployment",type="applied"}' in metrics
    assert "kubetape_records_published_total" in metrics


async def test_kill9_mid_workload_loses_and_duplicates_nothing(
    stack_info: StackInfo, source_nodes: list[str], tracer_config: Path
) -> None:
    ns = "wt-kill"
    w = Workload(stack_info, ns)
    w.kubectl("create", "namespace", ns)
    watcher = await start_watcher(tracer_config, w.kubeconfig, stack_info.bootstrap)
    try:

        async def crash_and_restart(step: int) -> None:
            nonlocal watcher
            if step == 1:
                await asyncio.sleep(0.5)
                await watcher.kill9()
            if step == 2:  # the scale-down happened while no watcher ran
                watcher = await start_watcher(tracer_config, w.kubeconfig, stack_info.bootstrap)

        await deployment_steps(w, range(5), crash_and_restart)
        events = await wait_events(stack_info.bootstrap, ns, lambda ev: deployment_story_recorded(ev, ns))
        assert await watcher.terminate() == 0
    finally:
        if watcher.proc.returncode is None:
            await watcher.kill9()
    history = deployment_history(events, "web", ns)
    assert history == expected_deployment_history(), history
    check_deployment_lifecycles(events, ns)
    assert len(effective(events)) == len(events), "a change was published twice"


async def test_broker_restart_mid_workload_loses_and_duplicates_nothing(
    local_stack: LocalStack, stack_info: StackInfo, source_nodes: list[str], tracer_config: Path
) -> None:
    """The watcher rides out a broker outage; /readyz answers 503 while its changes cannot be
    published (aiokafka retries silently, so only missing acknowledgements tell) and 200 once they can."""
    ns = "wt-broker"
    w = Workload(stack_info, ns)
    w.kubectl("create", "namespace", ns)
    async with running_watcher(tracer_config, w.kubeconfig, stack_info.bootstrap) as watcher:

        async def broker_outage(step: int) -> None:
            if step == 0:
                await asyncio.sleep(1)  # let the creation reach the broker
                local_stack.stop_kafka()
            if step == 1:  # the scale-up happened while the broker was down: its changes wait
                await watcher.wait_readyz(503, "changes wait and the broker is down")
                assert watcher.proc.returncode is None, "the watcher must survive a broker outage"
                local_stack.start_kafka()
                await watcher.wait_readyz(200, "the broker is back")

        await deployment_steps(w, range(5), broker_outage)
        events = await wait_events(stack_info.bootstrap, ns, lambda ev: deployment_story_recorded(ev, ns))
        assert await watcher.terminate() == 0
    history = deployment_history(events, "web", ns)
    assert history == expected_deployment_history(), history
    check_deployment_lifecycles(events, ns)
    assert len(effective(events)) == len(events), "a change was published twice"


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


async def test_custom_resources_of_any_shape_are_recorded_and_never_stop_the_watcher(
    stack_info: StackInfo, source_nodes: list[str], tmp_path: Path
) -> None:
    ns = "wt-crd"
    w = Workload(stack_info, ns)
    w.kubectl("create", "namespace", ns)
    w.kubectl("apply", "-f", "-", stdin=json.dumps(WIDGET_CRD))
    crd_established(w.kubectl, "widgets.example.com")
    config = tmp_path / "tracer.yaml"
    config.write_text(TRACER.replace("trackedObjects:", "trackedObjects:\n  example.com/v1.Widget: {}"))
    odd_shapes: list[Any] = [
        "just a string",
        [1, [2, [3, None]], {"deep": {"deeper": [True, 1.5e300, -0.0]}}],
        {"ünïcode ключ": "値", "empty": {}, "nulls": [None, None]},
    ]
    async with running_watcher(config, w.kubeconfig, stack_info.bootstrap) as watcher:
        for i, spec in enumerate(odd_shapes):
            w.apply(
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "metadata": {"name": f"w{i}"},
                    "spec": spec,
                }
            )
        w.apply({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "nospec"}, "data": 1})
        w.apply(deployment("after", 1, "app:1"))  # the watcher is still recording after the odd ones
        events = await wait_events(
            stack_info.bootstrap, ns, lambda ev: any(e.key == f"apps/Deployment/{ns}/after" for e in ev)
        )
        events = await wait_events(
            stack_info.bootstrap, ns, lambda ev: len({e.key for e in ev if "/Widget/" in e.key}) == 4
        )
        assert watcher.proc.returncode is None
        assert await watcher.terminate() == 0
    widgets = {e.key.rsplit("/", 1)[1]: e for e in events if e.key.startswith(f"example.com/Widget/{ns}/")}
    assert set(widgets) == {"w0", "w1", "w2", "nospec"}
    assert widgets["w0"].obj is not None
    assert widgets["w0"].obj["spec"] == "just a string"
    assert any(e.key == f"apps/Deployment/{ns}/after" for e in events)


# Last in this module: it restarts the source cluster.
async def test_forced_410_relists_publishes_a_gap_and_the_right_final_state(
    local_stack: LocalStack, stack_info: StackInfo, source_nodes: list[str], tracer_config: Path
) -> None:
    ns = "wt-gone"
    w = Workload(stack_info, ns)
    w.kubectl("create", "namespace", ns)
    async with running_watcher(tracer_config, w.kubeconfig, stack_info.bootstrap) as watcher:
        w.apply(deployment("keep", 1, "app:1"))
        w.apply(deployment("change", 1, "app:1"))
        w.apply(deployment("vanish", 1, "app:1"))
        await w.wait_running("app=vanish", 1)
        first_run = await wait_events(
            stack_info.bootstrap, ns, lambda ev: len({e.key for e in ev if "Deployment" in e.key}) == 3
        )
        assert await watcher.terminate() == 0

    # while the watcher is down: changes; then etcd is compacted and the API server restarted (its watch
    # cache starts over), so the watcher's resume point has expired: the API server answers 410 Gone
    w.apply(deployment("change", 2, "app:1"))
    w.kubectl("delete", "-n", ns, "deployment/vanish")
    w.apply(deployment("fresh", 1, "app:1"))
    raw_list = w.kubectl("get", "--raw", f"/apis/apps/v1/namespaces/{ns}/deployments")
    await compact_etcd(local_stack, "source", int(json.loads(raw_list)["metadata"]["resourceVersion"]))
    cluster = local_stack.cluster("source", stack_info.bin_dir)
    kwok.stop_cluster(cluster)
    kwok.start_cluster(cluster)
    resume = {k: v for k, v, _ts in await read_topic(stack_info.bootstrap, RESUME_TOPIC, w.cluster_id())}
    stored = resume["rv/apps/Deployment/*/*"]
    assert stored is not None
    stored_rv = orjson.loads(stored)["rv"]

    async with running_watcher(tracer_config, w.kubeconfig, stack_info.bootstrap) as watcher:
        events = await wait_events(
            stack_info.bootstrap, ns, lambda ev: any(e.key == f"apps/Deployment/{ns}/fresh" for e in ev)
        )
        metrics = await watcher.metrics()
        assert await watcher.terminate() == 0

    gaps = [
        e
        for e in events
        if e.type is EventType.GAP and e.key == "apps/Deployment/*/*" and e.gap_from_rv == stored_rv
    ]
    assert len(gaps) == 1
    assert gaps[0].gap_reason == "expired"
    assert gaps[0].gap_to_rv is not None
    assert int(gaps[0].gap_to_rv) > int(stored_rv)
    # what the restarted watcher published: the differences, nothing twice. Selected by publication, not
    # by event time: changes made while no watcher ran are stamped with the objects' own evidence of when
    # they happened, which is before the gap marker (stamped when the re-list ran)
    published_before = {encode_event(e) for e in first_run}
    after = [
        e
        for e in events
        if e.key.startswith(f"apps/Deployment/{ns}/") and encode_event(e) not in published_before
    ]
    assert sorted((e.type.value, e.key.rsplit("/", 1)[1]) for e in after) == [
        ("applied", "change"),
        ("applied", "fresh"),
        ("deleted", "vanish"),
    ]
    for e in after:
        if e.type is EventType.APPLIED:
            assert e.obj is not None
            source = e.obj["metadata"]["annotations"].get(TIME_SOURCE_ANNOTATION)
            assert source in {"managedFields", "creationTimestamp"}, (e.key, source)
            assert e.ts_ms < gaps[0].ts_ms, "stamped when it happened, not when the re-list saw it"
    assert 'kubetape_relists_total{kind="apps/v1.Deployment",reason="expired"} 1' in metrics

    # the compacted state now holds exactly the live Deployments of the namespace
    state: dict[str, bytes | None] = {}
    for key, value, _ts in await read_topic(stack_info.bootstrap, STATE_TOPIC, w.cluster_id()):
        state[key] = value
    live = {k.rsplit("/", 1)[1] for k, v in state.items() if k.startswith(f"apps/Deployment/{ns}/") and v}
    assert live == {"keep", "change", "fresh"}

    # and the restarted cluster runs new pods on its old nodes at once, not after KWOK's 200 s node lease
    # of the controller before the restart ran out (the next module's workload waits 90 s)
    w.apply(deployment("after-restart", 2, "app:1"))
    await w.wait_running("app=after-restart", 2)
