"""Publishing the watcher's records to Kafka (aiokafka), in order, without loss, with bounded memory.

:meth:`KafkaPublisher.submit` hands over one *unit* (the records of one observed change: its events on
``kubetape.events`` and the matching ``kubetape.state`` / resume records). It waits while
``max_pending_units`` units are queued, which is how an unreachable broker stops the watch loops from
reading further (backpressure) instead of growing memory without limit.

Batches of units (up to ``max_batch_records`` records, as many as are queued: bigger batches under a
burst, single units when idle) are sent in two phases: first every ``kubetape.events`` record, and only
once those are acknowledged (acks=all) the state and resume records. So the state and resume topics
never claim more than the events topic holds: a crash can at worst republish a change (which the
watcher's de-duplication against the state then mostly absorbs), never lose one. Two tasks form a
pipeline: while one batch's second phase is in flight, the next batch's events already go out, so an
event waits for at most one round trip before its own. Batches are closed before they are handed to
aiokafka, which sends them at once (an open batch would wait ``linger_ms`` first). When a batch fails,
only what is needed is resent, with backoff, until it succeeds or the publisher is stopped: that batch
and the later batches of its partition (which keeps each partition's order), never the records other
partitions have already acknowledged.

A record the broker can never take (larger than the topic's ``max.message.bytes``, a timestamp it
refuses) must not stop publishing: it is *dead-lettered* — a description (topic, key, size, reason,
never the value) goes to ``kubetape.deadletter``, it is counted and logged, and everything else goes
on. Records larger than ``max_batch_bytes`` are refused before sending; a batch the broker refuses
as too large is resent one record per batch, so only the records that are too large on their own
are set aside. A refused batch has used up sequence numbers of the idempotent producer that the broker
never saw, so every later batch of its partition would be refused as out of order: the producer is
replaced (a new producer id, sequences from zero) once no send is in flight.

:meth:`KafkaPublisher.seconds_without_ack` tells how long changes have been waiting with no
acknowledgement from the broker: aiokafka's idempotent producer retries through a broker outage
silently, so this is how the service's readiness learns that nothing gets published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka.errors import KafkaError

from pipeline.io.kafka.access import (
    BrokerAccess,
    authorization_error,
    on_login_refused,
    on_tls_refused,
    use_password,
)
from pipeline.io.kafka.clients import new_producer
from pipeline.io.kafka.diagnose import refusal
from pipeline.io.kafka.headers import cluster_header
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.publisher_batches import BatchSending, _Outcome
from pipeline.io.kafka.send_errors import producer_state_lost, refused
from pipeline.io.kafka.settings import DEADLETTER_TOPIC, EVENTS_TOPIC, KafkaSettings
from pipeline.io.metrics import Metrics
from pipeline.model.errors import TransientError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId

log = logging.getLogger("kubetape.publisher")

_RETRY_MIN_S = 0.2
_RETRY_MAX_S = 5.0
RECORD_OVERHEAD_BYTES = 128
"""Room for a record's framing and its batch header when checking sizes before sending (generous)."""


class KafkaPublisher(BatchSending):
    """Ordered, at-least-once publishing of record units; ``async with`` starts and stops it."""

    def __init__(
        self,
        settings: KafkaSettings,
        metrics: Metrics | None = None,
        *,
        max_pending_units: int = 10_000,
        max_batch_records: int = 20_000,
        clock: Callable[[], float] = time.monotonic,
        events_topic: str = EVENTS_TOPIC,
        deadletter_topic: str = DEADLETTER_TOPIC,
        producer_factory: Callable[[KafkaSettings], Any] = new_producer,
        cluster: ClusterId = DEFAULT_CLUSTER,
    ) -> None:
        """``events_topic``: the topic whose records are acknowledged before any other is sent;
        ``deadletter_topic``: where records the broker can never take are described;
        ``producer_factory``: makes the aiokafka producer (a seam for tests);
        ``cluster``: the recorded cluster, in every record's key (:func:`~pipeline.model.keys.message_key`)
        and header (:data:`~pipeline.io.kafka.headers.CLUSTER_HEADER`), so a fleet shares one topic set."""
        self._settings = settings
        self._cluster = cluster
        self._headers = cluster_header(cluster)
        self._new_producer = producer_factory
        # sends in flight, and whether the producer is being replaced (which waits for none in flight)
        self._flight = asyncio.Condition()
        self._in_flight = 0
        self._renewing = False
        self._events_topic = events_topic
        self._deadletter_topic = deadletter_topic
        self._max_record_bytes = settings.max_batch_bytes - RECORD_OVERHEAD_BYTES
        self.dead_lettered = 0
        self._metrics = metrics
        self._queue: asyncio.Queue[Sequence[Record]] = asyncio.Queue(max_pending_units)
        # batches whose events are acknowledged, waiting for their second phase; one slot, so the
        # events topic runs at most two batches ahead of the state and resume topics (bounded memory)
        self._second_phase: asyncio.Queue[tuple[list[Record], int]] = asyncio.Queue(1)
        self._max_batch = max_batch_records
        self._login_refused = False  # the brokers refused the credentials of the producer's connection
        self._tls_refusal: str | None = None  # what TLS said when the refusal was of a TLS connection
        self._logging_in: asyncio.Task[None] | None = None
        self._producer = self._make_producer()
        self._tasks: list[asyncio.Task[None]] = []
        self._partitions: dict[str, list[int]] = {}
        self._partition_cache: dict[bytes, int] = {}  # key → murmur2 hash (pure Python, ~6 µs a key)
        self._clock = clock
        self._unfinished_units = 0  # submitted, not yet acknowledged in both phases
        self._last_progress = clock()  # last acknowledgement, or when units became pending
        self._started = False
        self._closed = False
        self.connected = False
        self.access = BrokerAccess(settings, log, "the watcher's publisher")
        """Whether the brokers let this principal write: a denial is logged once, not at every retry."""
        if metrics is not None:
            metrics.counter("records_published_total", "Kafka records acknowledged, by topic")
            metrics.counter("publish_errors_total", "failed Kafka sends (retried), by error class")
            metrics.counter(
                "publish_deadletter_total", "records the broker can never take, set aside, by topic"
            )
            metrics.gauge("publish_pending_units", "changes waiting to be published")
            metrics.gauge("publish_lag_seconds", "age of the oldest change in the last published batch")

    async def __aenter__(self) -> KafkaPublisher:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Connect (retrying while the broker is unreachable) and start the sender task."""
        if self._started:
            return
        await self._connect()
        self._started = self.connected = True
        self._tasks = [
            asyncio.create_task(self._send_events_loop(), name="kubetape-publisher-events"),
            asyncio.create_task(self._send_second_phase_loop(), name="kubetape-publisher-state"),
        ]

    def _make_producer(self) -> Any:
        """A producer built with the credentials as they are now (the password file read again)."""
        producer = self._new_producer(self._settings)

        def refused(tls: str | None = None) -> None:
            if producer is self._producer and not self._login_refused and not self._closed:
                self._login_refused = True
                self._tls_refusal = tls
                self.connected = False
                self._logging_in = asyncio.get_running_loop().create_task(
                    self._log_in_again(), name="kubetape-publisher-login"
                )

        on_login_refused(producer, refused)
        on_tls_refused(producer, refused)
        return producer

    def _consequence(self) -> str:
        return f"{self._unfinished_units} changes wait for it (the watch pauses once the queue is full)"

    async def _log_in_again(self) -> None:
        """After the brokers refused the producer's credentials: once they take the credentials as they
        are now (the password file read again and tried on one connection, after a growing delay), the
        producer gets them for its next connections (see :mod:`pipeline.io.kafka.access`). The producer
        is kept, not replaced: its batches wait in it, and the idempotent producer retries them until
        they are written (it never expires them), so each is written once, in order. A refused TLS
        connection is the same outage: the producer's TLS context reads a renewed client certificate
        again for its next connections by itself (:mod:`pipeline.io.kafka.tls`)."""
        while True:
            await asyncio.sleep(self.access.refused_login(self._consequence(), self._tls_refusal))
            problem = await refusal(self._settings)
            if problem is None:
                use_password(self._producer, self._settings.security)
                self._login_refused = False
                return
            log.debug("the brokers still refuse the producer's credentials: %s", problem)

    async def _connect(self) -> None:
        delay = _RETRY_MIN_S
        while True:
            try:
                await self._producer.start()
                return
            except KafkaError as exc:
                self._count_error(exc)
                log.warning("Kafka at %s unreachable (%s); retrying", self._settings.bootstrap, exc)
                await self._producer.stop()
                self._producer = self._make_producer()
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_S)

    async def _renew_producer(self) -> None:
        """Replace the producer (see the module docstring) once the other sender has nothing in flight."""
        async with self._flight:
            if self._renewing:  # the other sender is replacing it already
                await self._flight.wait_for(lambda: not self._renewing)
                return
            self._renewing = True
            await self._flight.wait_for(lambda: self._in_flight == 0)
        try:
            log.info("replacing the Kafka producer: its sequence numbers no longer match the broker's")
            await self._producer.stop()
            self._producer = self._make_producer()
            await self._connect()
        finally:
            async with self._flight:
                self._renewing = False
                self._flight.notify_all()

    async def _send_in_flight(self, records: list[Record], alone: set[int]) -> _Outcome:
        async with self._flight:
            await self._flight.wait_for(lambda: not self._renewing)
            self._in_flight += 1
        try:
            return await self._send_batches(records, alone)
        finally:
            async with self._flight:
                self._in_flight -= 1
                self._flight.notify_all()

    async def submit(self, unit: Sequence[Record]) -> None:
        """Queue one unit of records; waits (backpressure) while the queue is full."""
        if self._closed:
            raise TransientError("the publisher is stopped; no more records are accepted")
        for task in self._tasks:
            if task.done():
                task.result()  # surface a crashed sender instead of blocking forever
        await self._queue.put(unit)
        if self._unfinished_units == 0:
            self._last_progress = self._clock()  # the wait for an acknowledgement starts now
        self._unfinished_units += 1
        self._gauge_pending()

    async def flush(self) -> None:
        """Wait until every submitted unit is acknowledged."""
        await self._queue.join()

    @property
    def pending_units(self) -> int:
        return self._queue.qsize()

    def seconds_without_ack(self) -> float:
        """How long changes have waited with no acknowledgement from Kafka (0 when none is waiting)."""
        if self._unfinished_units == 0:
            return 0.0
        return max(0.0, self._clock() - self._last_progress)

    async def stop(self, deadline_s: float = 30.0) -> None:
        """Flush for up to ``deadline_s``, then stop. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._logging_in is not None:
            self._logging_in.cancel()
        if self._tasks:
            try:
                await asyncio.wait_for(self.flush(), deadline_s)
            except TimeoutError:
                log.error("stopping with %d unpublished changes (flush deadline passed)", self.pending_units)
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._started:
            await self._producer.stop()

    # ---- sending ---------------------------------------------------------------------------------
    async def _send_events_loop(self) -> None:
        while True:
            units = [await self._queue.get()]
            size = len(units[0])
            while size < self._max_batch and not self._queue.empty():
                units.append(self._queue.get_nowait())
                size += len(units[-1])
            records = [r for unit in units for r in unit]
            await self._send_until_acked([r for r in records if r.topic == self._events_topic])
            if records and self._metrics is not None:
                oldest = min(r.ts_ms for r in records)
                self._metrics.set("publish_lag_seconds", max(0.0, time.time() - oldest / 1000))
            later = [r for r in records if r.topic != self._events_topic]
            await self._second_phase.put((later, len(units)))

    async def _send_second_phase_loop(self) -> None:
        while True:
            records, units = await self._second_phase.get()
            await self._send_until_acked(records)
            self._unfinished_units -= units
            for _ in range(units):
                self._queue.task_done()
            self._gauge_pending()

    async def _send_until_acked(self, records: list[Record]) -> None:
        if not records:  # nothing tells whether Kafka accepts this publisher
            return
        pending = records
        delay = _RETRY_MIN_S
        alone: set[int] = set()  # ids of records to send in batches of their own (see _send_batches)
        while pending:
            try:
                outcome = await self._send_in_flight(pending, alone)
            except KafkaError as exc:  # before anything was sent (partition metadata)
                outcome = _Outcome(pending, exc, 0)
            pending, error = outcome.again, outcome.error
            if outcome.refused or (error is not None and producer_state_lost(error)):
                await self._renew_producer()
            if error is None:
                break
            self._count_error(error)
            if refused(error) or producer_state_lost(error):
                continue  # nothing to wait for: split up, or sent again with a fresh producer
            # at-least-once: the failed batches may have been written, so their records may repeat
            self._partitions.clear()  # partitions may have been added meanwhile
            self.connected = False
            if (denial := authorization_error(error)) is not None:
                self.access.refused("Write", *denial, self._consequence())
                log.debug("publishing %d records denied (%s); retrying in %.1fs", len(pending), error, delay)
            else:
                log.warning(
                    "publishing %d records failed (%s); retrying in %.1fs", len(pending), error, delay
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RETRY_MAX_S)
        self.connected = True
        self.access.accepted({r.topic for r in records})  # a topic still denied stays so
        self._last_progress = self._clock()

    def _gauge_pending(self) -> None:
        if self._metrics is not None:
            # a float: Metrics renders values with float.is_integer (ints lack it before Python 3.12)
            self._metrics.set("publish_pending_units", float(self._queue.qsize()))
