"""The sink's Kafka side: a consumer-group member on ``kubetape.events`` plus the dead-letter producer.

Implements the sink's ``EventSource`` protocol on aiokafka. Rebalances are forwarded to the sink through
two callbacks: ``on_revoked`` runs before the partitions move (the sink flushes and commits there, the
last moment its commits are accepted), ``on_assigned`` after (the sink restores each partition from
the store and seeks past what is already durable).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import GroupAuthorizationFailedError, KafkaError, TopicAuthorizationFailedError
from aiokafka.protocol.metadata import MetadataRequest

from pipeline.io.kafka.access import (
    RETRY_MAX_S,
    BrokerAccess,
    authorization_error,
    denied,
    on_login_refused,
    on_tls_refused,
)
from pipeline.io.kafka.clients import ConsumerClient, new_consumer, new_producer, stop_consumer
from pipeline.io.kafka.diagnose import refusal
from pipeline.io.kafka.message import Message, PartitionBatch
from pipeline.io.kafka.send_errors import refused
from pipeline.io.kafka.settings import DEADLETTER_TOPIC, DEFAULT_SINK_GROUP, KafkaSettings
from pipeline.io.kafka.topic_id import TopicIdRequest, topic_id_of
from pipeline.model.errors import TransientError

log = logging.getLogger("kubetape.sink")

PartitionsCallback = Callable[[list[int]], Awaitable[None]]

SETTLE_S = 5.0
"""After a denial, how long fetches must go without one before the sink counts as accepted again
(when no message arrives to prove it sooner): several of aiokafka's fetch rounds, each of which would
have met the denial again."""


async def _nothing(partitions: list[int]) -> None:
    del partitions


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka ships no type hints
    def __init__(self, source: KafkaSinkSource, consumer: AIOKafkaConsumer) -> None:
        self._source = source
        self._consumer = consumer

    def _replaced(self) -> bool:
        """Whether this listener's consumer is one being replaced (it may still rebalance while it
        stops): the source has left its partitions already, and its calls are not the new consumer's."""
        return self._consumer is not self._source._consumer

    # aiokafka swallows listener exceptions into its own (muted) logger; report them as ours.
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if self._replaced():
            return
        self._source.assigned -= {tp.partition for tp in revoked}
        try:
            await self._source.on_revoked(sorted(tp.partition for tp in revoked))
        except Exception:
            log.exception("handling revoked partitions failed", extra={"ctx": {"partitions": str(revoked)}})
            raise

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if self._replaced():
            return
        self._source.assigned = {tp.partition for tp in assigned}
        self._source.joined = True
        try:
            await self._source.on_assigned(sorted(tp.partition for tp in assigned))
        except Exception:
            log.exception("handling assigned partitions failed", extra={"ctx": {"partitions": str(assigned)}})
            raise


class KafkaSinkSource(ConsumerClient):
    """``async with KafkaSinkSource(...) as source:`` joins the group; leaving the block leaves it."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        group_id: str = DEFAULT_SINK_GROUP,
        deadletter_topic: str = DEADLETTER_TOPIC,
        commit_timeout_s: float = 10.0,
        what: str = "the sink's consumer",
    ) -> None:
        """``what`` names this member in messages (the usage sink's says so)."""
        self.settings = settings
        self.topic = topic
        self.group_id = group_id
        self.deadletter_topic = deadletter_topic
        self.commit_timeout_s = commit_timeout_s
        self.on_assigned: PartitionsCallback = _nothing
        self.on_revoked: PartitionsCallback = _nothing
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self.access = BrokerAccess(settings, log, what)
        """Whether the brokers let this member read (``/readyz``); see :meth:`getmany`."""
        self.assigned: set[int] = set()
        self.joined = False
        """Whether the group has assigned partitions to this member since its last (re)join."""
        self._ever_joined = False
        self._login_refused = False
        """The brokers refused the credentials of a connection this member's clients opened."""
        self._tls_refusal: str | None = None
        """What TLS said, when that refusal was of a TLS connection (a client certificate refused)."""

    def _watch_logins(self, client: AIOKafkaConsumer | AIOKafkaProducer) -> None:
        def refused(tls: str | None = None) -> None:
            if client is self._consumer or client is self._producer:  # not a client being replaced
                self._login_refused = True
                self._tls_refusal = tls

        on_login_refused(client, refused)
        on_tls_refused(client, refused)

    async def start(self) -> None:
        consumer = new_consumer(self.settings, group_id=self.group_id)
        producer = new_producer(self.settings)
        self._watch_logins(consumer)
        self._watch_logins(producer)
        try:
            await producer.start()
            await consumer.start()
        except KafkaError as exc:
            await producer.stop()
            await stop_consumer(consumer)
            raise TransientError(
                f"cannot reach Kafka at {self.settings.bootstrap} ({exc}); is the broker up?"
            ) from exc
        self._consumer, self._producer = consumer, producer
        self._subscribe(consumer)

    def _subscribe(self, consumer: AIOKafkaConsumer) -> None:
        self.joined = False
        consumer.subscribe(topics=[self.topic], listener=_Listener(self, consumer))

    async def _rejoin(self) -> None:
        """Leave with what this member holds made durable, and join again with a new consumer: aiokafka's
        consumer keeps raising a group denial after the grant is back (its heartbeat task stays failed)."""
        if self.assigned:
            try:
                await self.on_revoked(sorted(self.assigned))  # open segments written; the commit is denied
            finally:
                self.assigned = set()
        old, self._consumer = self._consumer, None  # its refusals while it stops are not the new one's
        if old is not None:
            await stop_consumer(old)
        while True:
            consumer = new_consumer(self.settings, group_id=self.group_id)
            try:
                await consumer.start()
                break
            except KafkaError as exc:  # the brokers unreachable meanwhile: not a reason to stop
                await stop_consumer(consumer)
                log.warning("rejoining the group failed (%s); retrying in %.0fs", exc, RETRY_MAX_S)
                await asyncio.sleep(RETRY_MAX_S)
        self._watch_logins(consumer)
        self._consumer = consumer
        self._subscribe(consumer)

    async def _log_in_again(self) -> None:
        """The brokers refused this member's credentials (see :mod:`pipeline.io.kafka.access`): not ready,
        and after a growing delay one connection checks the credentials as they are now (the password
        file read again); once the brokers take them, the consumer joins again and the dead-letter
        producer is replaced, both built with them. What the member held is written first (as for a
        group denial), so nothing is lost and the next assignment reads on from the store's end. A refused
        TLS connection (a client certificate expired, revoked, or not signed by a CA the brokers trust)
        is handled alike: the check's connection and the new clients read the certificate files as they
        are now."""
        delay = self.access.refused_login(
            "nothing is consumed meanwhile (the topic keeps it) nor committed", self._tls_refusal
        )
        await asyncio.sleep(delay)
        problem = await refusal(self.settings)
        if problem is not None:
            log.debug("the brokers still refuse this member's credentials: %s", problem)
            return
        self._login_refused = False
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()
        fresh = new_producer(self.settings)
        self._watch_logins(fresh)
        try:
            await fresh.start()
        except KafkaError:
            await fresh.stop()
            self._login_refused = True  # refused or unreachable again: the next round tries anew
            return
        self._producer = fresh
        await self._rejoin()

    async def stop(self) -> None:
        """Leave the group and close the clients; safe to call twice."""
        consumer, producer = self._consumer, self._producer
        self._consumer = self._producer = None
        if consumer is not None:
            await stop_consumer(consumer)
        if producer is not None:
            await producer.stop()

    def _tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self.topic, partition)

    async def getmany(self, timeout_ms: int, max_records: int) -> list[PartitionBatch]:
        """The next batch; ``[]`` after waiting out a denial.

        A group this principal may not read before it ever joined is a ConfigError naming it (the
        start). Later, a denial of the topic or the group is an outage (an ACL removed while the
        sink runs): logged once, ``access.ok`` false, and retried with backoff; what the topic holds
        waits there, and nothing is committed past what the store holds. Access is back when a message
        arrives, or when fetches went ``SETTLE_S`` without a denial (after a group denial, once the group
        assigned partitions again). Credentials the brokers refuse are the same kind of outage, handled
        by :meth:`_log_in_again`."""
        if self._login_refused:
            await self._log_in_again()
            return []
        try:
            batches = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except (TopicAuthorizationFailedError, GroupAuthorizationFailedError) as exc:
            kind, name = authorization_error(exc) or ("topic", self.topic)
            if kind == "consumer group" and not self._ever_joined:
                raise denied(self.settings, "Read", self.group_id, kind) from None
            delay = self.access.refused(
                "Read", kind, name, "nothing is consumed meanwhile (the topic keeps it) nor committed"
            )
            if kind == "consumer group":
                await self._rejoin()
            await asyncio.sleep(delay)
            return []
        self._ever_joined = self._ever_joined or self.joined
        found = [PartitionBatch.of(tp.partition, records) for tp, records in batches.items() if records]
        if not self.access.ok and (found or (self.joined and self.access.quiet_for() >= SETTLE_S)):
            self.access.accepted()
        return found

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        """Commit; False (logged) when the broker refused or did not answer in ``commit_timeout_s``.

        A lost commit never loses data: the segments are durable and the next owner of a partition
        skips what the store already holds. So the sink carries on instead of waiting on a commit
        that may only complete after a rebalance it is itself part of. A commit that was still
        pending when the consumer stopped is refused the same way: this member has left the group."""
        if self._consumer is None:
            log.warning(
                "offset commit skipped: the consumer has stopped (this member left the group)",
                extra={"ctx": {"offsets": str(dict(offsets))}},
            )
            return False
        if self._login_refused or self.access.login_refused:  # it would wait out its timeout in vain
            log.debug("offset commit skipped: the brokers refuse this member's credentials")
            return False
        try:
            await asyncio.wait_for(
                self.consumer.commit({self._tp(p): o for p, o in offsets.items()}), self.commit_timeout_s
            )
        except (TimeoutError, KafkaError) as exc:
            # a denial is logged once, by getmany, which meets it too
            level = logging.DEBUG if authorization_error(exc) is not None else logging.WARNING
            log.log(
                level,
                "offset commit failed; it is retried with the next round",
                extra={"ctx": {"offsets": str(dict(offsets)), "error": repr(exc)}},
            )
            return False
        return True

    async def committed(self, partition: int) -> int | None:
        offset: int | None = await self.consumer.committed(self._tp(partition))
        return offset

    async def seek(self, partition: int, offset: int) -> None:
        self.consumer.seek(self._tp(partition), offset)

    async def identity(self) -> str | None:
        """``kafka:<cluster id>/<topic>@<topic id>``: what the store records and checks (None if the
        broker does not tell its cluster id; without ``@<topic id>`` if it does not speak Metadata v12).
        A new broker (``stack down`` deletes Kafka) has a new cluster id, a topic deleted and re-created
        a new topic id (see the sink)."""
        client = self.consumer._client  # aiokafka has no public call for the cluster id
        node = client.get_random_node()
        response = await client.send(node, MetadataRequest([self.topic]))
        cluster_id = getattr(response, "cluster_id", None)
        if not cluster_id:
            return None
        identity = f"kafka:{cluster_id}/{self.topic}"
        try:
            topic_id = topic_id_of(await client.send(node, TopicIdRequest(self.topic)), self.topic)
        except (KafkaError, NotImplementedError) as exc:  # an older broker: no topic ids
            log.info("the broker tells no topic ids", extra={"ctx": {"error": str(exc)}})
            return identity
        return f"{identity}@{topic_id}" if topic_id else identity

    async def offset_bounds(self, partition: int) -> tuple[int, int]:
        """The partition's log start offset (older ones were deleted by retention) and end offset."""
        tp = self._tp(partition)
        start = await self.consumer.beginning_offsets([tp])
        end = await self.consumer.end_offsets([tp])
        return int(start[tp]), int(end[tp])

    async def dead_letter(self, message: Message, error: str) -> None:
        if self._producer is None:
            raise RuntimeError("KafkaSinkSource is not started")
        headers = [
            ("kubetape.source.topic", self.topic.encode()),
            ("kubetape.source.partition", str(message.partition).encode()),
            ("kubetape.source.offset", str(message.offset).encode()),
            ("kubetape.error", error.encode()[:4096]),
        ]
        try:
            await self._producer.send_and_wait(
                self.deadletter_topic,
                value=message.value,
                key=message.key,
                headers=headers,
                timestamp_ms=message.timestamp_ms,
            )
        except KafkaError as exc:
            if not refused(exc):
                raise
            # the message with the reason beside it is more than the broker takes (a message already
            # at the size limit): set it aside without its value, rather than stop on it for ever
            size = len(message.value or b"")
            log.warning(
                "dead letter without its value (refused whole: %s): partition %s offset %s, %d bytes",
                type(exc).__name__,
                message.partition,
                message.offset,
                size,
            )
            await self._producer.send_and_wait(
                self.deadletter_topic,
                value=None,
                key=message.key[:4096] if message.key else message.key,
                headers=[*headers, ("kubetape.value-omitted-bytes", str(size).encode())],
                timestamp_ms=message.timestamp_ms,
            )
