"""Pod lifecycles do not depend on which initial list finishes first.

The watcher lists every kind in its own stream. When the pod list (or a pod's watch event) is handled
before its owner's kind is listed, the owner is not published yet: the pods wait for it, and their
lifecycles go out with it, also for a pod deleted meanwhile. Both orders are forced here with gates in
the fake cluster's list calls, and must give the same lifecycles.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.formats.wire.codec import decode_event
from pipeline.io.kafka.settings import RESUME_TOPIC
from pipeline.io.kube.types import ApiResource, ListPage, ResourceVersion, WatchEvent
from pipeline.io.metrics import Metrics
from pipeline.model.events import Event, EventType
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import TracerConfig
from pipeline.watch.shaper import LIFECYCLE_PREFIX, Shaper
from pipeline.watch.watcher import Watcher
from tests.unit.test_watch_shaper import GetOnlyCluster, deployment, pod
from tests.unit.test_watch_watcher import FAST, FakeBus, FakeCluster

CONFIG = TracerConfig.from_mapping({"trackedObjects": {"apps/v1.Deployment": {"trackLifecycle": True}}}, "t")
REPLICASETS = ApiResource("apps/v1", "ReplicaSet", "replicasets", True)
OWNER = ("apps/v1", "ReplicaSet", "web-abc")
NOW_MS = 1_767_225_700_000  # the watcher's clock, fixed: deletion times are the same in both orders
DEPLOYMENT_KEY = "apps/Deployment/default/web"
S = 1_767_225_601_000  # 2026-01-01T00:00:01Z


def replicaset() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-abc",
            "namespace": "default",
            "uid": "u-web-abc",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "uid": "d1",
                    "controller": True,
                }
            ],
        },
    }


class GatedCluster(FakeCluster):
    """The watcher's fake cluster, plus GETs of owners and a gate per kind that holds its list."""

    def __init__(self) -> None:
        super().__init__()
        self.objects["ReplicaSet"] = [replicaset()]
        self.gates: dict[str, asyncio.Event] = {}

    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        return REPLICASETS if gvk.kind == "ReplicaSet" else await super().resolve(gvk)

    async def list_pages(self, res: ApiResource) -> AsyncIterator[ListPage]:
        gate = self.gates.get(res.kind)
        if gate is not None:
            await gate.wait()
        async for page in super().list_pages(res):
            yield page

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        for obj in self.objects.get(res.kind, []):
            if obj["metadata"]["name"] == name and obj["metadata"].get("namespace") == namespace:
                return obj
        return None


def lifecycles(bus: FakeBus) -> dict[str, list[tuple[int | None, int | None, str | None]]]:
    out: dict[str, list[tuple[int | None, int | None, str | None]]] = {}
    for e in bus.events():
        if e.type is EventType.POD_LIFECYCLE:
            out.setdefault(e.key, []).append((e.pod_start_ms, e.pod_end_ms, e.owner_key))
    return out


async def release_when(condition: Callable[[], bool], gate: asyncio.Event) -> None:
    while not condition():  # noqa: ASYNC110 - the fakes expose state, not events, to wait on
        await asyncio.sleep(0.002)
    gate.set()


def listed(bus: FakeBus, kind: str) -> bool:
    """Whether the stream of ``kind`` has published its list (its resume point)."""
    return any(r.topic == RESUME_TOPIC and r.key == f"rv/{kind}/*/*" for u in bus.units for r in u)


async def run_race(pods_first: bool) -> FakeBus:
    cluster, bus = GatedCluster(), FakeBus()
    running = pod("web-abc-run", 11, OWNER, started="2026-01-01T00:00:01Z")
    done = pod("web-abc-done", 12, OWNER, started="2026-01-01T00:00:02Z", finished="2026-01-01T00:00:05Z")
    cluster.objects["Deployment"] = [deployment(10)]
    cluster.objects["Pod"] = [running, done]
    # the running pod is deleted right after the pods' list, before the owner (pods first) or after it
    cluster.scripts["Pod"] = [[WatchEvent("DELETED", running, ResourceVersion("13"))]]
    watcher = Watcher(CONFIG, cluster, bus, Metrics(), settings=FAST, clock=lambda: NOW_MS)
    first, second = ("Pod", "apps/Deployment") if pods_first else ("apps/Deployment", "Pod")
    held = "Deployment" if pods_first else "Pod"
    cluster.gates[held] = asyncio.Event()

    def first_done() -> bool:
        if not listed(bus, "core/Pod" if first == "Pod" else first):
            return False
        # pods first: also wait until the deletion is handled, so the pod is gone before its owner comes
        return not pods_first or (
            ("Pod", "100") in cluster.watched_from
            and "core/Pod/default/web-abc-run" not in watcher.shaper.pods
        )

    def complete() -> bool:
        found = lifecycles(bus)
        return (
            len(found.get("core/Pod/default/web-abc-run", [])) >= 1
            and any(end is not None for _, end, _ in found.get("core/Pod/default/web-abc-run", []))
            and any(end is not None for _, end, _ in found.get("core/Pod/default/web-abc-done", []))
        )

    gate_task = asyncio.create_task(release_when(first_done, cluster.gates[held]))
    task = asyncio.create_task(watcher.run())
    try:
        deadline = asyncio.get_running_loop().time() + 5.0
        while not complete():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(
                    f"lifecycles incomplete ({'pods' if pods_first else 'owners'} listed first, "
                    f"{second} held): {lifecycles(bus)}; waiting: {watcher.shaper.waiting}"
                )
            await asyncio.sleep(0.005)
    finally:
        await watcher.stop()
        for t in (task, gate_task):
            t.cancel()
        await asyncio.gather(task, gate_task, return_exceptions=True)
    return bus


def final_lifecycles(bus: FakeBus) -> dict[str, tuple[int | None, int | None, str | None]]:
    return {key: lcs[-1] for key, lcs in lifecycles(bus).items()}


@pytest.mark.parametrize("pods_first", [True, False], ids=["pods-listed-first", "owners-listed-first"])
async def test_lifecycles_do_not_depend_on_which_list_finishes_first(pods_first: bool) -> None:
    bus = await run_race(pods_first)
    assert final_lifecycles(bus) == {
        "core/Pod/default/web-abc-run": (S, NOW_MS, DEPLOYMENT_KEY),  # finished at its deletion
        "core/Pod/default/web-abc-done": (S + 1000, S + 4000, DEPLOYMENT_KEY),
    }
    # every lifecycle comes after its owner's APPLIED event on the events topic
    events: list[Event] = bus.events()
    owner_at = next(i for i, e in enumerate(events) if e.key == DEPLOYMENT_KEY)
    assert all(i > owner_at for i, e in enumerate(events) if e.type is EventType.POD_LIFECYCLE)
    # the resume topic keeps the live pod's lifecycle and forgets the deleted one
    resume = bus.compacted(RESUME_TOPIC)
    assert LIFECYCLE_PREFIX + "core/Pod/default/web-abc-done" in resume
    assert LIFECYCLE_PREFIX + "core/Pod/default/web-abc-run" not in resume


async def test_both_orders_give_the_same_lifecycles() -> None:
    assert final_lifecycles(await run_race(True)) == final_lifecycles(await run_race(False))


async def test_a_pod_waiting_for_its_owner_publishes_what_it_saw_meanwhile() -> None:
    # shaper level: the pod is seen starting, then finishing, all before its owner is published
    shaper = Shaper(CONFIG, GetOnlyCluster([replicaset(), deployment(10)]))
    started = pod("web-abc-1", 11, OWNER, started="2026-01-01T00:00:01Z")
    assert (await shaper.observe_pod("ADDED", started, 1000)).events == []
    assert shaper.waiting == {DEPLOYMENT_KEY: {"core/Pod/default/web-abc-1"}}
    out = shaper.observe_object("ADDED", deployment(10), 2000)
    assert [(e.type, e.key) for e in out.events] == [
        (EventType.APPLIED, DEPLOYMENT_KEY),
        (EventType.POD_LIFECYCLE, "core/Pod/default/web-abc-1"),
    ]
    assert (out.events[1].pod_start_ms, out.events[1].pod_end_ms) == (S, None)
    assert shaper.waiting == {}
    # later observations go on from what was published
    finished = pod("web-abc-1", 12, OWNER, started="2026-01-01T00:00:01Z", finished="2026-01-01T00:00:03Z")
    later = await shaper.observe_pod("MODIFIED", finished, 3000)
    assert [(e.pod_start_ms, e.pod_end_ms) for e in later.events] == [(S, S + 2000)]


async def test_an_owner_filtered_out_is_not_waited_for() -> None:
    config = TracerConfig.from_mapping(
        {
            "trackedObjects": {"apps/v1.Deployment": {"trackLifecycle": True}},
            "labels": {"deny": [{"matchLabels": {"skip": "yes"}}]},
        },
        "t",
    )
    hidden = deployment(10)
    hidden["metadata"]["labels"] = {"skip": "yes"}
    shaper = Shaper(config, GetOnlyCluster([replicaset(), hidden]))
    await shaper.observe_pod("ADDED", pod("web-abc-1", 11, OWNER, started="2026-01-01T00:00:01Z"), 1000)
    assert shaper.waiting == {}


async def test_waiting_pods_deleted_meanwhile_are_bounded() -> None:
    import pipeline.watch.shaper as shaper_module

    shaper = Shaper(CONFIG, GetOnlyCluster([replicaset(), deployment(10)]))
    with contextlib.ExitStack() as stack:
        stack.callback(setattr, shaper_module, "MAX_GONE_WAITING", shaper_module.MAX_GONE_WAITING)
        shaper_module.MAX_GONE_WAITING = 3
        for i in range(5):
            p = pod(f"web-abc-{i}", 11 + i, OWNER, started="2026-01-01T00:00:01Z")
            await shaper.observe_pod("ADDED", p, 1000)
            await shaper.observe_pod("DELETED", p, NOW_MS)
    assert sorted(shaper.gone_waiting) == [f"core/Pod/default/web-abc-{i}" for i in (2, 3, 4)]
    assert shaper.waiting == {DEPLOYMENT_KEY: set(shaper.gone_waiting)}
    out = shaper.observe_object("ADDED", deployment(10), 2000)
    assert sorted(e.key for e in out.events if e.type is EventType.POD_LIFECYCLE) == sorted(
        f"core/Pod/default/web-abc-{i}" for i in (2, 3, 4)
    )
    ends = [decode_event(r.value).pod_end_ms for r in out.records if r.value and r.key.startswith("core/")]
    assert ends == [NOW_MS] * 3, "finished at their deletion"
    assert shaper.gone_waiting == {}
    assert shaper.waiting == {}


# ---- any interleaving against the owner-first order -------------------------------------------------
POD_STEPS = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["start", "finish", "delete", "recreate"])),
    min_size=1,
    max_size=25,
)


async def final_state(steps: list[tuple[int, str]], owner_at: int) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Run the pod ``steps`` with the owner published before step ``owner_at``; the last lifecycle per
    pod (start, end, owner) and what the resume topic keeps."""
    shaper = Shaper(CONFIG, GetOnlyCluster([replicaset(), deployment(10)]))
    published: dict[str, Any] = {}
    resume: dict[str, bytes] = {}
    rv = 20
    generation: dict[int, int] = {}
    for i, (n, action) in enumerate([*steps, (-1, "end")]):
        outs = []
        if i == owner_at:
            outs.append(shaper.observe_object("ADDED", deployment(10), 5000 + i))
        if action != "end":
            rv += 1
            name = f"web-abc-{n}"
            if action == "recreate":  # a new pod under the same name (StatefulSets): a new uid
                generation[n] = generation.get(n, 0) + 1
            if action == "delete":
                p = pod(name, rv, OWNER)
            else:
                finished = "2026-01-01T00:00:09Z" if action == "finish" else None
                p = pod(name, rv, OWNER, started="2026-01-01T00:00:01Z", finished=finished)
            p["metadata"]["uid"] = f"u-{name}-{generation.get(n, 0)}"
            kind = "DELETED" if action == "delete" else "MODIFIED"
            outs.append(await shaper.observe_pod(kind, p, S + 10_000 + i))
        for out in outs:
            for e in out.events:
                if e.type is EventType.POD_LIFECYCLE:
                    published[e.key] = (e.pod_start_ms, e.pod_end_ms, e.owner_key)
            for r in out.records:
                if r.topic == RESUME_TOPIC:
                    if r.value is None:
                        resume.pop(r.key, None)
                    else:
                        resume[r.key] = r.value
    return published, {k: decode_event(v).pod_end_ms for k, v in resume.items()}  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(POD_STEPS, st.data())
def test_any_interleaving_gives_the_lifecycles_of_owner_first(
    steps: list[tuple[int, str]], data: Any
) -> None:
    owner_at = data.draw(st.integers(0, len(steps)))
    reference = asyncio.run(final_state(steps, 0))
    raced = asyncio.run(final_state(steps, owner_at))
    assert raced == reference, f"owner published before step {owner_at}"
