"""BrokerAccess: one error per outage, one line when it ends, a retry delay that grows to a cap, and
the denial's words (principal, operation, resource) as a start error says them."""

from __future__ import annotations

import logging

import pytest
from aiokafka.errors import GroupAuthorizationFailedError, KafkaConnectionError, TopicAuthorizationFailedError
from hypothesis import given
from hypothesis import strategies as st

from pipeline.io.kafka.access import RETRY_MAX_S, RETRY_MIN_S, BrokerAccess, authorization_error, denied
from pipeline.io.kafka.security import KafkaSecurity
from pipeline.io.kafka.settings import KafkaSettings

SETTINGS = KafkaSettings(
    "localhost:9093", security=KafkaSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-512", username="sink")
)


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@given(st.lists(st.sampled_from(["denied", "accepted", "other topic accepted", "tick"]), max_size=60))
def test_each_outage_is_logged_once_and_its_end_once(steps: list[str]) -> None:
    log = logging.getLogger("test.access")
    handler = _Kept()
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    clock = _Clock()
    access = BrokerAccess(SETTINGS, log, "the sink's consumer", clock)
    ok, outages, ends, delay = True, 0, 0, RETRY_MIN_S  # the reference model
    try:
        for step in steps:
            if step == "tick":
                clock.now += 1.0
            elif step == "denied":
                outages += ok
                delay = RETRY_MIN_S if ok else delay
                assert access.refused("Read", "topic", "kubetape.events", "waiting") == delay
                delay = min(delay * 2, RETRY_MAX_S)
                ok = False
                assert access.quiet_for() == 0.0
            elif step == "other topic accepted":  # proves nothing about the denied topic
                access.accepted({"kubetape.state"})
            else:
                ends += not ok
                access.accepted({"kubetape.events", "kubetape.state"})
                ok = True
            assert access.ok is ok
    finally:
        log.removeHandler(handler)
    levels = [r.levelno for r in handler.records]
    assert levels.count(logging.ERROR) == outages
    assert levels.count(logging.INFO) == ends


def test_the_denial_names_the_principal_the_operation_and_the_group() -> None:
    text = str(denied(SETTINGS, "Read", "kubetape-sink.eu", "consumer group"))
    assert "denies User:sink the operation Read on consumer group 'kubetape-sink.eu'" in text
    assert "grant it" in text


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TopicAuthorizationFailedError("kubetape.events"), ("topic", "kubetape.events")),
        (TopicAuthorizationFailedError({"kubetape.events"}), ("topic", "kubetape.events")),
        (GroupAuthorizationFailedError("kubetape-sink"), ("consumer group", "kubetape-sink")),
        (KafkaConnectionError("down"), None),
    ],
)
def test_authorization_errors_are_told_from_others(error: Exception, expected: object) -> None:
    assert authorization_error(error) == expected
