"""Retention of the usage sub-store (pipeline.store.usage_retention), against a naive reference that keeps
every sample: after any sequence of recording rounds, sink flushes and retention passes at a rising
cutoff, every window starting at or after the cutoff exports the same load as from everything."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.usage_window import usage_window
from pipeline.model.keys import ObjectKey
from pipeline.model.usage import ContainerUsage, UsageSample
from pipeline.store.memory_store import MemorySegmentStore
from pipeline.store.segment_store import segment_name
from pipeline.store.usage_history import stored_usage
from pipeline.store.usage_retention import apply_usage_retention

T0 = 1_800_000_000_000
EVERY_MS = 15_000
# owner → its partition (two owners share one, as keys hash): a kept segment holds others' older samples
OWNERS = {
    ObjectKey("apps/Deployment/shop/web"): 0,
    ObjectKey("apps/Deployment/shop/api"): 0,
    ObjectKey("apps/Deployment/shop/db"): 1,
}
WHICH = [(owner, template) for owner in OWNERS for template in ("a", "b")]
# what one owner and template does in a round: run (with that much CPU), become unknown, end, or say
# nothing (often: an owner whose last word lies segments back is what retention must get right)
STEP = st.one_of(st.integers(1, 500), st.sampled_from(["gap", "ended", "silent", "silent", "silent"]))


def sample_of(ts: int, owner: ObjectKey, template: str, step: int | str) -> UsageSample | None:
    if step == "silent":
        return None
    if step == "gap":
        return UsageSample(ts, owner, template, 0, (), gap=True)
    if step == "ended":
        return UsageSample(ts, owner, template, 0, ())
    assert isinstance(step, int)
    return UsageSample(ts, owner, template, 2, (ContainerUsage("app", step, 1 << 20),))


class UsageRetention(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemorySegmentStore()
        self.everything: list[UsageSample] = []  # the naive reference: nothing ever removed
        self.open: dict[int, list[UsageSample]] = {0: [], 1: []}
        self.offsets = {0: 0, 1: 0}
        self.now = T0
        self.cutoff = T0

    @rule(steps=st.lists(STEP, min_size=len(WHICH), max_size=len(WHICH)))
    def record_a_round(self, steps: list[int | str]) -> None:
        self.now += EVERY_MS
        for (owner, template), step in zip(WHICH, steps, strict=True):
            sample = sample_of(self.now, owner, template, step)
            if sample is not None:
                self.open[OWNERS[owner]].append(sample)
                self.everything.append(sample)

    @rule(partition=st.sampled_from([0, 1]))
    def the_sink_flushes(self, partition: int) -> None:
        samples = self.open[partition]
        if not samples:
            return
        start, end = min(s.ts_ms for s in samples), max(s.ts_ms for s in samples) + 1
        segment = build_segment([], start_ms=start, end_ms=end, usage=usage_window(samples, start, end))
        self.store.put(segment_name(partition, self.offsets[partition]), encode_segment(segment))
        self.offsets[partition] += len(samples)
        self.open[partition] = []

    @rule(by_ms=st.integers(0, 4 * EVERY_MS))
    def retention_runs(self, by_ms: int) -> None:
        self.cutoff = min(self.cutoff + by_ms, self.now)
        apply_usage_retention(self.store, self.cutoff)

    @invariant()
    def windows_after_the_cutoff_export_what_everything_would(self) -> None:
        flushed = [s for s in self.everything if all(s not in o for o in self.open.values())]
        stored = stored_usage(self.store, 2 * self.now + 1)
        end = self.now + 1
        for start in sorted({self.cutoff, self.cutoff + EVERY_MS // 2, self.now}):
            if start > self.now:
                continue
            expected = usage_window(flushed, start, end)
            assert usage_window(stored, start, end) == expected, (start, self.cutoff)


TestUsageRetention = UsageRetention.TestCase
TestUsageRetention.settings = settings(max_examples=100, stateful_step_count=25, deadline=None)


def test_segments_before_the_cutoff_go_once_later_ones_hold_every_owners_load() -> None:
    store = MemorySegmentStore()
    web = ObjectKey("apps/Deployment/shop/web")
    for i in range(3):
        s = UsageSample(T0 + i * EVERY_MS, web, "a", 1, (ContainerUsage("app", 10 + i, 1),))
        store.put(
            segment_name(0, i),
            encode_segment(build_segment([], start_ms=s.ts_ms, end_ms=s.ts_ms + 1, usage=[s])),
        )
    assert apply_usage_retention(store, T0 + 3 * EVERY_MS) == [segment_name(0, 0), segment_name(0, 1)]
    assert [e.name for e in store.list()] == [segment_name(0, 2)]  # the load at the cutoff stays


def test_an_ended_loads_last_word_stays_while_an_older_word_of_it_stays() -> None:
    """web's load ended in the newer segment, but the older one stays for api's load: without web's end,
    the older segment's web sample would read as web's load at a window's start."""
    store = MemorySegmentStore()
    web, api = ObjectKey("apps/Deployment/shop/web"), ObjectKey("apps/Deployment/shop/api")
    older = [sample_of(T0, web, "a", 100), sample_of(T0, api, "a", 50)]
    ended = [sample_of(T0 + EVERY_MS, web, "a", "ended")]
    for offset, held in ((0, older), (2, ended)):
        samples = [s for s in held if s is not None]
        start, end = samples[0].ts_ms, samples[0].ts_ms + 1
        store.put(
            segment_name(0, offset),
            encode_segment(build_segment([], start_ms=start, end_ms=end, usage=samples)),
        )
    cutoff = T0 + 4 * EVERY_MS
    assert apply_usage_retention(store, cutoff) == []
    at_start = usage_window(stored_usage(store, cutoff + 1), cutoff, cutoff + 1)
    assert [(s.owner_key, s.cpu_millicores) for s in at_start] == [(api, 50)]
