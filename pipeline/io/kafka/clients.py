"""Kafka clients (aiokafka) configured once for kubetape's delivery guarantees and its connection
security, and the question every reader asks its consumer: which offset a time falls on.

Every producer, consumer and admin client of kubetape is built here, through :func:`connection`, so TLS
and SASL apply to all of them alike."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, NotControllerError

from pipeline.io.kafka.oauth import TokenFile
from pipeline.io.kafka.settings import KafkaSettings

log = logging.getLogger("kubetape.kafka")


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """Stop ``consumer`` without taking a cancellation that is not ours: aiokafka 0.14's
    ``Fetcher.close`` cancels its fetch tasks and awaits them, and a fetch task sleeping in its retry
    backoff (the brokers refused it) ends by raising that CancelledError, which ``close`` lets out. The
    caller's task was not cancelled, yet it saw a CancelledError: the sink's loop ended there, after a
    rotated password, when it replaced its consumer. A cancellation of the caller itself still goes on."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        # close stopped at that task (the group was already left): the rest of it is done here, the
        # other fetch tasks cancelled and the connections closed, so nothing of the old consumer lingers
        fetcher = getattr(consumer, "_fetcher", None)
        for fetch in list(getattr(fetcher, "_pending_tasks", ())):
            fetch.cancel()
        client = getattr(consumer, "_client", None)
        if client is not None:
            await client.close()
        log.debug("a fetch task's cancellation escaped aiokafka's consumer close; the consumer is stopped")


def connection(settings: KafkaSettings) -> dict[str, Any]:
    """The keyword arguments every aiokafka client takes to reach and authenticate to the brokers."""
    security = settings.security
    kwargs: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "security_protocol": security.protocol,
        "ssl_context": security.ssl_context(),
    }
    if security.uses_sasl:
        kwargs["sasl_mechanism"] = security.mechanism
        if security.mechanism == "OAUTHBEARER" and security.oauth_token_file is not None:
            kwargs["sasl_oauth_token_provider"] = TokenFile(security.oauth_token_file)
        else:
            kwargs["sasl_plain_username"] = security.username
            password = security.current_password()  # re-read from sasl.password.file for each client
            kwargs["sasl_plain_password"] = password.reveal() if password else None
    return kwargs


class _ReadyNodeAdmin(AIOKafkaAdminClient):  # type: ignore[misc]
    """aiokafka's admin client sends a request that names no node (describe a topic, its configs) to a
    random broker of its metadata. Just after a broker dies the metadata still lists it, so one request
    in three failed with NodeNotReadyError while two brokers answered (a replay of a topic range, the
    topic checks at start). This one sends such a request to the first broker that accepts a connection.

    Creating and deleting topics goes to the broker the metadata names as controller. With KRaft that is
    a live broker the answering broker picked at random (each forwards to the active controller), and
    until the dead one is fenced it may still be named: aiokafka then waited for it for the whole request
    timeout (40 s) and failed with a bare TimeoutError (``topics create`` just after a broker died). This
    one sends to the named broker if it accepts a connection, else to one that does; a broker that is not
    the controller where that matters (ZooKeeper mode) answers NOT_CONTROLLER, and the request is sent
    again to the controller of fresh metadata, as aiokafka does.

    A connection opened before its broker died still counts as ready until its reset is read, so the send
    itself can fail (KafkaConnectionError: connection closed). The request then goes to the next broker
    that accepts a connection, each broker once. Sending again is safe for what goes through here: a
    topic created by the first attempt answers TOPIC_ALREADY_EXISTS, which the callers take as present."""

    async def _send_request(self, request: Any, node_id: int | None = None) -> Any:
        if node_id is not None:
            return await super()._send_request(request, node_id)
        return await self._send_failing_over(request, preferred=None)

    async def _send_to_controller(self, request: Any) -> Any:
        client = self._client
        if client.cluster.controller is None:
            await client.force_metadata_update()
        try:
            return await self._send_failing_over(request, preferred=self._named_controller())
        except NotControllerError:
            await client.force_metadata_update()
            return await self._send_failing_over(request, preferred=self._named_controller())

    def _named_controller(self) -> int | None:
        controller = self._client.cluster.controller
        return None if controller is None else int(controller.nodeId)

    async def _send_failing_over(self, request: Any, preferred: int | None) -> Any:
        """Send to ``preferred`` if it accepts a connection, else to another broker that does; a broker
        whose connection fails during the send is passed over for the next. With none left, the last
        failure is raised (or the client's own NodeNotReadyError, naming a broker, if none answered)."""
        client = self._client
        candidates = [preferred, client.get_random_node(), *(b.nodeId for b in client.cluster.brokers())]
        failure: KafkaConnectionError | NodeNotReadyError | None = None
        for node in dict.fromkeys(n for n in candidates if n is not None):
            if not await client.ready(node):
                continue
            try:
                return await client.send(node, request)
            except (KafkaConnectionError, NodeNotReadyError) as error:
                log.info(
                    "broker %s dropped the connection during %s (%s); trying the next",
                    node,
                    type(request).__name__,
                    error,
                )
                failure = error
        if failure is not None:
            raise failure
        return await client.send(preferred if preferred is not None else client.get_random_node(), request)


def new_admin(settings: KafkaSettings) -> AIOKafkaAdminClient:
    return _ReadyNodeAdmin(
        **connection(settings),
        client_id=settings.client_id,
    )


def new_producer(settings: KafkaSettings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        **connection(settings),
        client_id=settings.client_id,
        enable_idempotence=True,
        acks="all",
        compression_type=settings.compression,
        linger_ms=settings.linger_ms,
        max_batch_size=settings.max_batch_bytes,
        request_timeout_ms=settings.request_timeout_ms,
    )


def new_consumer(
    settings: KafkaSettings,
    *topics: str,
    group_id: str | None,
    auto_offset_reset: str = "earliest",
    role: str = "",
) -> AIOKafkaConsumer:
    """A consumer that sees only committed transactions; ``role`` names it to the broker
    (``kubetape-<role>``), so a broker's logs tell the sink from a range reader."""
    # Offsets are committed explicitly by each stage, after its work is durable.
    return AIOKafkaConsumer(
        *topics,
        **connection(settings),
        client_id=f"{settings.client_id}-{role}" if role else settings.client_id,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset=auto_offset_reset,
        isolation_level="read_committed",
    )


async def offsets_at(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition], at_ms: int | None
) -> dict[TopicPartition, int]:
    """Per partition, the first offset whose timestamp is ≥ ``at_ms`` (the end offset if none is);
    the beginning offsets when ``at_ms`` is None. Kafka timestamps are the events' times (the watcher
    sets them), so this is where a time range of the topic begins or ends."""
    if at_ms is None:
        return dict(await consumer.beginning_offsets(partitions))
    ends = await consumer.end_offsets(partitions)
    found = await consumer.offsets_for_times({tp: max(at_ms, 0) for tp in partitions})
    return {tp: (hit.offset if hit is not None else ends[tp]) for tp, hit in found.items()}


class ConsumerClient:
    """What a consuming source has around its consumer: ``async with`` starts and stops it, and
    :attr:`consumer` is the started client. Subclasses set ``_consumer`` in ``start`` and clear it in
    ``stop``."""

    _consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._consumer
