"""The usage sink's place in the sink service: its topic found whatever the order of starts, then its loop.

The watcher creates ``kubetape.usage`` when it starts, and a sink may well start first (``k8s/prod``
starts both at once; a new Kafka has no topics yet). So the sink never decides once, at its start, that
there is no load to store; it follows the events topic's rule instead:

* with ``--topics create`` (the default) it creates the usage topic as it creates the events topic: with
  its ``--partitions`` and no other setting, what the watcher's own creation gives a history topic
  (:func:`pipeline.io.kafka.admin.ensure_watcher_topics`). A watcher that starts later finds the topic
  and uses it as it is, as it does an events topic the sink made;
* where it may not create it (``--topics check``, or brokers that deny it Create: production ACLs leave
  that to the watcher or the operator), it looks for the topic again and again, from every
  :data:`FIRST_LOOK_S` backing off to every :data:`LOOK_MAX_S`, with one warning while it is missing,
  and starts storing the load once it appears. Samples published before that are not lost: a new
  group's first assignment reads each partition from its start (:class:`~pipeline.sink.usage_sink.UsageSink`);
* a denied Describe (an ACL without it) or a broker that does not answer is likewise warned of and
  looked at again: the events are stored meanwhile, the load once the grant or the broker comes.

Looking never creates: :func:`~pipeline.io.kafka.admin.topic_partitions` asks for metadata without
auto-creation, so a broker with ``auto.create.topics.enable`` does not make the topic with its own
defaults. A usage consumer that fails (Kafka gone) is started again after :data:`RESTART_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from pipeline.io.kafka.admin import ensure_topic, topic_partitions
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.sink_member import KafkaSinkSource
from pipeline.model.errors import ConfigError, KubetapeError
from pipeline.sink.usage_sink import UsageSink

log = logging.getLogger("kubetape.sink.usage")

FIRST_LOOK_S = 1.0
"""How soon a missing usage topic is looked for again (the watcher starting a moment later)."""
LOOK_MAX_S = 60.0
"""The longest wait between two looks for a missing usage topic (a watcher started much later)."""
RESTART_S = 5.0
"""How long a usage consumer that failed waits before it starts again."""


@dataclass(frozen=True, slots=True)
class UsageTopic:
    """The usage topic as the sink finds it: ``create`` it (with ``partitions``) or only look for it."""

    kafka: KafkaSettings
    name: str
    partitions: int
    create: bool


UsageMember = Callable[[], tuple[KafkaSinkSource, UsageSink]]
"""Makes a fresh usage consumer and its loop (once the topic exists, and again after a failure)."""


async def wait_for_usage_topic(
    topic: UsageTopic,
    stop: asyncio.Event,
    *,
    first_look_s: float = FIRST_LOOK_S,
    max_look_s: float = LOOK_MAX_S,
) -> bool:
    """True once ``topic`` exists (created here when allowed); False when ``stop`` is set first."""
    may_create = topic.create
    delay = first_look_s
    told: str | None = None  # what the last warning said: a new reason is told, a repeated one not
    absent = "it does not exist yet (the watcher creates it when it starts)"
    while not stop.is_set():
        why: str | None = absent
        try:
            if may_create:
                try:
                    if await ensure_topic(topic.kafka, topic.name, topic.partitions):
                        why = None  # created here: it shows in the metadata a moment later, nothing to tell
                except ConfigError as exc:  # denied Create: the topic is someone else's to make
                    may_create = False
                    why = absent = f"{exc}; waiting for it to be created"
            if await topic_partitions(topic.kafka, topic.name):
                if told is not None:
                    log.info(
                        "usage topic found: the recorded load is stored", extra={"ctx": {"topic": topic.name}}
                    )
                return True
        except KubetapeError as exc:  # a denied Describe, a broker that does not answer
            why = str(exc)
        except Exception as exc:  # aiokafka raises many unrelated classes for "no broker"
            why = f"Kafka at {topic.kafka.bootstrap} does not answer ({type(exc).__name__}: {exc})"
        if why is not None and why != told:
            log.warning(
                "the recorded load is not stored yet: %s; looking again, at most every %.0fs",
                why,
                max_look_s,
                extra={"ctx": {"topic": topic.name}},
            )
            told = why
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        delay = min(delay * 2, max_look_s)
    return False


async def store_usage(topic: UsageTopic, member: UsageMember, stop: asyncio.Event) -> None:
    """Wait for ``topic``, then run a usage consumer on it until ``stop`` (its samples flushed then)."""
    while not stop.is_set():
        try:
            if not await wait_for_usage_topic(topic, stop):
                return
            source, sink = member()
            async with source:
                await sink.run(stop)
            return
        except asyncio.CancelledError:
            raise
        except Exception:  # the events go on; the load is read again from the last commit
            log.exception("the usage consumer failed; starting it again in %.0fs", RESTART_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RESTART_S)


@contextlib.asynccontextmanager
async def usage_stored(
    topic: UsageTopic | None, member: UsageMember, stop: asyncio.Event, timeout_s: float
) -> AsyncIterator[None]:
    """:func:`store_usage` beside the block (nothing when ``topic`` is None: the load is not stored).
    Once ``stop`` is set the block's end waits ``timeout_s`` for the last samples to be flushed; a block
    that ends otherwise (the service failed) stops the usage consumer at once."""
    if topic is None:
        yield
        return
    task = asyncio.create_task(store_usage(topic, member, stop), name="sink-usage")
    try:
        yield
    finally:
        if stop.is_set():
            done, _ = await asyncio.wait({task}, timeout=timeout_s)
            if not done:
                log.warning("the usage loop did not flush in time; its samples are read again at next start")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
