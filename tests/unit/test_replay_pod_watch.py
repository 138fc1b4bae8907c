"""The sampler's pods from a watch: counts kept from pod events, a 410 Gone answered by a re-list, and a
replay whose samples never list its pods; a stateful test holds the kept counts to a plain recount."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pipeline.io.kube.types import ListResult, ResourceVersion, WatchEvent, WatchEventType
from pipeline.model.errors import GoneError, WatchBrokenError
from pipeline.replay.clock.sampler import WatchedPods
from pipeline.replay.clock.schedule import MonotonicClock
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.report.pod_tally import PodCounts, PodSample, PodTally, sample_of
from pipeline.replay.rewrite import RECORDED_OWNER_ANNOTATION
from tests.polling import eventually
from tests.unit.test_replay_replayer import KwokLikeCluster, applied, fast, pod, trace

OWNER = RECORDED_OWNER_ANNOTATION


def live_pod(name: str, owner: str | None, phase: str | None, node: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if owner is not None:
        meta["annotations"] = {OWNER: owner}
    return {
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase} if phase else {},
    }


class MemoryPodEvents:
    """An apiserver's pods and their watch in memory. :meth:`compact` forgets the history, as etcd
    compaction does: a watch from an older version is then answered 410 Gone, and so is a watch in
    progress (the apiserver ends a watcher that fell that far behind with an ERROR 410 event)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.log: list[WatchEvent] = []
        self.version = 0
        self.oldest = 0
        """Versions up to this one are compacted away."""
        self.lists = 0
        self._changed = asyncio.Condition()
        self.drop_next_watch = False

    async def change(self, event_type: WatchEventType, pod: dict[str, Any]) -> None:
        self.version += 1
        name = pod["metadata"]["name"]
        if event_type == "DELETED":
            del self.pods[name]
        else:
            self.pods[name] = pod
        self.log.append(WatchEvent(event_type, pod, ResourceVersion(str(self.version))))
        async with self._changed:
            self._changed.notify_all()

    async def compact(self) -> None:
        self.oldest = self.version
        async with self._changed:
            self._changed.notify_all()

    async def list_pods(self) -> ListResult:
        self.lists += 1
        return ListResult(list(self.pods.values()), ResourceVersion(str(self.version)))

    async def watch_pods(self, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        if self.drop_next_watch:
            self.drop_next_watch = False
            raise WatchBrokenError("watch of v1.Pod dropped (ClientPayloadError); will re-list")
        seen = int(since)
        while True:
            if seen < self.oldest:
                raise GoneError(f"watch of v1.Pod from resourceVersion {seen}: too old", status=410)
            for event in self.log[seen:]:
                seen = int(event.resource_version)
                yield event
            async with self._changed:
                await self._changed.wait_for(partial(self._moved_past, seen))

    def _moved_past(self, seen: int) -> bool:
        return self.version > seen or seen < self.oldest


async def _sample_until(source: WatchedPods, expected: PodSample) -> PodSample:
    return await eventually(
        source.sample, lambda s: s == expected, "the watched counts", timeout_s=5, interval_s=0.01
    )


async def test_counts_follow_the_watch_and_a_410_gone_lists_again() -> None:
    events = MemoryPodEvents()
    await events.change("ADDED", live_pod("a1", "web", "Running", "n1"))
    source = WatchedPods(events, MonotonicClock(), retry_s=0.01)
    await source.start()
    try:
        assert await source.sample() == PodSample(1, 1, {"web": PodCounts(running=1)})
        await events.change("ADDED", live_pod("a2", "web", None))
        await events.change("MODIFIED", live_pod("a2", "web", "Pending", "n2"))
        await events.change("ADDED", live_pod("bare", None, "Running", "n2"))
        await _sample_until(source, PodSample(2, 2, {"web": PodCounts(running=1, bound=1)}))

        # history compacted while changes go on: the watch is answered 410, the counts come from a new list
        await events.change("DELETED", live_pod("a1", "web", "Running", "n1"))
        await events.compact()
        await events.change("MODIFIED", live_pod("a2", "web", "Running", "n2"))
        await _sample_until(source, PodSample(2, 1, {"web": PodCounts(running=1)}))
        assert source.lists == events.lists == 2

        # a dropped stream resumes from the last version seen, without a list
        events.drop_next_watch = True
        await events.compact()  # ends the watch in progress; its retry is the dropped one
        await events.change("ADDED", live_pod("a3", "web", "Pending"))
        await _sample_until(source, PodSample(2, 1, {"web": PodCounts(running=1, unscheduled=1)}))
    finally:
        await source.stop()


async def test_a_sample_waits_for_the_first_list() -> None:
    events = MemoryPodEvents()
    await events.change("ADDED", live_pod("a1", "web", "Running", "n1"))
    source = WatchedPods(events, MonotonicClock())
    await source.start()
    try:
        # no sleep between start and sample: an empty count here would be a wrong sample, not a slow one
        assert (await source.sample()).by_owner == {"web": PodCounts(running=1)}
    finally:
        await source.stop()


class WatchedKwokCluster(KwokLikeCluster):
    """Pods run as soon as they are applied, and every pod change reaches a watch; listing pods is
    counted, since a sample must not need it."""

    def __init__(self) -> None:
        super().__init__()
        self.events = MemoryPodEvents()
        self.pod_lists = 0

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        live = await super().apply(obj, force=force)
        if obj["kind"] == "Pod":
            await self.events.change("ADDED", live)
        return live

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]:
        self.pod_lists += kind == "Pod"
        return await super().list_objects(
            api_version, kind, label_selector=label_selector, namespace=namespace
        )


async def test_a_replay_with_a_pod_watch_samples_without_listing_its_pods() -> None:
    cluster = WatchedKwokCluster()
    labels: list[tuple[str, str]] = []

    def watch(label: str, value: str) -> MemoryPodEvents:
        labels.append((label, value))
        return cluster.events

    events = [applied(0, pod("a")), applied(100, pod("b"))]
    replayer = Replayer(cluster, plan_replay(trace(events), speed=1000), fast(keep=True), pod_watch=watch)
    report = await replayer.run()
    assert report.failed == 0
    assert labels == [("kubetape.dev/replay", "t1")]
    assert cluster.pod_lists == 0, "each sample must read the watched counts, not list the pods"
    assert cluster.events.lists == 1
    # both Running; on no node, since the rewrite leaves scheduling to the simulated scheduler
    assert report.replay_timeline[-1][1:] == (2, 0), report.replay_timeline
    assert report.owner_samples[-1].running == {"core/Pod/prod/a": 1, "core/Pod/prod/b": 1}


# ---- the kept counts against a recount ------------------------------------------------------------
NAMES = st.sampled_from(["p0", "p1", "p2", "p3", "p4"])
OWNERS = st.sampled_from(["web", "api", None])
PHASES = st.sampled_from([None, "Pending", "Running", "Succeeded", "Failed"])
NODES = st.sampled_from([None, "n1", "n2"])


@settings(max_examples=150, stateful_step_count=40, deadline=None)
class TallyAgainstRecount(RuleBasedStateMachine):
    """Any interleaving of pod events (and re-lists) keeps the same counts as counting the live pods."""

    def __init__(self) -> None:
        super().__init__()
        self.tally = PodTally(OWNER)
        self.live: dict[str, dict[str, Any]] = {}

    @rule(name=NAMES, owner=OWNERS, phase=PHASES, node=NODES, deleting=st.booleans())
    def upsert(
        self, name: str, owner: str | None, phase: str | None, node: str | None, deleting: bool
    ) -> None:
        body = live_pod(name, owner, phase, node)
        if deleting:
            body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.tally.observe("MODIFIED" if name in self.live else "ADDED", body)
        self.live[name] = body

    @rule(name=NAMES)
    def delete(self, name: str) -> None:
        if name in self.live:
            self.tally.observe("DELETED", self.live.pop(name))

    @rule()
    def relist(self) -> None:
        self.tally.reset(list(self.live.values()))

    @invariant()
    def counts_equal_a_recount(self) -> None:
        assert self.tally.sample() == sample_of(self.live.values(), OWNER)


TestTallyAgainstRecount = TallyAgainstRecount.TestCase


@pytest.mark.parametrize("deleting", [False, True])
def test_a_pod_being_deleted_counts_nowhere(deleting: bool) -> None:
    body = live_pod("p", "web", "Running", "n1")
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    expected = PodSample(0, 0, {}) if deleting else PodSample(1, 1, {"web": PodCounts(running=1)})
    assert sample_of([body], OWNER) == expected
