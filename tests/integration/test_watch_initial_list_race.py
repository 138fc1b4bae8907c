"""The initial-list race on a real cluster: the watcher (in process, on the real ``source`` KWOK cluster)
lists pods before their Deployment, or the Deployment before its pods, forced by holding one kind's list
until the other has been published. Both orders record the same lifecycles, and a pod deleted later
ends its lifecycle."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pipeline.formats.wire.codec import decode_event
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.settings import EVENTS_TOPIC, RESUME_TOPIC
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.io.kube.types import ApiResource, ListPage, ResourceVersion, WatchEvent
from pipeline.io.metrics import Metrics
from pipeline.model.events import Event, EventType
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import TracerConfig
from pipeline.stack.state import StackInfo
from pipeline.watch.watcher import Watcher
from tests.integration.test_watch_service import (
    Workload,
    deployment,
)

pytestmark = pytest.mark.timeout(600)


class GatedCluster:
    """The real cluster, with the list of one kind held until ``release`` is set."""

    def __init__(self, real: KubeClient, held_kind: str) -> None:
        self.real = real
        self.held_kind = held_kind
        self.release = asyncio.Event()

    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        return await self.real.resolve(gvk)

    async def list_pages(self, res: ApiResource) -> AsyncIterator[ListPage]:
        if res.kind == self.held_kind:
            await self.release.wait()
        async for page in self.real.list_pages(res):
            yield page

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        return await self.real.get_object(res, namespace, name)

    def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        return self.real.watch_objects(res, since)


class Collect:
    def __init__(self) -> None:
        self.records: list[Record] = []

    async def submit(self, unit: Sequence[Record]) -> None:
        self.records += unit

    def listed(self, kind_key: str) -> bool:
        return any(r.topic == RESUME_TOPIC and r.key == f"rv/{kind_key}" for r in self.records)

    def lifecycles(self, ns: str) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = {}
        for r in self.records:
            if r.topic == EVENTS_TOPIC and r.value is not None and f"/{ns}/" in r.key:
                e = decode_event(r.value)
                if e.type is EventType.POD_LIFECYCLE:
                    out.setdefault(e.key, []).append(e)
        return out


async def poll(condition: Any, what: str, state: Any, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last seen: {state()}")
        await asyncio.sleep(0.2)


@pytest.mark.usefixtures("source_nodes")
@pytest.mark.parametrize("pods_first", [True, False], ids=["pods-listed-first", "owners-listed-first"])
async def test_lifecycles_in_both_list_orders(stack_info: StackInfo, pods_first: bool) -> None:
    ns = f"race-{uuid.uuid4().hex[:6]}"
    w = Workload(stack_info, ns)
    w.kubectl("create", "namespace", ns)
    w.apply(deployment("web", 2, "app:1"))
    await w.wait_running("app=web", 2)  # both pods run before the watcher lists anything
    config = TracerConfig.from_mapping(
        {"trackedObjects": {"apps/v1.Deployment": {"trackLifecycle": True}}, "namespaces": {"allow": [ns]}},
        "race",
    )
    bus = Collect()
    kubeconfig: Path = w.kubeconfig
    async with kube_api(kubeconfig) as api:
        cluster = GatedCluster(KubeClient(api), "Deployment" if pods_first else "Pod")
        watcher = Watcher(config, cluster, bus, Metrics())
        run = asyncio.create_task(watcher.run())
        try:
            first = "core/Pod/*/*" if pods_first else "apps/Deployment/*/*"
            await poll(lambda: bus.listed(first), f"{first} to be listed first", lambda: len(bus.records))
            cluster.release.set()
            pods = {p["metadata"]["name"] for p in w.pods("app=web")}
            keys = {f"core/Pod/{ns}/{name}" for name in pods}
            await poll(
                lambda: keys <= bus.lifecycles(ns).keys(),
                "a lifecycle for each running pod",
                lambda: sorted(bus.lifecycles(ns)),
            )
            # a pod deleted later ends its lifecycle (the pod the issue lost both times)
            victim = sorted(pods)[0]
            w.kubectl("delete", "pod", "-n", ns, victim, "--wait=false")
            await poll(
                lambda: any(
                    e.pod_end_ms is not None for e in bus.lifecycles(ns).get(f"core/Pod/{ns}/{victim}", [])
                ),
                f"{victim}'s lifecycle to end",
                lambda: bus.lifecycles(ns).get(f"core/Pod/{ns}/{victim}"),
            )
        finally:
            await watcher.stop()
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
    for key in keys:
        lcs = bus.lifecycles(ns)[key]
        assert {e.owner_key for e in lcs} == {f"apps/Deployment/{ns}/web"}, key
        assert lcs[0].pod_start_ms is not None
