"""The watcher's peak memory while it lists every pod (its start, or a re-list after 410 Gone), measured
with tracemalloc through ``Watcher._relist`` itself over a fake cluster of N pods, two ways in one run:

* ``paged``: pages of 500 as the API server answers them (``KubeClient.list_pages``), each shaped as it
  arrives, as the watcher lists now;
* ``whole``: the same pages parsed one by one but collected, every listed pod held parsed until the
  last page is in and then shaped, as the watcher listed before (``list_all`` collected every page).

Each page is parsed from JSON bytes made for it (as the client parses a response), so only the pages the
watcher holds are live. The pods are a KWOK pod as the API server serves it (managedFields, conditions,
container statuses; about 2.6 KB of JSON), owned by ReplicaSets of 50 pods, owned by Deployments already
published. The peak counts what the re-list holds (pages, records, keys) plus the shaper state it
builds; the state left afterwards is printed beside it. Prints one JSON document::

    .venv/bin/python -m bench.relist_heap --pods 50000

(:mod:`bench.list_heap` measures the same structures over kubectl dumps of a real cluster.)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from pipeline.io.kafka.message import Record
from pipeline.io.kube.types import ApiResource, ListPage, ResourceVersion, WatchEvent
from pipeline.io.metrics import Metrics
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import load_tracer_config
from pipeline.watch.watcher import RV_PREFIX, Watcher, _Stream

TRACER_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "tracer.yaml"
PODS = ApiResource("v1", "Pod", "pods", True)
PAGE = 500
PODS_PER_REPLICASET = 50
MIB = 1024 * 1024
T = "2026-11-27T04:00:00Z"


def pod(i: int) -> dict[str, Any]:
    """The ``i``-th pod, as a KWOK cluster's API server lists a running Deployment pod."""
    rs = f"d{i // PODS_PER_REPLICASET}-7f9c6d5b8"
    name = f"{rs}-{i:06x}"
    fields: dict[str, Any] = {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}}}}
    status_fields: dict[str, Any] = {
        "f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:phase": {}}
    }
    return {
        "metadata": {
            "name": name,
            "generateName": f"{rs}-",
            "namespace": "bench",
            "uid": f"00000000-0000-4000-8000-{i:012x}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": T,
            "labels": {"app": rs[: rs.index("-")], "pod-template-hash": "7f9c6d5b8"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": rs,
                    "uid": f"rs-{rs}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": T,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                },
                {
                    "manager": "kwok",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": T,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": status_fields,
                    "subresource": "status",
                },
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": f"kwok-node-{i % 500}",
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": T}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": "10.0.0.1",
            "podIP": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
            "startTime": T,
            "containerStatuses": [
                {
                    "name": "app",
                    "state": {"running": {"startedAt": T}},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.k8s.io/pause:3.9",
                    "imageID": "",
                    "started": True,
                }
            ],
            "qosClass": "Burstable",
        },
    }


class PodsCluster:
    """``n`` pods in pages of ``page`` (each parsed from its own bytes), and their owners; ``whole``
    collects every page and yields them as one."""

    def __init__(self, n: int, page: int, *, whole: bool) -> None:
        self.n, self.page, self.whole = n, page, whole

    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        return ApiResource(gvk.api_version, gvk.kind, gvk.kind.lower() + "s", True)

    async def list_pages(self, res: ApiResource) -> AsyncIterator[ListPage]:
        held: list[dict[str, Any]] = []
        for start in range(0, self.n, self.page):
            parts = [orjson.dumps(pod(i)) for i in range(start, min(start + self.page, self.n))]
            body = b'{"items":[' + b",".join(parts) + b"]}"
            del parts
            items: list[dict[str, Any]] = orjson.loads(body)["items"]
            del body
            for item in items:
                item["apiVersion"], item["kind"] = res.api_version, res.kind
            if self.whole:
                held += items
            else:
                yield ListPage(items, ResourceVersion("999999"))
            del items
        if self.whole:
            yield ListPage(held, ResourceVersion("999999"))

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        deploy = name[: name.index("-")]
        ref = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deploy,
            "uid": deploy,
            "controller": True,
        }
        meta = {"name": name, "namespace": namespace, "uid": f"rs-{name}", "ownerReferences": [ref]}
        return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta}

    def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        raise AssertionError("the re-list is measured alone")


class CountingBus:
    """Takes each unit and keeps its size only (the publisher's queue is not what is measured)."""

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0

    async def submit(self, unit: Sequence[Record]) -> None:
        self.records += len(unit)
        self.bytes += sum(len(r.value or b"") for r in unit)


def deployment(n: int) -> dict[str, Any]:
    meta = {
        "name": f"d{n}",
        "namespace": "bench",
        "uid": f"d{n}",
        "resourceVersion": "1",
        "creationTimestamp": T,
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {"replicas": 50}}


async def measure(n: int, page: int, *, whole: bool) -> dict[str, Any]:
    cluster, bus = PodsCluster(n, page, whole=whole), CountingBus()
    watcher = Watcher(load_tracer_config(TRACER_CONFIG), cluster, bus, Metrics())
    for d in range(-(-n // PODS_PER_REPLICASET)):
        watcher.shaper.observe_object("ADDED", deployment(d), 1)
    stream = _Stream(PODS, tracked=True, lifecycles=True, resume_key=RV_PREFIX + "core/Pod/*/*")
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    started = time.process_time()
    await watcher._relist(stream, "initial")  # the re-list is what is measured
    cpu = time.process_time() - started
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "list": "whole" if whole else "paged",
        "peak_mib": round((peak - base) / MIB, 1),
        "peak_kib_per_pod": round((peak - base) / n / 1024, 2),
        "shaper_state_after_mib": round((kept - base) / MIB, 1),
        "records": bus.records,
        "record_payload_mib": round(bus.bytes / MIB, 1),
        "cpu_s_traced": round(cpu, 1),
        "lifecycles": len(watcher.shaper.pods),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--page", type=int, default=PAGE, help="objects per list page (the client's)")
    args = parser.parse_args()
    pod_json = len(orjson.dumps(pod(0)))
    paged = asyncio.run(measure(args.pods, args.page, whole=False))
    whole = asyncio.run(measure(args.pods, args.page, whole=True))
    out = {
        "pods": args.pods,
        "page": args.page,
        "pod_json_bytes": pod_json,
        "paged": paged,
        "whole": whole,
        "peak_paged_vs_whole": round(paged["peak_mib"] / max(whole["peak_mib"], 0.1), 3),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
