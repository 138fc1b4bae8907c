"""The sink service: the consumer loop, the HTTP surface (health, metrics, ``POST /export``) and retention,
started together and shut down in order on SIGTERM (stop intake, flush open segments, commit, leave the
group, stop HTTP).

``/readyz`` answers 503 while the segment store does not answer (an object store's server down, a
volume gone): a probe checks it every ``store_check_s``; and while the brokers deny the sink's principal
its topic or group (an ACL removed while it runs: see :mod:`pipeline.io.kafka.access`). Writes meanwhile
retry (the S3 store rides out a restart of its server) and the offsets wait for them, so an outage delays
segments, never loses them."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.formats.simkube import SIMKUBE_TRACE_VERSION, check_writable_version
from pipeline.formats.wire import native
from pipeline.io.http import HttpSettings, bound_port, create_app, start_http
from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.reads import latest_clusters
from pipeline.io.kafka.settings import DEADLETTER_TOPIC, DEFAULT_SINK_GROUP, USAGE_TOPIC, KafkaSettings
from pipeline.io.kafka.sink_member import KafkaSinkSource
from pipeline.io.kafka.topics import check_topics
from pipeline.io.metrics import Metrics
from pipeline.io.sink_http import ExportFn, ExportReply, add_export_route
from pipeline.model.errors import ConfigError, KubetapeError, TransientError
from pipeline.model.keys import ClusterId
from pipeline.sink.settings import SinkSettings
from pipeline.sink.sink import Sink
from pipeline.sink.usage_member import UsageTopic, usage_stored
from pipeline.sink.usage_sink import USAGE_GROUP_SUFFIX, UsageSink
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportFormat, ExportRequest, ExportResult, export_window, filters_from_json
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.retention import apply_retention
from pipeline.store.segment_store import SegmentStore
from pipeline.store.store_url import StoreLocation, cluster_store_location, open_segment_store
from pipeline.store.usage_history import open_usage_store, usage_store_location
from pipeline.store.usage_retention import apply_usage_retention

log = logging.getLogger("kubetape.sink")


@dataclass(frozen=True, slots=True)
class SinkServiceSettings:
    """Everything ``kubetape sink`` needs. ``partitions``: created with this many partitions if the
    events topic does not exist yet; ``retention_s``: delete segments older than this (None: keep all);
    ``shutdown_timeout_s``: how long SIGTERM waits for the final flush before cancelling;
    ``store_check_s``: how often readiness checks that the segment store answers; ``store_retry_s``: how
    long a write waits for an object store that does not answer before the sink stops. ``cluster``: the
    one cluster of a fleet this sink records, in its sub-store of ``segment_store``
    (:func:`~pipeline.store.store_url.cluster_store_location`); None: the topic's only cluster, and a message
    of another one stops the sink naming it (see :class:`~pipeline.sink.sink.Sink`)."""

    kafka: KafkaSettings
    segment_store: StoreLocation
    sink: SinkSettings = field(default_factory=SinkSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    group_id: str = DEFAULT_SINK_GROUP
    deadletter_topic: str = DEADLETTER_TOPIC
    partitions: int = 6
    retention_s: float | None = None
    create_topics: bool = True
    """False (``--topics check``, production): a missing topic stops the start instead of being created."""
    retention_check_s: float = 60.0
    shutdown_timeout_s: float = 30.0
    store_check_s: float = 5.0
    store_retry_s: float = 120.0
    cluster: ClusterId | None = None
    usage_topic: str | None = USAGE_TOPIC
    """The recorded load's topic, stored in the ``usage/`` sub-store (:mod:`pipeline.sink.usage_sink`),
    created like the events topic or waited for, whichever starts first (:mod:`pipeline.sink.usage_member`);
    None: the load is not stored."""
    usage_flush_s: float = 60.0
    """How long usage samples gather before they are written as a segment (and committed)."""


NO_NATIVE_HINT = (
    "kubetape was installed without its C extension (no C compiler?): the sink checks messages in "
    "Python, several times slower; install gcc and reinstall kubetape (pip install -e .)"
)


def tune_gc_for_throughput() -> None:
    """Collect garbage less often. The sink keeps every live object's latest event in memory and
    allocates a few dicts per message; with CPython's default thresholds the cyclic collector rescans
    that state so often that it costs more than decoding (measured: 17 µs vs 40-85 µs per event)."""
    gc.set_threshold(100_000, 50, 100)
    gc.freeze()


async def _only_cluster(
    kafka: KafkaSettings,
    topic: str,
    stop: asyncio.Event | None = None,
    poll_s: float = 1.0,
    on_wait: Callable[[], Awaitable[None]] | None = None,
) -> ClusterId | None:
    """The cluster a sink records when nobody named one: the topic's only cluster, told by the last record
    of each partition. Several: ConfigError naming them. An empty topic tells nothing yet (a sink started
    before its watcher, the natural order): wait for the first record, whatever the order of starts;
    None when ``stop`` is set first. ``on_wait`` runs once when the waiting begins."""
    waited = False
    while not (met := sorted(await latest_clusters(kafka, topic))):
        if not waited:
            log.info(
                "topic is empty: waiting for its first record to learn the cluster (or pass --cluster)",
                extra={"ctx": {"topic": topic}},
            )
            waited = True
            if on_wait is not None:
                await on_wait()
        if stop is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), poll_s)
            if stop.is_set():
                return None
        else:
            await asyncio.sleep(poll_s)
    if len(met) > 1:
        raise ConfigError(
            f"topic {topic} holds records of several clusters ({', '.join(met)}): a fleet shares it; a sink "
            "records one cluster: start one sink per cluster with --cluster ID ($KUBETAPE_CLUSTER_ID)"
        )
    return ClusterId(met[0])


async def _prepare_topics(settings: SinkServiceSettings, topic: str) -> None:
    """Create the events and dead-letter topics if missing, or (``--topics check``) refuse without them."""
    if settings.create_topics:
        await ensure_topic(settings.kafka, topic, settings.partitions)
        await ensure_topic(settings.kafka, settings.deadletter_topic, 1)
    else:
        await check_topics(settings.kafka, [topic, settings.deadletter_topic])


async def _learn_cluster(settings: SinkServiceSettings, topic: str, stop: asyncio.Event) -> ClusterId | None:
    """The topic's only cluster; while an empty topic is waited on, /healthz answers (a liveness probe
    must not restart a sink that waits for its watcher) and /readyz says 503."""
    waiting: list[Any] = []  # the interim server's runner

    async def serve_while_waiting() -> None:
        waiting.append(await start_http(create_app(Metrics(), lambda: False), settings.http))

    try:
        return await _only_cluster(settings.kafka, topic, stop, on_wait=serve_while_waiting)
    finally:
        for runner in waiting:
            await runner.cleanup()


async def run_sink_service(settings: SinkServiceSettings, stop: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or ``stop`` is set)."""
    stop = stop or asyncio.Event()
    tune_gc_for_throughput()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    topic = settings.sink.compaction.topic
    await _prepare_topics(settings, topic)
    if settings.cluster is None:
        # the store's root answers before any wait for the topic's first record: a missing bucket or
        # wrong credentials fail the start at once, not once the watcher has written
        await StoreHealth(open_segment_store(settings.segment_store, retry_s=settings.store_retry_s)).probe()
    cluster = settings.cluster or await _learn_cluster(settings, topic, stop)
    if cluster is None:
        return  # stopped before the topic's first record
    location = cluster_store_location(settings.segment_store, cluster)
    store = open_segment_store(location, retry_s=settings.store_retry_s)
    store_health = StoreHealth(store)
    await store_health.probe()  # a missing bucket or wrong credentials fail the start, with the reason
    _remove_stale_temp_files(store)
    metrics = Metrics()
    ready = asyncio.Event()
    source = KafkaSinkSource(
        settings.kafka, topic, group_id=settings.group_id, deadletter_topic=settings.deadletter_topic
    )
    # a cluster nobody named is the topic's only one: a message of another stops the sink
    sink = Sink(
        source,
        store,
        settings.sink,
        metrics,
        cluster=cluster,
        skip_other_clusters=settings.cluster is not None,
    )
    log.info(
        "ingest path",
        extra={"ctx": {"native": native.NATIVE, "hint": "" if native.NATIVE else NO_NATIVE_HINT}},
    )
    source.on_assigned = sink.on_assigned
    source.on_revoked = sink.on_revoked
    usage_store = _usage_store(settings, location)
    # not ready while the store does not answer or the brokers deny this member (logged once each)
    app = create_app(metrics, lambda: ready.is_set() and store_health.ok and source.access.ok)
    add_export_route(app, _exporter(store, usage_store), settings.http.token)
    runner = await start_http(app, settings.http)
    log.info(
        "sink started",
        extra={
            "ctx": {
                "http_port": bound_port(runner),
                "segment_store": str(location),
                "cluster": cluster,
                "topic": topic,
            }
        },
    )
    health = asyncio.create_task(store_health.run(settings.store_check_s, stop), name="sink-store-health")
    retention = None
    if settings.retention_s is not None:
        retention = asyncio.create_task(
            # the recorded load goes with the events' retention, from the usage sub-store even when this
            # run stores no usage (a store filled earlier keeps its usage/)
            _retention_loop(SegmentCatalog(store), usage_store, settings, metrics, stop),
            name="sink-retention",
        )
    try:
        async with source, _storing_usage(settings, cluster, usage_store, metrics, stop):
            ready.set()
            await _run_until_stopped(sink, stop, settings.shutdown_timeout_s)
            log.info("sink stopped: open segments flushed and committed")
    finally:
        ready.clear()
        health.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await health
        if retention is not None:
            retention.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await retention
        await runner.cleanup()
        sink.close()


def _remove_stale_temp_files(store: SegmentStore) -> None:
    if isinstance(store, LocalSegmentStore) and (removed := store.remove_stale_temp_files()):
        log.info("removed temp files of interrupted writes", extra={"ctx": {"count": removed}})


def _usage_store(settings: SinkServiceSettings, location: StoreLocation) -> SegmentStore | None:
    """The load's sub-store: written once its topic is there (now or later), read by exports meanwhile;
    without a usage topic, what an earlier run stored (None: nothing)."""
    if settings.usage_topic is None:
        return open_usage_store(location, for_reading=True)
    return open_segment_store(usage_store_location(location), retry_s=settings.store_retry_s)


def _storing_usage(
    settings: SinkServiceSettings,
    cluster: ClusterId,
    store: SegmentStore | None,
    metrics: Metrics,
    stop: asyncio.Event,
) -> contextlib.AbstractAsyncContextManager[None]:
    """The recorded load stored beside the events (see :mod:`pipeline.sink.usage_member`)."""
    member = _usage_member(settings, cluster, store, metrics)
    return usage_stored(_usage_topic(settings), member, stop, settings.shutdown_timeout_s)


def _usage_topic(settings: SinkServiceSettings) -> UsageTopic | None:
    """The usage topic, created as the events topic is (``--topics create``) or only waited for."""
    if settings.usage_topic is None:
        return None
    return UsageTopic(settings.kafka, settings.usage_topic, settings.partitions, settings.create_topics)


def _usage_member(
    settings: SinkServiceSettings, cluster: ClusterId, store: SegmentStore | None, metrics: Metrics
) -> Callable[[], tuple[KafkaSinkSource, UsageSink]]:
    """Makes the usage topic's consumer and loop, writing to ``store`` (the ``usage/`` sub-store)."""

    def member() -> tuple[KafkaSinkSource, UsageSink]:
        # made only for a usage topic, whose sub-store is open for writing
        assert settings.usage_topic is not None
        assert store is not None
        source = KafkaSinkSource(
            settings.kafka,
            settings.usage_topic,
            group_id=settings.group_id + USAGE_GROUP_SUFFIX,
            deadletter_topic=settings.deadletter_topic,
            what="the sink's usage consumer",
        )
        usage = UsageSink(source, store, metrics, cluster=cluster, flush_every_s=settings.usage_flush_s)
        source.on_assigned = usage.on_assigned
        source.on_revoked = usage.on_revoked
        return source, usage

    return member


class StoreHealth:
    """Whether the segment store answered its last check (``ok``), logged when that changes."""

    def __init__(self, store: SegmentStore) -> None:
        self.store = store
        self.ok = True

    async def probe(self) -> None:
        """Check once; a ConfigError (no bucket, wrong credentials) is raised, an outage recorded."""
        try:
            await asyncio.to_thread(self.store.check)
        except ConfigError:
            raise
        except (KubetapeError, OSError) as exc:
            if self.ok:
                log.error("segment store unreachable: not ready", extra={"ctx": {"error": str(exc)}})
            self.ok = False
            return
        if not self.ok:
            log.info("segment store reachable again: ready")
        self.ok = True

    async def run(self, every_s: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            try:
                await self.probe()
            except ConfigError as exc:  # credentials revoked, bucket deleted: an outage too
                if self.ok:
                    log.error("segment store refused access: not ready", extra={"ctx": {"error": str(exc)}})
                self.ok = False


async def _run_until_stopped(sink: Sink, stop: asyncio.Event, drain_timeout_s: float) -> None:
    """Run the loop; once ``stop`` is set, give the final flush and commit ``drain_timeout_s`` seconds."""
    loop_task = asyncio.create_task(sink.run(stop), name="sink-loop")
    stop_task = asyncio.create_task(stop.wait(), name="sink-stop-signal")
    try:
        await asyncio.wait({loop_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        try:
            await asyncio.wait_for(asyncio.shield(loop_task), drain_timeout_s)
        except TimeoutError:
            loop_task.cancel()
            raise TransientError(
                f"the sink did not flush within {drain_timeout_s:.0f}s of SIGTERM; open segments were "
                "abandoned and will be rebuilt from Kafka on the next start (nothing is lost)"
            ) from None
    finally:
        stop_task.cancel()


async def _retention_loop(
    catalog: SegmentCatalog,
    usage_store: SegmentStore | None,
    settings: SinkServiceSettings,
    metrics: Metrics,
    stop: asyncio.Event,
) -> None:
    assert settings.retention_s is not None
    metrics.counter("sink_segments_expired_total", "Segments removed by retention")
    metrics.counter("sink_usage_segments_expired_total", "Usage segments removed by retention")
    while not stop.is_set():
        cutoff = int((time.time() - settings.retention_s) * 1000)
        removed = await asyncio.to_thread(apply_retention, catalog, cutoff)
        if removed:
            metrics.inc("sink_segments_expired_total", float(len(removed)))
            log.info(
                "retention removed segments", extra={"ctx": {"count": len(removed), "cutoff_ms": cutoff}}
            )
        if usage_store is not None:
            gone = await asyncio.to_thread(apply_usage_retention, usage_store, cutoff)
            if gone:
                metrics.inc("sink_usage_segments_expired_total", float(len(gone)))
                log.info(
                    "retention removed usage segments",
                    extra={"ctx": {"count": len(gone), "cutoff_ms": cutoff}},
                )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), settings.retention_check_s)


def export_request_from_json(body: Any) -> ExportRequest:
    """``POST /export`` body: SimKube's ``{start_ts, end_ts, filters}`` (Unix seconds) or
    ``{start_ms, end_ms}``, plus ``format`` (``kubetape`` default, or ``simkube``) and, for SimKube,
    ``simkube_version`` (2 default, or 3)."""
    if not isinstance(body, dict):
        raise ConfigError("export request: the body must be a JSON object")

    def bound(ms_key: str, s_key: str) -> int:
        if isinstance(body.get(ms_key), int):
            return int(body[ms_key])
        if isinstance(body.get(s_key), int):
            return int(body[s_key]) * 1000
        raise ConfigError(f"export request: {ms_key} (ms) or {s_key} (seconds) is required")

    try:
        fmt = ExportFormat(body.get("format", "kubetape"))
    except ValueError:
        raise ConfigError(
            f"export request: unknown format {body.get('format')!r}; use 'kubetape' or 'simkube'"
        ) from None
    filters = body.get("filters") or {}
    if not isinstance(filters, dict):
        raise ConfigError("export request: filters must be an object")
    version = body.get("simkube_version", SIMKUBE_TRACE_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ConfigError(f"export request: simkube_version must be a number, got {version!r}")
    check_writable_version(version)
    return ExportRequest(
        bound("start_ms", "start_ts"),
        bound("end_ms", "end_ts"),
        fmt,
        filters_from_json(filters, "filters"),
        simkube_version=version,
    )


def _exporter(store: SegmentStore, usage: SegmentStore | None = None) -> ExportFn:
    # One catalog for every request: on a directory a refresh reads only the headers of segments new
    # since the last export; an object store answers each window from its index instead (the window's
    # headers only, see pipeline.store.catalog_window). Exports take turns: a catalog is not
    # thread-safe, and each export uses the machine's CPU fully anyway.
    catalog = SegmentCatalog(store)
    turn = threading.Lock()

    def export_in_turn(request: ExportRequest) -> ExportResult:
        with turn:
            return export_window(catalog, request, usage=usage)

    async def export(body: Any) -> ExportReply:
        request = export_request_from_json(body)
        result = await asyncio.to_thread(export_in_turn, request)
        return ExportReply(result.data, result.events, result.warnings)

    return export
