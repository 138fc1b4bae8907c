"""BrokerAccess: one error per outage, one line when it ends, a retry delay that grows to a cap, and
the denial's words (principal, operation, resource) as a start error says them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.conn import CloseReason
from aiokafka.errors import GroupAuthorizationFailedError, KafkaConnectionError, TopicAuthorizationFailedError
from hypothesis import given
from hypothesis import strategies as st

from pipeline.io.kafka.access import (
    RETRY_MAX_S,
    RETRY_MIN_S,
    BrokerAccess,
    authorization_error,
    denied,
    login_message,
    on_login_refused,
    use_password,
)
from pipeline.io.kafka.clients import connection
from pipeline.io.kafka.security import KafkaSecurity
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import BrokerRefusedError

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


def test_a_refused_login_is_one_error_saying_where_the_new_password_goes_and_any_request_ends_it(
    tmp_path: Path,
) -> None:
    password_file = tmp_path / "password"
    security = KafkaSecurity(
        protocol="SASL_SSL", mechanism="SCRAM-SHA-256", username="sink", password_file=password_file
    )
    log = logging.getLogger("test.access.login")
    handler = _Kept()
    log.addHandler(handler)
    try:
        access = BrokerAccess(KafkaSettings("localhost:9093", security=security), log, "the sink's consumer")
        assert access.refused_login("waiting") == RETRY_MIN_S
        assert access.refused_login("waiting") == 2 * RETRY_MIN_S
        assert [access.ok, access.login_refused] == [False, True]
        assert isinstance(access.error, BrokerRefusedError)
        assert access.error.retriable
        access.accepted({"kubetape.events"})  # any request the brokers take proves the credentials
        assert [access.ok, access.login_refused] == [True, False]
    finally:
        log.removeHandler(handler)
    errors = [r.getMessage() for r in handler.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "no longer accepts the credentials of User:sink" in errors[0]
    assert f"write the current password into sasl.password.file {password_file}" in errors[0]


def test_a_password_given_inline_says_a_restart_is_needed() -> None:
    assert "restart this component" in login_message(SETTINGS)
    assert "sasl.password.file" in login_message(SETTINGS)


async def test_the_hook_tells_a_refused_login_from_other_closed_connections() -> None:
    """aiokafka reports why a connection closed to the client that opened it; only an authentication
    failure is a refused login (a broken connection or an idle one dropped is not)."""
    consumer = AIOKafkaConsumer(bootstrap_servers="localhost:9")  # never started: no network
    producer = AIOKafkaProducer(bootstrap_servers="localhost:9")
    seen: list[str] = []
    on_login_refused(consumer, lambda: seen.append("consumer"))
    on_login_refused(producer, lambda: seen.append("producer"))
    for reason in CloseReason:
        consumer._client._on_connection_closed(None, reason)
        producer.client._on_connection_closed(None, reason)
    assert seen == ["consumer", "producer"]
    on_login_refused(object(), lambda: seen.append("other"))  # a test's stand-in: nothing to hook


async def test_a_running_client_is_given_the_password_as_its_file_holds_it_now(tmp_path: Path) -> None:
    """What the watcher's producer gets once the brokers take the rotated password: the file's content,
    for the connections it opens from then on (aiokafka keeps it in one attribute of its client)."""
    password_file = tmp_path / "password"
    password_file.write_text("old\n")
    security = KafkaSecurity(
        protocol="SASL_PLAINTEXT", mechanism="SCRAM-SHA-256", username="watcher", password_file=password_file
    )
    producer = AIOKafkaProducer(**connection(KafkaSettings("localhost:9", security=security)))
    assert producer.client._sasl_plain_password == "old"
    password_file.write_text("rotated\n")
    use_password(producer, security)
    assert producer.client._sasl_plain_password == "rotated"
