"""The Kafka send errors that waiting does not cure: the broker refusing what a batch holds, however
often it is resent (:func:`refused`), and the idempotent producer's sequence numbers no longer matching
the broker's (:func:`producer_state_lost`).

Apart from :mod:`.publisher` because the publisher's batch sending (:mod:`.publisher_batches`) and the
sink's consumer group member (:mod:`.sink_member`) ask it too.
"""

from __future__ import annotations

from aiokafka import errors as kafka_errors
from aiokafka.errors import KafkaError

REFUSED_ERRORS: tuple[type[KafkaError], ...] = tuple(
    getattr(kafka_errors, name)
    for name in (
        "MessageSizeTooLargeError",  # the batch exceeds the topic's max.message.bytes
        "RecordListTooLargeError",
        "RecordTooLargeError",
        "RecordBatchTooLargeError",
        "InvalidTimestampError",  # outside the topic's message.timestamp.*.max.ms
        "InvalidRecordError",
        "CorruptRecordException",
    )
    if hasattr(kafka_errors, name)
)
"""Errors by which the broker refuses what a batch holds, however often it is resent."""


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the broker refusing a batch's content (not a connection or leader problem)."""
    return isinstance(exc, REFUSED_ERRORS)


def producer_state_lost(exc: BaseException) -> bool:
    """Whether the idempotent producer's sequence numbers no longer match the broker's."""
    return isinstance(exc, kafka_errors.OutOfOrderSequenceNumber | kafka_errors.InvalidProducerEpoch)
