"""The watcher service's wiring: the Kubernetes client, the recorded cluster's id, the topics read back,
the publisher, the watcher, readiness and the HTTP surface, started together and stopped in order.

It serves ``/healthz``, ``/readyz`` (every stream synced and Kafka acknowledging what is published) and
``/metrics``, logs one JSON object per line, and on SIGTERM/SIGINT stops reading the watches, flushes what
it already read to Kafka (with a deadline), and exits 0. ``kubetape watch`` (services/commands/watch.py)
turns its flags into :class:`WatchServiceSettings`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.io.http import HttpSettings
from pipeline.io.kafka.settings import KafkaSettings
from services.serving import on_stop_signals, serving_http

if TYPE_CHECKING:  # imported lazily at run time: the CLI starts faster without them
    from kubernetes_asyncio.client import ApiClient

    from pipeline.io.kafka.publisher import KafkaPublisher
    from pipeline.io.kube.client import KubeClient
    from pipeline.io.metrics import Metrics
    from pipeline.model.keys import ClusterId
    from pipeline.watch.watcher import Watcher

log = logging.getLogger("kubetape.watch")


@dataclass(frozen=True, slots=True)
class WatchServiceSettings:
    """Everything ``kubetape watch`` needs; see ``kubetape watch --help`` for each default."""

    kubeconfig: Path | None
    """None: the pod's service account (running inside the recorded cluster)."""
    kafka: KafkaSettings
    http: HttpSettings
    tracer_config: Path | None = None
    context: str | None = None
    partitions: int = 3
    flush_deadline_s: float = 30.0
    max_pending_units: int = 10_000
    ready_ack_timeout_s: float = 5.0
    """/readyz fails when changes have waited this long with no acknowledgement from Kafka."""
    cluster_id: str | None = None
    """None: the UID of the recorded cluster's kube-system namespace (see pipeline.io.cluster_identity)."""
    create_topics: bool = True
    """False (``--topics check``, production): a missing topic stops the start instead of being created."""
    usage_every_s: float = 15.0
    """Seconds between samples of the pods' usage from the Metrics API (0: usage is not recorded)."""


def freeze_long_lived_objects(*, collect: bool = True) -> None:
    """Move every object alive now out of the garbage collector's reach.

    The watcher's memory of what it published (one sanitized object per key) is large and lives as long
    as the process; each full collection walks all of it (0.7–1.8 s for 100k Deployments on the
    benchmark machine: ``gc_pause`` in bench/bench_watcher.py), stalling every watch and the publisher
    at once. Frozen objects are never walked again, so collections only see what arrived later.
    """
    if collect:
        gc.collect()  # garbage frozen now would never be freed
    gc.freeze()


async def _freeze_when_synced(watcher: Watcher) -> None:
    """Freeze once more after the initial lists, which fill the watcher's memory on a first start.
    No collection first: it would stall the streams already watching, for little garbage."""
    while not watcher.ready:  # noqa: ASYNC110 - readiness is a polled property, not an event
        await asyncio.sleep(0.5)
    freeze_long_lived_objects(collect=False)
    log.info("initial lists done; %d objects frozen out of garbage collection", gc.get_freeze_count())


class Readiness:
    """Ready when every watch stream has synced and Kafka takes what the watcher publishes.

    aiokafka retries through a broker outage without raising, so "connected" alone stays true while
    nothing is published; changes waiting ``ack_timeout_s`` with no acknowledgement mean not ready. An
    outage while nothing changes shows at the next record (each stream's bookmark brings a resume
    record about once a minute).
    """

    def __init__(self, watcher: Watcher, publisher: KafkaPublisher, ack_timeout_s: float) -> None:
        self._watcher = watcher
        self._publisher = publisher
        self._ack_timeout_s = ack_timeout_s
        self._publishing = True

    def check(self) -> bool:
        waited = self._publisher.seconds_without_ack()
        publishing = self._publisher.connected and waited < self._ack_timeout_s
        if publishing != self._publishing:  # log the transitions, not every probe
            self._publishing = publishing
            if publishing:
                log.info("Kafka acknowledges again; ready")
            else:
                log.warning(
                    "not ready: no acknowledgement from Kafka for %.1fs (%d more changes queued)",
                    waited,
                    self._publisher.pending_units,
                )
        return self._watcher.ready and publishing


async def serve(settings: WatchServiceSettings) -> int:
    """Run the watcher service until SIGTERM/SIGINT; returns the exit code."""
    from pipeline.io.http import create_app
    from pipeline.io.kafka.publisher import KafkaPublisher
    from pipeline.io.kube.connect import kube_api
    from pipeline.io.metrics import Metrics
    from pipeline.model.errors import ConfigError
    from pipeline.model.tracer_config import TracerConfig, load_tracer_config
    from pipeline.watch.usage import UsageSettings
    from pipeline.watch.watcher import Watcher, WatchSettings

    config = load_tracer_config(settings.tracer_config) if settings.tracer_config else TracerConfig.default()
    if settings.kubeconfig is not None and not settings.kubeconfig.exists():  # bad input: fail before Kafka
        raise ConfigError(
            f"kubeconfig {settings.kubeconfig} does not exist; pass --kubeconfig or set $KUBECONFIG"
        )
    metrics = Metrics()
    stop = asyncio.Event()
    with on_stop_signals(stop.set):
        async with kube_api(settings.kubeconfig, settings.context) as api:
            kube = _watched_cluster(api, metrics)
            cluster = await _recorded_cluster(settings, kube)
            state, resume = await _read_back(
                settings.kafka, settings.partitions, cluster, create=settings.create_topics
            )
            async with KafkaPublisher(
                settings.kafka, metrics, max_pending_units=settings.max_pending_units, cluster=cluster
            ) as publisher:
                watch_settings = WatchSettings(usage=UsageSettings(every_s=settings.usage_every_s))
                watcher = Watcher(config, kube, publisher, metrics, settings=watch_settings, pod_metrics=kube)
                watcher.restore(state, resume)
                del state, resume
                freeze_long_lived_objects()
                readiness = Readiness(watcher, publisher, settings.ready_ack_timeout_s)
                async with serving_http(create_app(metrics, readiness.check), settings.http) as port:
                    log.info(
                        "watching (tracer config %s); health and metrics on http://%s:%d",
                        config.source,
                        settings.http.host,
                        port,
                    )
                    await _watch_until_stopped(watcher, publisher, stop, settings.flush_deadline_s)
    log.info("stopped cleanly")
    return 0


async def _watch_until_stopped(
    watcher: Watcher, publisher: KafkaPublisher, stop: asyncio.Event, flush_deadline_s: float
) -> None:
    """Watch until ``stop`` is set (or the watcher ends), then stop the intake and flush what was read."""
    run = asyncio.create_task(watcher.run(), name="kubetape-watcher")
    freezer = asyncio.create_task(_freeze_when_synced(watcher), name="kubetape-gc-freeze")
    stopper = asyncio.create_task(stop.wait(), name="kubetape-stop-signal")
    try:
        await asyncio.wait({run, stopper}, return_when=asyncio.FIRST_COMPLETED)
        log.info("stopping: no more watch intake, flushing %d pending changes", publisher.pending_units)
        await watcher.stop()
        await publisher.stop(flush_deadline_s)
    finally:
        stopper.cancel()
        freezer.cancel()
    if run.done() and not run.cancelled() and run.exception() is not None:
        raise run.exception()  # type: ignore[misc]  # a fatal error (bad config, RBAC) ends the service
    with contextlib.suppress(asyncio.CancelledError):
        await run


def _watched_cluster(api: ApiClient, metrics: Metrics) -> KubeClient:
    """The watcher's client; an event of unknown shape is counted, logged and skipped."""
    from pipeline.io.kube.client import KubeClient

    metrics.counter("malformed_watch_lines_total", "watch lines of unknown shape, skipped")

    def malformed(problem: str) -> None:
        metrics.inc("malformed_watch_lines_total")
        log.warning("skipped a watch event: %s", problem)

    return KubeClient(api, on_malformed=malformed)


async def _recorded_cluster(settings: WatchServiceSettings, kube: KubeClient) -> ClusterId:
    """The configured cluster id, else the cluster's kube-system namespace UID."""
    from pipeline.io.cluster_identity import kube_system_uid
    from pipeline.model.keys import parse_cluster_id

    configured = settings.cluster_id
    cluster = parse_cluster_id(configured, "--cluster-id") if configured else await kube_system_uid(kube)
    log.info("recording cluster %s", cluster)
    return cluster


async def _read_back(
    kafka: KafkaSettings, partitions: int, cluster: ClusterId, *, create: bool = True
) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Create the topics if needed and read what earlier runs from ``cluster`` published (state, resume
    points)."""
    from pipeline.io.kafka.admin import ensure_topic, ensure_watcher_topics
    from pipeline.io.kafka.reads import read_compacted
    from pipeline.io.kafka.settings import (
        DEADLETTER_TOPIC,
        EVENTS_TOPIC,
        RESUME_TOPIC,
        STATE_TOPIC,
        USAGE_TOPIC,
    )
    from pipeline.io.kafka.topics import COMPACTED_TOPICS, check_topics
    from pipeline.model.errors import ConfigError, TransientError

    started = time.monotonic()
    try:
        if create:
            await ensure_watcher_topics(kafka, partitions)
            await ensure_topic(kafka, DEADLETTER_TOPIC, 1)  # records the broker refuses are described there
        # created or not: a state or resume topic that is not compacted would lose the watcher's memory
        topics = [EVENTS_TOPIC, STATE_TOPIC, RESUME_TOPIC, USAGE_TOPIC, DEADLETTER_TOPIC]
        # topics just created take a moment to show in the broker's metadata
        await check_topics(kafka, topics, compacted=COMPACTED_TOPICS, settle_s=30.0 if create else 0.0)
        state = await read_compacted(kafka, STATE_TOPIC, cluster=cluster)
        resume = await read_compacted(kafka, RESUME_TOPIC, cluster=cluster)
    except (TransientError, ConfigError):  # a refused client (ConfigError) must not be retried forever
        raise
    except Exception as exc:  # aiokafka raises many unrelated classes for "cannot reach the broker"
        raise TransientError(
            f"cannot prepare the watcher's topics on Kafka at {kafka.bootstrap} "
            f"({type(exc).__name__}: {exc}); is the broker running? (--bootstrap / $KUBETAPE_BOOTSTRAP)"
        ) from exc
    elapsed = time.monotonic() - started
    log.info("read back %d state and %d resume records in %.1fs", len(state), len(resume), elapsed)
    return state, resume
