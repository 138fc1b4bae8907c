"""Recording the load (pipeline.watch.usage): PodMetrics attributed to the owner the shaper publishes a pod's
lifecycle under and to its pod-template hash, summed exactly, published on kubetape.usage; and the bad
input: the Metrics API down or not served, negative or absurd values, unknown pods, owners no longer
reported. The shaper sees real pod objects (its own owner resolution through a ReplicaSet)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from decimal import Decimal
from typing import Any

import pytest

from pipeline.formats.wire.usage import USAGE_MAX_BYTES, decode_usage, encode_usage
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.settings import USAGE_TOPIC
from pipeline.io.kube.types import ApiResource, ListPage, ResourceVersion, WatchEvent
from pipeline.io.metrics import Metrics
from pipeline.model.errors import ApiUnavailableError, FormatError, NotFoundError, UnknownVersionError
from pipeline.model.keys import GroupVersionKind, ObjectKey
from pipeline.model.quantity import cpu_millicores, memory_bytes, parse_quantity
from pipeline.model.tracer_config import TracerConfig
from pipeline.model.usage import ContainerUsage, UsageSample
from pipeline.replay.hpa.load import OwnerLoad, RecordedLoad
from pipeline.watch.shaper import Shaper
from pipeline.watch.usage import UsageSampler, UsageSettings

CONFIG = TracerConfig.from_mapping(
    {
        "trackedObjects": {"apps/v1.Deployment": {"trackLifecycle": True}},
        "namespaces": {"deny": ["kube-system"]},
    },
    "test",
)
WEB = ObjectKey("apps/Deployment/shop/web")
T0 = 1_700_000_000_000


class OwnersCluster:
    """Serves the ReplicaSets between pods and their Deployment."""

    async def resolve(self, gvk: GroupVersionKind) -> ApiResource | None:
        return ApiResource(gvk.api_version, gvk.kind, gvk.kind.lower() + "s", True)

    def list_pages(self, res: ApiResource) -> AsyncIterator[ListPage]:
        raise AssertionError("the sampler never lists through the watch port")

    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        if res.kind != "ReplicaSet":
            return None
        owner = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "web",
            "uid": "d1",
            "controller": True,
        }
        return {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"rs-{name}",
                "ownerReferences": [owner],
            },
        }

    def watch_objects(self, res: ApiResource, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        raise AssertionError("never watches")


class Source:
    """PodMetrics answers in order; an exception is raised instead of answering."""

    def __init__(self) -> None:
        self.answers: list[list[dict[str, Any]] | Exception] = []

    async def pod_metrics(self) -> list[dict[str, Any]]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Bus:
    def __init__(self) -> None:
        self.units: list[list[Record]] = []

    async def submit(self, unit: Sequence[Record]) -> None:
        self.units.append(list(unit))


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "d1", "resourceVersion": "1"},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "a:1"}]}}},
    }


def pod(name: str, template: str, *, namespace: str = "shop") -> dict[str, Any]:
    rs = f"web-{template}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"u-{name}",
            "resourceVersion": "2",
            "labels": {"app": "web", "pod-template-hash": template},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": rs,
                    "uid": f"u-{rs}",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "app", "image": "a:1"}, {"name": "side", "image": "s:1"}]},
        "status": {
            "containerStatuses": [
                {"name": "app", "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}
            ]
        },
    }


def metrics_of(
    name: str, template: str, cpu: str, memory: str = "64Mi", *, namespace: str = "shop"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"pod-template-hash": template}},
        "timestamp": "2024-01-01T00:01:00Z",
        "window": "15s",
        "containers": [
            {"name": "app", "usage": {"cpu": cpu, "memory": memory}},
            {"name": "side", "usage": {"cpu": "1m", "memory": "1Mi"}},
        ],
    }


async def shaped(*pods: dict[str, Any]) -> Shaper:
    shaper = Shaper(CONFIG, OwnersCluster())
    shaper.observe_object("ADDED", deployment(), T0)
    for p in pods:
        await shaper.observe_pod("ADDED", p, T0)
    return shaper


def sampler(shaper: Shaper, source: Source, bus: Bus, metrics: Metrics) -> UsageSampler:
    clock = iter(range(T0 + 15_000, T0 + 10_000_000, 15_000))
    return UsageSampler(shaper, source, bus, metrics, lambda: next(clock))


def published(bus: Bus) -> list[UsageSample]:
    out = []
    for unit in bus.units:
        for r in unit:
            assert r.topic == USAGE_TOPIC
            assert r.value is not None
            sample = decode_usage(r.value, "test")
            assert r.key == sample.owner_key
            assert r.ts_ms == sample.ts_ms
            out.append(sample)
    return out


# ---- quantities and the wire --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "millicores"),
    [("180m", 180), ("180012345n", 180), ("1", 1000), ("1.5", 1500), ("2500u", 2), ("1e3", 1_000_000)],
)
def test_cpu_quantities_read_exactly_and_round_once(text: str, millicores: int) -> None:
    assert cpu_millicores(parse_quantity(text)) == millicores


def test_memory_quantities_and_malformed_ones() -> None:
    assert memory_bytes(parse_quantity("64Mi")) == 64 * 2**20
    assert memory_bytes(parse_quantity("65536Ki")) == 64 * 2**20
    assert memory_bytes(parse_quantity("1G")) == 10**9
    for bad in ["", "12Q", "m", "1..2", "9" * 100, 12, None]:
        with pytest.raises(FormatError):
            parse_quantity(bad)
    assert parse_quantity("-5m") == Decimal("-0.005")  # parses; the sampler rejects negatives


def test_a_sample_round_trips_on_the_wire_and_bad_bytes_are_refused() -> None:
    sample = UsageSample(T0, WEB, "abc", 2, (ContainerUsage("app", 360, 2**27),))
    assert decode_usage(encode_usage(sample), "t") == sample
    gap = UsageSample(T0, WEB, "abc", 0, (), gap=True)
    assert decode_usage(encode_usage(gap), "t") == gap
    with pytest.raises(FormatError, match="exceeds"):
        decode_usage(b"\x80" * (USAGE_MAX_BYTES + 1), "t")
    with pytest.raises(FormatError, match="not msgpack"):
        decode_usage(b"\xc1", "t")
    with pytest.raises(UnknownVersionError, match="upgrade"):
        decode_usage(encode_usage(sample).replace(b"\xa1v\x01", b"\xa1v\x07"), "t")


# ---- attribution and sums -----------------------------------------------------------------------------
async def test_pods_are_summed_per_owner_and_template_hash_per_container() -> None:
    shaper = await shaped(pod("web-a-1", "a"), pod("web-a-2", "a"), pod("web-b-1", "b"))
    source, bus, metrics = Source(), Bus(), Metrics()
    source.answers = [
        [
            metrics_of("web-a-1", "a", "180012345n", "65536Ki"),
            metrics_of("web-a-2", "a", "179987655n", "64Mi"),
            metrics_of("web-b-1", "b", "50m"),
        ]
    ]
    samples = await sampler(shaper, source, bus, metrics).sample_once()
    by_hash = {s.template_hash: s for s in published(bus)}
    assert by_hash == {s.template_hash: s for s in samples}
    assert set(by_hash) == {"a", "b"}
    a = by_hash["a"]
    assert (a.owner_key, a.pods, a.gap) == (WEB, 2, False)
    # summed exactly in nanocores, rounded once: 180.012345m + 179.987655m = 360m
    assert a.containers == (ContainerUsage("app", 360, 2 * 64 * 2**20), ContainerUsage("side", 2, 2 * 2**20))
    assert a.per_pod()["app"] == (180.0, 64 * 2**20)
    assert by_hash["b"].pods == 1
    assert by_hash["b"].cpu_millicores == 51
    assert metrics.value("usage_samples_published_total", {"gap": "false"}) == 2


async def test_pods_of_no_tracked_owner_filtered_or_unknown_are_skipped_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bare = pod("bare", "x")
    del bare["metadata"]["ownerReferences"]
    shaper = await shaped(pod("web-a-1", "a"), bare)
    source, bus, metrics = Source(), Bus(), Metrics()
    round_ = [
        metrics_of("web-a-1", "a", "100m"),
        metrics_of("bare", "x", "5m"),  # a bare pod: Pods are not tracked in this config
        metrics_of("dns", "x", "5m", namespace="kube-system"),  # filtered by the tracer config
        metrics_of("stranger", "x", "5m"),  # never seen by the watcher
    ]
    source.answers = [round_, round_]
    s = sampler(shaper, source, bus, metrics)
    with caplog.at_level(logging.WARNING, "kubetape.watcher.usage"):
        await s.sample_once()
        await s.sample_once()
    assert [(x.owner_key, x.pods) for x in published(bus)] == [(WEB, 1), (WEB, 1)]
    assert metrics.value("usage_pods_skipped_total", {"reason": "unknown pod"}) == 2
    assert metrics.value("usage_pods_skipped_total", {"reason": "filtered"}) == 2
    assert metrics.value("usage_pods_skipped_total", {"reason": "no tracked owner"}) == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings  # once per pod
    assert "core/Pod/shop/stranger" in warnings[0]


# ---- bad input ------------------------------------------------------------------------------------------
async def test_an_api_outage_is_one_warning_one_gap_per_owner_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shaper = await shaped(pod("web-a-1", "a"))
    source, bus, metrics = Source(), Bus(), Metrics()
    ok = [metrics_of("web-a-1", "a", "100m")]
    source.answers = [
        ok,
        ApiUnavailableError("503 service unavailable", status=503),
        NotFoundError("the server could not find the requested resource", status=404),
        ok,
    ]
    s = sampler(shaper, source, bus, metrics)
    with caplog.at_level(logging.INFO, "kubetape.watcher.usage"):
        for _ in range(4):
            await s.sample_once()
    kinds = [(x.gap, x.pods) for x in published(bus)]
    assert kinds == [(False, 1), (True, 0), (False, 1)]  # one gap for the whole outage
    assert metrics.value("usage_api_errors_total", {"error": "ApiUnavailableError"}) == 1
    assert metrics.value("usage_api_errors_total", {"error": "NotFoundError"}) == 1
    assert metrics.value("usage_api_up") == 1
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert "metrics-server" in lines[0][1]
    assert "gap for 1 owners" in lines[0][1]


async def test_an_api_never_served_publishes_nothing_and_stops_nothing() -> None:
    shaper = await shaped(pod("web-a-1", "a"))
    source, bus, metrics = Source(), Bus(), Metrics()
    source.answers = [NotFoundError("404", status=404)] * 3
    s = sampler(shaper, source, bus, metrics)
    for _ in range(3):
        assert await s.sample_once() == []
    assert bus.units == []
    assert metrics.value("usage_api_up") == 0


@pytest.mark.parametrize(
    ("cpu", "why"),
    [("-5m", "negative"), ("200000000", "absurd"), ("lots", "not a Kubernetes quantity")],
)
async def test_a_bad_value_gaps_its_owner_only_and_is_warned_once_per_streak(
    cpu: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    shaper = await shaped(pod("web-a-1", "a"), pod("web-b-1", "b"))
    source, bus, metrics = Source(), Bus(), Metrics()
    good = [metrics_of("web-a-1", "a", "100m"), metrics_of("web-b-1", "b", "100m")]
    bad = [metrics_of("web-a-1", "a", cpu), metrics_of("web-b-1", "b", "100m")]
    source.answers = [good, bad, bad, good]
    s = sampler(shaper, source, bus, metrics)
    with caplog.at_level(logging.WARNING, "kubetape.watcher.usage"):
        for _ in range(4):
            await s.sample_once()
    a = [(x.gap, x.cpu_millicores) for x in published(bus) if x.template_hash == "a"]
    b = [(x.gap, x.cpu_millicores) for x in published(bus) if x.template_hash == "b"]
    assert a == [(False, 101), (True, 0), (False, 101)]  # one gap for the streak, then valid again
    assert b == [(False, 101)] * 4
    assert metrics.value("usage_rejected_total") == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert WEB in warnings[0]
    assert why in warnings[0]


async def test_quantities_beyond_kubernetes_cap_gap_their_owners_and_the_round_is_published(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A CPU of ``1e1000000`` overflows a sum, a memory of ``1e999999`` makes an integer no message can
    print: each is set aside with its pod, owner and value named, and the valid owner's sample goes out
    in the same round."""
    shaper = await shaped(pod("web-a-1", "a"), pod("web-b-1", "b"), pod("web-c-1", "c"))
    source, bus, metrics = Source(), Bus(), Metrics()
    source.answers = [
        [
            metrics_of("web-a-1", "a", "1e1000000"),
            metrics_of("web-b-1", "b", "100m", memory="1e999999"),
            metrics_of("web-c-1", "c", "100m"),
        ]
    ]
    with caplog.at_level(logging.WARNING, "kubetape.watcher.usage"):
        await sampler(shaper, source, bus, metrics).sample_once()
    got = {x.template_hash: (x.gap, x.pods, x.cpu_millicores) for x in published(bus)}
    assert got == {"a": (True, 0, 0), "b": (True, 0, 0), "c": (False, 1, 101)}
    assert metrics.value("usage_rejected_total") == 2
    warnings = sorted(r.getMessage() for r in caplog.records)
    assert len(warnings) == 2, warnings
    for warning, pod_name, value in zip(
        warnings,
        ["web-a-1", "web-b-1"],
        ["cpu quantity '1e1000000'", "memory quantity '1e999999'"],
        strict=True,
    ):
        assert WEB in warning
        assert f"core/Pod/shop/{pod_name}" in warning
        assert value in warning
        assert len(warning) < 400, warning


async def test_owners_no_longer_reported_gap_while_their_pods_run_and_end_when_they_are_gone() -> None:
    shaper = await shaped(pod("web-a-1", "a"), pod("web-b-1", "b"))
    source, bus, metrics = Source(), Bus(), Metrics()
    both = [metrics_of("web-a-1", "a", "100m"), metrics_of("web-b-1", "b", "100m")]
    source.answers = [both, [], []]
    s = sampler(shaper, source, bus, metrics)
    await s.sample_once()
    shaper.pod_gone(ObjectKey("core/Pod/shop/web-b-1"), T0 + 20_000)  # b's pod is deleted: a rollout finished
    await s.sample_once()
    await s.sample_once()
    got = [(x.template_hash, x.gap, x.pods) for x in published(bus)]
    assert got == [("a", False, 1), ("b", False, 1), ("a", True, 0), ("b", False, 0)]
    assert s.recorded == {(WEB, "a"): True}


async def test_the_loop_waits_for_the_watch_then_samples_at_its_interval() -> None:
    shaper = await shaped(pod("web-a-1", "a"))
    source, bus, metrics = Source(), Bus(), Metrics()
    source.answers = [[metrics_of("web-a-1", "a", "100m")]] * 1000
    ready = asyncio.Event()
    s = UsageSampler(
        shaper, source, bus, metrics, lambda: T0, settings=UsageSettings(every_s=0.01), ready=ready.is_set
    )
    task = asyncio.create_task(s.run())
    try:
        await asyncio.sleep(0.05)
        assert bus.units == []  # not before the watch streams have synced
        ready.set()
        for _ in range(500):
            if len(bus.units) >= 3:
                break
            await asyncio.sleep(0.01)
        assert len(bus.units) >= 3, bus.units
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_pod_restored_after_a_restart_takes_its_template_hash_from_its_metrics() -> None:
    shaper = await shaped(pod("web-a-1", "a"))
    shaper.pods[ObjectKey("core/Pod/shop/web-a-1")].template_hash = ""  # as restored: no labels kept
    source, bus, metrics = Source(), Bus(), Metrics()
    source.answers = [[metrics_of("web-a-1", "a", "100m")], []]
    s = sampler(shaper, source, bus, metrics)
    await s.sample_once()
    await s.sample_once()  # still running, no longer reported: a gap, not an end
    assert [(x.template_hash, x.gap, x.pods) for x in published(bus)] == [("a", False, 1), ("a", True, 0)]


# ---- the watcher's own outage ---------------------------------------------------------------------------
async def test_a_stopping_watcher_gaps_every_loaded_owner_and_a_resumed_one_marks_the_outage() -> None:
    """Stop, then a new run resuming the recording: the load is unknown from the stop to the first sample
    of the new run, and a replay holds the last load across it (counted in its report), as for any gap."""
    shaper = await shaped(pod("web-a-1", "a"))
    web = ObjectKey("apps/Deployment/shop/web")
    bus, metrics = Bus(), Metrics()
    first_source = Source()
    first_source.answers = [[metrics_of("web-a-1", "a", "100m")]]
    first = sampler(shaper, first_source, bus, metrics)
    await first.sample_once()  # at T0 + 15 s
    await first.stopping()  # at T0 + 30 s
    await first.stopping()  # a second stop adds nothing
    second_source = Source()
    second_source.answers = [NotFoundError("404", status=404), [metrics_of("web-a-1", "a", "300m")]]
    clock = iter([T0 + 600_000, T0 + 615_000])
    second = UsageSampler(shaper, second_source, bus, metrics, lambda: next(clock))
    second.resumed(T0 + 590_000)  # the new run started (restored the earlier one's state) here
    await second.sample_once()  # the API does not answer yet: nothing known to gap in this run
    await second.sample_once()
    recorded = [(x.ts_ms - T0, x.gap, x.cpu_millicores) for x in published(bus)]
    assert recorded == [(15_000, False, 101), (30_000, True, 0), (590_000, True, 0), (615_000, False, 301)]
    load = RecordedLoad.from_samples(published(bus), [web])
    assert load.at(web, T0 + 300_000) == OwnerLoad(T0 + 30_000, 1, 101, 65 << 20, held_over_gap=True)
    assert load.at(web, T0 + 615_000) == OwnerLoad(T0 + 615_000, 1, 301, 65 << 20)
    assert load.gaps[web] == 2


async def test_a_fresh_recording_starts_without_a_resume_gap() -> None:
    shaper = await shaped(pod("web-a-1", "a"))
    source, bus, metrics = Source(), Bus(), Metrics()
    source.answers = [[metrics_of("web-a-1", "a", "100m")]]
    await sampler(shaper, source, bus, metrics).sample_once()
    assert [x.gap for x in published(bus)] == [False]


async def test_a_bus_that_takes_nothing_does_not_hold_the_stop_up(caplog: pytest.LogCaptureFixture) -> None:
    class FullBus(Bus):
        async def submit(self, unit: Sequence[Record]) -> None:
            await asyncio.Event().wait()  # Kafka down, its queue full: never returns

    shaper = await shaped(pod("web-a-1", "a"))
    source, bus, metrics = Source(), FullBus(), Metrics()
    s = sampler(shaper, source, Bus(), metrics)
    source.answers = [[metrics_of("web-a-1", "a", "100m")]]
    await s.sample_once()
    s._bus = bus
    with caplog.at_level(logging.WARNING, "kubetape.watcher.usage"):
        assert await s.stopping(timeout_s=0.01) == []
    assert "stop were not published (TimeoutError)" in caplog.text
