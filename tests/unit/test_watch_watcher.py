"""The watch loop (pipeline.watch.watcher) against an in-memory cluster and bus: initial list, watch,
410 → re-list with differences and a gap event, broken streams, restart from resume points, odd shapes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pipeline.formats.wire.codec import decode_event
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.settings import EVENTS_TOPIC, RESUME_TOPIC, STATE_TOPIC
from pipeline.io.kube.types import ApiResource, ListPage, ResourceVersion, WatchEvent
from pipeline.io.metrics import Metrics
from pipeline.model.errors import GoneError, WatchBrokenError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import TracerConfig
from pipeline.watch.watcher import Watcher, WatchSettings

CONFIG = TracerConfig.from_mapping({"trackedObjects": {"apps/v1.Deployment": {}}}, "test")
DEPLOY = ApiResource("apps/v1", "Deployment", "deployments", True)
PODS = ApiResource("v1", "Pod", "pods", True)
FAST = WatchSettings(resume_every_s=0.0, retry_min_s=0.01, retry_max_s=0.01)


def deployment(name: str, rv: int, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "uid": f"u-{name}", "resourceVersion": str(rv)},
        "spec": {"replicas": replicas},
    }


class FakeCluster:
    """Objects per kind, listed in pages of ``page_size``; each watch() call takes the next scripted
    outcome of that kind: a list of WatchEvents (then the stream stays open), or an exception to raise."""

    def __init__(self) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {"Deployment": [], "Pod": []}
        self.rv = 100
        self.scripts: dict[str, list[list[WatchEvent] | Exception]] = {"Deployment": [], "Pod": []}
        self.watched_from: list[tuple[str, str]] = []
        self.lists = 0
        self.lists_of: dict[str, int] = {}
        # (kind, nth list of that kind) → the objects and resourceVersion the cluster has by then
        self.before_list: dict[tuple[str, int], tuple[list[dict[str, Any]], int]] = {}
        # (kind, nth list) → after this many pages, the continue token expires and the list starts over
        # on these objects at this resourceVersion
        self.restart_list: dict[tuple[str, int], tuple[int, list[dict[str, Any]], int]] = {}
        # (kind, nth list) → after this many pages, the connection drops
        self.break_list: dict[tuple[str, int], int] = {}
        self.page_size = 2

    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        return {"Deployment": DEPLOY, "Pod": PODS}.get(gvk.kind)

    async def list_pages(self, res: ApiResource) -> AsyncIterator[ListPage]:
        self.lists += 1
        nth = self.lists_of[res.kind] = self.lists_of.get(res.kind, 0) + 1
        if (res.kind, nth) in self.before_list:
            self.objects[res.kind], self.rv = self.before_list[res.kind, nth]
        pages = self._pages(self.objects[res.kind], self.rv)
        if (res.kind, nth) in self.restart_list:
            after, self.objects[res.kind], self.rv = self.restart_list[res.kind, nth]
            fresh = self._pages(self.objects[res.kind], self.rv)
            pages = [*pages[:after], ListPage(fresh[0].items, fresh[0].resource_version, True), *fresh[1:]]
        for n, page in enumerate(pages):
            if self.break_list.get((res.kind, nth)) == n:
                raise WatchBrokenError("connection reset mid-list")
            yield page

    def _pages(self, objects: list[dict[str, Any]], rv: int) -> list[ListPage]:
        size = self.page_size
        return [
            ListPage([dict(o) for o in objects[i : i + size]], ResourceVersion(str(rv)))
            for i in range(0, max(len(objects), 1), size)
        ]

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        return None

    async def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        self.watched_from.append((res.kind, since))
        script = self.scripts[res.kind]
        step = script.pop(0) if script else []
        if isinstance(step, Exception):
            raise step
        for event in step:
            yield event
        await asyncio.Event().wait()  # an open watch with nothing more to say


class FakeBus:
    def __init__(self) -> None:
        self.units: list[list[Record]] = []

    async def submit(self, unit: Sequence[Record]) -> None:
        self.units.append(list(unit))

    def events(self) -> list[Event]:
        return [decode_event(r.value) for u in self.units for r in u if r.topic == EVENTS_TOPIC and r.value]

    def compacted(self, topic: str) -> dict[str, bytes]:
        latest: dict[str, bytes] = {}
        for r in (r for u in self.units for r in u if r.topic == topic):
            if r.value is None:
                latest.pop(r.key, None)
            else:
                latest[r.key] = r.value
        return latest


async def run_until(watcher: Watcher, condition: Any) -> None:
    """Run the watcher until ``condition()`` holds (at most 2 s), then stop it."""
    task = asyncio.create_task(watcher.run())
    try:
        async with asyncio.timeout(2.0):
            while not condition():  # noqa: ASYNC110 - the fakes expose state, not events, to wait on
                await asyncio.sleep(0.005)
    finally:
        await watcher.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_initial_list_then_watch_publishes_changes_and_resume_points() -> None:
    cluster, bus = FakeCluster(), FakeBus()
    cluster.objects["Deployment"] = [deployment("a", 90)]
    cluster.scripts["Deployment"] = [
        [
            WatchEvent("MODIFIED", deployment("a", 101, replicas=3), ResourceVersion("101")),
            WatchEvent("ADDED", deployment("b", 102), ResourceVersion("102")),
            WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "150"}}, ResourceVersion("150")),
        ]
    ]
    watcher = Watcher(CONFIG, cluster, bus, Metrics(), settings=FAST)
    await run_until(watcher, lambda: ("Deployment", "100") in cluster.watched_from and len(bus.events()) == 3)
    assert watcher.ready
    events = bus.events()
    assert [(e.type, e.key) for e in events] == [
        (EventType.APPLIED, "apps/Deployment/default/a"),
        (EventType.APPLIED, "apps/Deployment/default/a"),
        (EventType.APPLIED, "apps/Deployment/default/b"),
    ]
    await asyncio.sleep(0)
    resume = bus.compacted(RESUME_TOPIC)
    assert resume["rv/apps/Deployment/*/*"] == b'{"v":1,"rv":"150"}'
    assert set(bus.compacted(STATE_TOPIC)) == {"apps/Deployment/default/a", "apps/Deployment/default/b"}


async def test_expired_watch_relists_publishes_differences_and_a_gap() -> None:
    cluster, bus = FakeCluster(), FakeBus()
    cluster.objects["Deployment"] = [
        deployment("keep", 90),
        deployment("change", 91),
        deployment("vanish", 92),
    ]
    cluster.scripts["Deployment"] = [GoneError("too old resource version: 100 (400)")]
    metrics = Metrics()
    watcher = Watcher(CONFIG, cluster, bus, metrics, settings=FAST)

    # the cluster moved on while the watch was failing: a change, a delete, an addition
    changed = [deployment("keep", 90), deployment("change", 120, 4), deployment("new", 121)]
    cluster.before_list["Deployment", 2] = (changed, 130)
    await run_until(watcher, lambda: any(e.type is EventType.GAP for e in bus.events()))
    events = bus.events()
    tail = [(e.type.value, e.key) for e in events[3:]]
    assert tail[0] == ("gap", "apps/Deployment/*/*")
    gap = events[3]
    assert (gap.gap_from_rv, gap.gap_to_rv, gap.gap_reason) == ("100", "130", "expired")
    assert sorted(tail[1:]) == sorted(
        [
            ("applied", "apps/Deployment/default/change"),
            ("applied", "apps/Deployment/default/new"),
            ("deleted", "apps/Deployment/default/vanish"),
        ]
    )
    assert metrics.value("relists_total", {"kind": "apps/v1.Deployment", "reason": "expired"}) == 1
    assert set(bus.compacted(STATE_TOPIC)) == {
        "apps/Deployment/default/keep",
        "apps/Deployment/default/change",
        "apps/Deployment/default/new",
    }


async def test_a_relist_over_pages_is_one_unit_gap_first_deletions_and_resume_last() -> None:
    cluster, bus = FakeCluster(), FakeBus()
    cluster.objects["Deployment"] = [deployment(n, 90 + i) for i, n in enumerate("abcde")]
    cluster.scripts["Deployment"] = [GoneError("too old resource version: 100 (400)")]
    # five objects in pages of two: three pages; by the re-list c vanished and f appeared
    now = [deployment(n, 90 + i) for i, n in enumerate("abde")] + [deployment("f", 125)]
    cluster.before_list["Deployment", 2] = (now, 130)
    watcher = Watcher(CONFIG, cluster, bus, Metrics(), settings=FAST)
    await run_until(watcher, lambda: any(e.type is EventType.GAP for e in bus.events()))
    [relist] = [u for u in bus.units if any(r.key == "apps/Deployment/*/*" for r in u)]
    assert [(r.topic, r.key) for r in relist] == [
        (EVENTS_TOPIC, "apps/Deployment/*/*"),
        (EVENTS_TOPIC, "apps/Deployment/default/f"),
        (STATE_TOPIC, "apps/Deployment/default/f"),
        (EVENTS_TOPIC, "apps/Deployment/default/c"),
        (STATE_TOPIC, "apps/Deployment/default/c"),
        (RESUME_TOPIC, "rv/apps/Deployment/*/*"),
    ]
    assert relist[-1].value == b'{"v":1,"rv":"130"}'


async def test_a_list_started_over_mid_way_finds_deletions_against_the_fresh_snapshot() -> None:
    cluster, bus = FakeCluster(), FakeBus()
    cluster.objects["Deployment"] = [deployment(n, 90 + i) for i, n in enumerate("abcde")]
    # the first list's continue token expires after one page; meanwhile a was deleted and b changed
    cluster.restart_list["Deployment", 1] = (
        1,
        [deployment("b", 120, 3), *cluster.objects["Deployment"][2:]],
        130,
    )
    watcher = Watcher(CONFIG, cluster, bus, Metrics(), settings=FAST)
    await run_until(watcher, lambda: ("Deployment", "130") in cluster.watched_from)
    assert [(e.type.value, e.key.rsplit("/", 1)[1]) for e in bus.events()] == [
        ("applied", "a"),
        ("applied", "b"),
        ("applied", "b"),
        ("applied", "c"),
        ("applied", "d"),
        ("applied", "e"),
        ("deleted", "a"),
    ]
    assert sorted(k.rsplit("/", 1)[1] for k in bus.compacted(STATE_TOPIC)) == ["b", "c", "d", "e"]
    assert len([u for u in bus.units if any("Deployment" in r.key for r in u)]) == 1  # one unit


async def test_a_list_broken_after_pages_publishes_what_they_showed_then_lists_again() -> None:
    cluster, bus = FakeCluster(), FakeBus()
    cluster.objects["Deployment"] = [deployment(n, 90 + i) for i, n in enumerate("abcde")]
    cluster.break_list["Deployment", 1] = 2  # two pages shaped (a-d), then the connection drops
    watcher = Watcher(CONFIG, cluster, bus, Metrics(), settings=FAST)
    await run_until(watcher, lambda: ("Deployment", "100") in cluster.watched_from)
    first, second = [u for u in bus.units if any("Deployment" in r.key for r in u)]
    # what the shaper counted as published is published: nothing is lost to the de-duplication
    assert [r.key.rsplit("/", 1)[1] for r in first if r.topic == EVENTS_TOPIC] == ["a", "b", "c", "d"]
    assert not [r for r in first if r.topic == RESUME_TOPIC]  # no resume point from a partial list
    # the next list owns up to what it may have missed since: a gap, then what the first did not show
    assert [r.key.rsplit("/", 1)[1] for r in second if r.topic == EVENTS_TOPIC] == ["*", "e"]
    assert sorted(k.rsplit("/", 1)[1] for k in bus.compacted(STATE_TOPIC)) == list("abcde")
    assert bus.compacted(RESUME_TOPIC)["rv/apps/Deployment/*/*"] == b'{"v":1,"rv":"100"}'


async def test_broken_watch_relists_with_a_gap() -> None:
    cluster, bus = FakeCluster(), FakeBus()
    cluster.scripts["Deployment"] = [WatchBrokenError("connection reset")]
    watcher = Watcher(CONFIG, cluster, bus, Metrics(), settings=FAST)
    await run_until(watcher, lambda: any(e.type is EventType.GAP for e in bus.events()))
    [gap] = [e for e in bus.events() if e.type is EventType.GAP]
    assert gap.gap_reason == "broken"


async def test_restart_resumes_from_stored_version_without_duplicates() -> None:
    cluster, first_bus = FakeCluster(), FakeBus()
    cluster.objects["Deployment"] = [deployment("a", 90)]
    first = Watcher(CONFIG, cluster, first_bus, Metrics(), settings=FAST)
    await run_until(
        first, lambda: len(first_bus.events()) == 1 and len(first_bus.compacted(RESUME_TOPIC)) == 2
    )

    # the second run resumes from rv 100 and sees a replayed (already published) event, then a new one
    cluster.scripts["Deployment"] = [
        [
            WatchEvent("MODIFIED", deployment("a", 90), ResourceVersion("90")),
            WatchEvent("MODIFIED", deployment("a", 140, replicas=2), ResourceVersion("140")),
        ]
    ]
    bus = FakeBus()
    second = Watcher(CONFIG, cluster, bus, Metrics(), settings=FAST)
    second.restore(first_bus.compacted(STATE_TOPIC), first_bus.compacted(RESUME_TOPIC))
    lists_before = cluster.lists
    await run_until(second, lambda: len(bus.events()) == 1)
    assert cluster.lists == lists_before  # resumed, not re-listed
    assert ("Deployment", "100") in cluster.watched_from[-2:]
    [event] = bus.events()
    assert event.spec_hash != 0
    assert event.obj is not None
    assert event.obj["spec"] == {"replicas": 2}


async def test_object_of_unexpected_shape_is_counted_and_skipped() -> None:
    cluster, bus = FakeCluster(), FakeBus()
    cluster.scripts["Deployment"] = [
        [
            WatchEvent(
                "ADDED", {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": 7}, ResourceVersion("")
            ),
            WatchEvent("ADDED", deployment("ok", 101), ResourceVersion("101")),
        ]
    ]
    cluster.scripts["Pod"] = [
        [
            WatchEvent(
                "ADDED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 5}}, ResourceVersion("")
            )
        ]
    ]
    metrics = Metrics()
    watcher = Watcher(CONFIG, cluster, bus, metrics, settings=FAST)
    await run_until(
        watcher,
        lambda: len(bus.events()) == 1 and metrics.value("malformed_objects_total", {"kind": "v1.Pod"}) == 1,
    )
    assert metrics.value("malformed_objects_total", {"kind": "apps/v1.Deployment"}) == 1
    assert bus.events()[0].key == "apps/Deployment/default/ok"


async def test_metrics_render_after_a_run() -> None:
    cluster, bus = FakeCluster(), FakeBus()
    cluster.objects["Deployment"] = [deployment("a", 90)]
    metrics = Metrics()
    watcher = Watcher(CONFIG, cluster, bus, metrics, settings=FAST)
    await run_until(watcher, lambda: watcher.ready)
    text = metrics.render()
    assert "kubetape_watch_streams_synced 2" in text
    assert 'kubetape_events_published_total{kind="apps/v1.Deployment",type="applied"} 1' in text
