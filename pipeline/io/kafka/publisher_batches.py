"""One round of :class:`~.publisher.KafkaPublisher`'s sending: records filled into closed batches per
partition (partitions chosen as Kafka's default partitioner does), every acknowledgement awaited, what
must go again returned, and records the broker can never take dead-lettered.

A base class of the publisher, apart from :mod:`.publisher` because building and sending batches is
one concern and the publisher's queue, two phases, retries and connection another; the module
docstring of :mod:`.publisher` says how the two fit (which batches are resent, why refused ones go
again one record per batch). The attributes below are the publisher's, set in its ``__init__``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder

from pipeline.io.kafka.message import Record
from pipeline.io.kafka.send_errors import refused
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.metrics import Metrics
from pipeline.model.keys import ClusterId, message_key

log = logging.getLogger("kubetape.publisher")

_PARTITION_CACHE_SIZE = 200_000


class _Outcome(NamedTuple):
    """What one round of sending left: records to send again, the first error, batches refused."""

    again: list[Record]
    error: KafkaError | None
    refused: int


class BatchSending:
    """Sends records as batches per partition and dead-letters what the broker can never take."""

    _settings: KafkaSettings
    _cluster: ClusterId
    _headers: list[tuple[str, bytes]]
    _producer: Any
    _deadletter_topic: str
    _max_record_bytes: int
    dead_lettered: int
    _metrics: Metrics | None
    _partitions: dict[str, list[int]]
    _partition_cache: dict[bytes, int]
    _clock: Callable[[], float]
    _last_progress: float

    async def _send_batches(self, records: list[Record], alone: set[int]) -> _Outcome:
        """Send ``records`` as record batches per partition (in order) and wait for every ack.

        Returns the records to send again (those of a failed batch and of the later batches of its
        partition, in order), the first error and how many batches were refused. Records too large to
        send, or refused by the broker in a batch of their own, are dead-lettered instead; the records
        of a larger refused batch are added to ``alone``, to go again one per batch.

        Filling aiokafka's BatchBuilder directly costs a fraction of one ``send()`` per record, which is
        what lets the publishing path keep up with bursts; partitions are chosen exactly as Kafka's
        default partitioner does (murmur2 of the key), so other producers agree on where a key lives.
        """
        for topic in {r.topic for r in records} - self._partitions.keys():
            self._partitions[topic] = sorted(await self._producer.partitions_for(topic))
        by_partition: dict[tuple[str, int], list[tuple[bytes, Record]]] = {}
        for r in records:
            key = message_key(self._cluster, r.key).encode()
            size = len(key) + len(r.value or b"")
            if size > self._max_record_bytes:  # aiokafka would put it in a batch of its own and send it
                await self._dead_letter(
                    r, size, f"larger than the producer's max_batch_bytes ({self._settings.max_batch_bytes})"
                )
                continue
            by_partition.setdefault((r.topic, self._partition_of(r.topic, key)), []).append((key, r))
        sent = await self._send_partitioned(by_partition, alone)
        results = await asyncio.gather(*(future for _, _, future in sent), return_exceptions=True)
        again: list[Record] = []
        failed: set[tuple[str, int]] = set()
        first_error: KafkaError | None = None
        refusals = 0
        delivered: dict[str, int] = {}
        for (tp, batch_records, _), result in zip(sent, results, strict=True):
            if tp in failed:  # after a failed batch: sent again to keep the partition's order
                again += batch_records
                continue
            if not isinstance(result, BaseException):
                delivered[tp[0]] = delivered.get(tp[0], 0) + len(batch_records)
                self._last_progress = self._clock()
                continue
            if not isinstance(result, KafkaError):
                raise result
            first_error = first_error or result
            if refused(result):
                refusals += 1
            if refused(result) and len(batch_records) == 1:
                # certainly not written, and never will be: the partition's later batches stand
                r = batch_records[0]
                await self._dead_letter(r, len(r.key.encode()) + len(r.value or b""), str(result))
                continue
            failed.add(tp)
            if refused(result):  # which record is refused is unknown: each goes again on its own
                alone.update(id(r) for r in batch_records)
            again += batch_records
        if self._metrics is not None:
            for topic, n in delivered.items():
                self._metrics.inc("records_published_total", n, {"topic": topic})
        return _Outcome(again, first_error, refusals)

    async def _send_partitioned(
        self, by_partition: dict[tuple[str, int], list[tuple[bytes, Record]]], alone: set[int]
    ) -> list[tuple[tuple[str, int], list[Record], asyncio.Future[Any]]]:
        """Fill and send the batches of each partition, in order: (partition, its records, ack future)."""
        sent: list[tuple[tuple[str, int], list[Record], asyncio.Future[Any]]] = []
        headers = self._headers
        for (topic, partition), items in by_partition.items():
            batch = self._producer.create_batch()
            in_batch: list[Record] = []
            for key, r in items:
                single = id(r) in alone
                if in_batch and (
                    single or batch.append(key=key, value=r.value, timestamp=r.ts_ms, headers=headers) is None
                ):
                    sent.append(((topic, partition), in_batch, await self._send_now(batch, topic, partition)))
                    batch, in_batch = self._producer.create_batch(), []
                if not in_batch:  # an empty batch takes any record
                    batch.append(key=key, value=r.value, timestamp=r.ts_ms, headers=headers)
                in_batch.append(r)
                if single:
                    sent.append(((topic, partition), in_batch, await self._send_now(batch, topic, partition)))
                    batch, in_batch = self._producer.create_batch(), []
            if in_batch:
                sent.append(((topic, partition), in_batch, await self._send_now(batch, topic, partition)))
        return sent

    async def _dead_letter(self, r: Record, size: int, reason: str) -> None:
        """Set ``r`` aside: log it, count it, and describe it (never its value) on the dead-letter topic."""
        self.dead_lettered += 1
        log.error(
            "record refused, set aside in %s: topic %s key %s, %d bytes: %s",
            self._deadletter_topic,
            r.topic,
            r.key,
            size,
            reason,
        )
        if self._metrics is not None:
            self._metrics.inc("publish_deadletter_total", labels={"topic": r.topic})
        description = {"topic": r.topic, "key": r.key, "bytes": size, "ts_ms": r.ts_ms, "error": reason}
        headers = [
            ("kubetape.source.topic", r.topic.encode()),
            ("kubetape.source.key", r.key.encode()),
            ("kubetape.size", str(size).encode()),
            ("kubetape.error", reason.encode()[:4096]),
            *self._headers,
        ]
        try:
            await self._producer.send_and_wait(
                self._deadletter_topic,
                value=orjson.dumps(description),
                key=message_key(self._cluster, r.key).encode(),
                headers=headers,
                timestamp_ms=r.ts_ms,
            )
        except KafkaError as exc:  # the description is lost, the log line above stays; publishing goes on
            self._count_error(exc)
            log.error(
                "could not write to %s (%s); the refused record is only logged", self._deadletter_topic, exc
            )

    async def _send_now(self, batch: BatchBuilder, topic: str, partition: int) -> asyncio.Future[Any]:
        # A closed batch is sent at once: aiokafka otherwise holds an open one for linger_ms, which only
        # adds latency here, since the batch already holds everything that was queued.
        batch.close()
        future: asyncio.Future[Any] = await self._producer.send_batch(batch, topic, partition=partition)
        return future

    def _partition_of(self, topic: str, key: bytes) -> int:
        partitions = self._partitions[topic]
        cached = self._partition_cache.get(key)
        if cached is None:
            if len(self._partition_cache) >= _PARTITION_CACHE_SIZE:
                self._partition_cache.clear()
            cached = self._partition_cache[key] = murmur2(key) & 0x7FFFFFFF
        return partitions[cached % len(partitions)]

    def _count_error(self, exc: BaseException) -> None:
        if self._metrics is not None:
            self._metrics.inc("publish_errors_total", labels={"error": type(exc).__name__})
