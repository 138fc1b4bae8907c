"""A custom resource without pod templates, end to end on the real stack: a small Spark-like CRD with an
application whose driver pod it owns and whose executor the driver owns, recorded on ``source`` by the real
watcher (Pods tracked with SimKube's ``skipOwned``), assembled from the topic as an export assembles it,
written as an export file, and replayed on ``sim`` at ×10: the replay installs the recorded CRD, and the
application and its pods (owned by the replayed application, as no operator makes them there) appear
and go at the scaled recorded times."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.trace import read_trace
from pipeline.io.kafka.settings import EVENTS_TOPIC, KafkaSettings
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.io.kube.pod_watch import PodWatch
from pipeline.model.errors import ApiUnavailableError, NotFoundError, UnknownKindError
from pipeline.model.events import EventType
from pipeline.model.tracer_config import load_tracer_config
from pipeline.replay.crds import CRD_API_VERSION, CRD_KIND
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.report.report import ReplayReport
from pipeline.replay.rewrite import REPLAY_LABEL
from pipeline.replay.sources import read_topic_trace
from pipeline.stack.state import StackInfo
from pipeline.store.export import ExportFilters
from tests.integration.test_replay_traces import assert_cleaned_up, node_settings
from tests.integration.test_watch_service import Workload, running_watcher

pytestmark = pytest.mark.timeout(300)

SPEED = 10.0
STEP_S = 3.0
"""Wall seconds between the recorded changes: 0.3 s apart at ×10, several polls each."""
EARLY_S = 0.05
"""A replayed change is never seen before its scaled time (same clock; the poll's own timing)."""
LATE_S = 0.6
"""…and is seen within this much after it (a write, a KWOK deletion, a poll) on a loaded machine."""


def spark_crd(group: str, label: dict[str, str]) -> dict[str, Any]:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": CRD_API_VERSION,
        "kind": CRD_KIND,
        "metadata": {"name": f"sparkapplications.{group}", "labels": label},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": "SparkApplication",
                "plural": "sparkapplications",
                "singular": "sparkapplication",
            },
            "versions": [
                {"name": "v1beta2", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
            ],
        },
    }


def owned_pod(name: str, owner: dict[str, Any], label: dict[str, str]) -> dict[str, Any]:
    meta = owner["metadata"]
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": label, "ownerReferences": [{**ref, "controller": True}]},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "spark", "image": "apache/spark:3.5.0"}]},
    }


async def test_a_custom_resource_and_its_pods_are_recorded_exported_and_replayed_at_scaled_times(
    stack_info: StackInfo, source_nodes: list[str], sim_kubeconfig: Path, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    ns, group = f"spark-{tag}", f"s{tag}.spark.example.com"
    label = {"kubetape-test": ns}
    api_version = f"{group}/v1beta2"
    config_path = tmp_path / "tracer.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "trackedObjects": {
                    f"{api_version}.SparkApplication": {"trackLifecycle": True},
                    f"{CRD_API_VERSION}.{CRD_KIND}": {},
                    "v1.Pod": {"trackLifecycle": True, "skipOwned": True},  # SimKube's example config
                },
                "namespaces": {"allow": [ns]},
                "labels": {"allow": [{"matchLabels": label}]},  # this test's CRD of the cluster's CRDs
            }
        )
    )
    w = Workload(stack_info, ns)
    crd = spark_crd(group, label)
    w.kubectl("apply", "-f", "-", stdin=json.dumps(crd))
    try:
        w.kubectl("wait", "--for", "condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s")
        w.kubectl("create", "namespace", ns)
        started_ms = int(time.time() * 1000) - 1_000
        cluster_id = w.cluster_id()
        async with running_watcher(config_path, w.kubeconfig, stack_info.bootstrap) as watcher:
            await asyncio.sleep(STEP_S)  # the CRD is listed; the application comes a step later
            app = {
                "apiVersion": api_version,
                "kind": "SparkApplication",
                "metadata": {"name": "pi", "labels": label},
                "spec": {"type": "Scala", "mainClass": "SparkPi", "executor": {"instances": 1}},
            }
            w.apply(app)
            app = json.loads(w.kubectl("get", f"sparkapplications.{group}", "pi", "-n", ns, "-o", "json"))
            await asyncio.sleep(STEP_S)
            w.apply(owned_pod("pi-driver", app, label))
            driver = json.loads(w.kubectl("get", "pod", "pi-driver", "-n", ns, "-o", "json"))
            await asyncio.sleep(STEP_S)
            w.apply(owned_pod("pi-exec-1", driver, label))
            await w.wait_running(f"kubetape-test={ns}", 2)
            await asyncio.sleep(STEP_S)
            w.kubectl("delete", "pod", "pi-exec-1", "-n", ns, "--wait=true")
            await asyncio.sleep(STEP_S)
            w.kubectl("delete", "pod", "pi-driver", "-n", ns, "--wait=true")
            await asyncio.sleep(STEP_S)
            w.kubectl("delete", f"sparkapplications.{group}", "pi", "-n", ns, "--wait=true")
            await asyncio.sleep(2)  # the watcher publishes the last delete
            assert await watcher.terminate() == 0, watcher.lines[-5:]

        trace = await read_topic_trace(
            KafkaSettings(stack_info.bootstrap),
            EVENTS_TOPIC,
            started_ms,
            int(time.time() * 1000) + 1,
            config=load_tracer_config(config_path),
            cluster=cluster_id,
        )
    finally:
        w.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
        w.kubectl("delete", "crd", crd["metadata"]["name"], "--ignore-not-found", "--wait=false")
    # Other tests of the session record `source` under the same cluster id on the same topic, and a range
    # holds the recorded cluster's whole state at its start: keep this namespace, as
    # `export --include-namespace` does (the CRD is cluster-scoped and stays).
    only_this_test = ExportFilters(included_namespaces=(ns,))
    trace = build_segment(
        [e for e in trace.events if not only_this_test.excludes(e)],
        start_ms=trace.header.start_ms,
        end_ms=trace.header.end_ms,
        partitions=trace.header.partitions,
        config=trace.config,
        kind=trace.header.kind,
    )

    # the export holds the CRD, the application and both pods (with skipOwned: nothing makes them on
    # replay), the pods' lifecycles under the application
    changes = [(e.type, e.key.split("/")[1], e.key.split("/")[-1]) for e in trace.events if e.obj is not None]
    names = {name for _, _, name in changes}
    assert {"pi", "pi-driver", "pi-exec-1", crd["metadata"]["name"]} <= names, changes
    owners = {e.key.split("/")[-1]: e.owner_key for e in trace.events if e.type is EventType.POD_LIFECYCLE}
    assert owners == {
        "pi-driver": f"{group}/SparkApplication/{ns}/pi",
        "pi-exec-1": f"{group}/SparkApplication/{ns}/pi",
    }, owners
    exported = tmp_path / "spark.kseg"
    exported.write_bytes(encode_segment(trace))

    plan = plan_replay(read_trace(exported), SPEED)
    expected: dict[tuple[str, str], float] = {}  # (name, applied|deleted) → scaled seconds into the replay
    for step in plan.steps:
        name = step.payload.key.split("/")[-1]
        expected.setdefault((name, step.payload.type.value), (step.ts_ms - plan.start_ms) / 1000 / SPEED)
    settings = node_settings(f"spark{tag}", SPEED)
    seen: dict[tuple[str, str], float] = {}  # the same, as observed (the start of the poll that saw it)
    async with kube_api(sim_kubeconfig) as api:
        sim = KubeClient(api)
        replayer = Replayer(sim, plan, settings, source=str(exported), pod_watch=partial(PodWatch, api))
        run = asyncio.create_task(replayer.run())
        try:
            report, last = await observe(sim, replayer, run, api_version, seen)
        finally:
            if not run.done():  # the observation failed: stop the replay, which cleans up
                replayer.stop()
                await asyncio.wait({run}, timeout=60)
        assert report.failed == 0, report.summary()
        # owned as recorded, by the replayed objects
        app_uid, driver = last["pi"]["metadata"]["uid"], last["pi-driver"]["metadata"]
        assert [(r["kind"], r["uid"]) for r in driver["ownerReferences"]] == [("SparkApplication", app_uid)]
        executor = last["pi-exec-1"]["metadata"]
        assert [(r["kind"], r["uid"]) for r in executor["ownerReferences"]] == [("Pod", driver["uid"])]
        for change in (("pi", "applied"), ("pi-driver", "applied"), ("pi-exec-1", "applied")):
            assert change in seen, f"{change} never seen; seen: {seen}"
        for change in (("pi-exec-1", "deleted"), ("pi-driver", "deleted"), ("pi", "deleted")):
            assert change in seen, f"{change} never seen; seen: {seen}"
        for change, at in seen.items():
            if change in expected:
                due = expected[change]
                assert due - EARLY_S <= at <= due + LATE_S, f"{change} at {at:.2f} s, due {due:.2f} s; {seen}"
        order = [seen[c] for c in (("pi", "applied"), ("pi-driver", "applied"), ("pi-exec-1", "applied"))]
        assert order == sorted(order)
        assert report.cleanup.startswith("done"), report.cleanup
        await assert_cleaned_up(sim, settings.replay_name)
        # the CRD the replay installed went with it
        assert await sim.get(CRD_API_VERSION, CRD_KIND, None, crd["metadata"]["name"]) is None


async def observe(
    sim: KubeClient,
    replayer: Replayer,
    run: asyncio.Task[ReplayReport],
    api_version: str,
    seen: dict[tuple[str, str], float],
) -> tuple[ReplayReport, dict[str, dict[str, Any]]]:
    """Poll the replay's applications and pods until it ends: when each appeared and went (seconds of
    trace time's start, into ``seen``), and the last version of each object seen."""
    selector = f"{REPLAY_LABEL}={replayer.name}"
    present: dict[str, dict[str, Any]] = {}
    last: dict[str, dict[str, Any]] = {}
    while not run.done():
        polled = time.monotonic()
        now_present: dict[str, dict[str, Any]] = {}
        for api_v, kind in ((api_version, "SparkApplication"), ("v1", "Pod")):
            try:
                items = await sim.list_objects(api_v, kind, label_selector=selector)
            except (UnknownKindError, ApiUnavailableError, NotFoundError):
                items = []  # the CRD is not installed yet, its storage starts, or the cleanup deleted it
            for item in items:
                if not item["metadata"].get("deletionTimestamp"):
                    now_present[item["metadata"]["name"]] = item
        start = replayer.trace_started_at
        if start is not None:
            for name in now_present.keys() - present.keys():
                seen.setdefault((name, "applied"), polled - start)
            for name in present.keys() - now_present.keys():
                seen.setdefault((name, "deleted"), polled - start)
            present = now_present
            last.update(now_present)
        await asyncio.wait({run}, timeout=0.05)
    return run.result(), last
