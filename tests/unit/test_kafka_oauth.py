"""OAUTHBEARER: the token file read at every login, a broker's error challenge answered so the refusal
reaches aiokafka as an authentication failure, and the token's expiry told from its claims."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.conn import AIOKafkaConnection

from pipeline.io.kafka.access import login_message
from pipeline.io.kafka.oauth import MAX_TOKEN_BYTES, TokenFile, read_token, token_expiry
from pipeline.io.kafka.security import KafkaSecurity
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import ConfigError
from pipeline.stack.kafka_security import unsecured_token


def _connection(token_file: Path) -> AIOKafkaConnection:
    return AIOKafkaConnection(
        "localhost",
        9092,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=TokenFile(token_file),
    )


async def test_each_login_reads_the_token_the_file_holds_then(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    provider = TokenFile(token_file)
    assert await provider.token() == "first"
    token_file.write_text("renewed")
    assert await provider.token() == "renewed"


async def test_a_refusing_brokers_challenge_is_answered_so_that_the_login_fails_with_its_code(
    tmp_path: Path,
) -> None:
    """What aiokafka's connection does at each login, step by step: the token, then (the broker's
    RFC 7628 error challenge) the 0x01 answer; a broker that takes the token replies with nothing."""
    token_file = tmp_path / "token"
    token_file.write_text("the-token")
    refused = _connection(token_file).authenticator_oauth()
    payload, expect_response = await refused.step(None)
    assert payload == b"n,,\x01auth=Bearer the-token\x01\x01"
    assert expect_response
    assert await refused.step(b'{"status":"invalid_token"}') == (b"\x01", True)
    assert await refused.step(b"") is None
    taken = _connection(token_file).authenticator_oauth()
    await taken.step(None)
    assert await taken.step(b"") is None


def test_a_token_file_too_large_or_not_text_or_missing_is_named(tmp_path: Path) -> None:
    big, binary = tmp_path / "big", tmp_path / "binary"
    with big.open("wb") as file:
        file.truncate(1 << 34)  # sparse: never read whole
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=f"{big}: larger than {MAX_TOKEN_BYTES} bytes"):
        read_token(big)
    with pytest.raises(ConfigError, match="not text"):
        read_token(binary)
    with pytest.raises(ConfigError, match=r"sasl\.oauthbearer\.token\.file .*missing"):
        read_token(tmp_path / "missing")


@pytest.mark.parametrize(
    ("lifetime_s", "says"),
    [
        (-60.0, "expires 2026-11-27 07:59:00 UTC: expired"),
        (3600.0, "expires 2026-11-27 09:00:00 UTC: valid now"),
    ],
)
def test_the_expiry_of_the_token_in_the_file_is_told(tmp_path: Path, lifetime_s: float, says: str) -> None:
    now = 1_795_766_400.0  # 2026-11-27 08:00:00 UTC
    token_file = tmp_path / "token"
    token_file.write_text(unsecured_token("sink", lifetime_s, now=now))
    assert token_expiry(token_file, now=now) == says


@pytest.mark.parametrize(
    "text",
    ["opaque-token", "a.b.c", "a.eyJzdWIiOiJzaW5rIn0.", "a.eyJleHAiOiJzb29uIn0.", "a.eyJleHAiOjFlMzB9."],
)
def test_a_token_without_a_readable_expiry_leaves_it_out(tmp_path: Path, text: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(text)
    assert token_expiry(token_file) == ""


def test_the_refused_login_message_names_the_token_file_and_its_expiry(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(unsecured_token("sink", -60))
    security = KafkaSecurity(protocol="SASL_SSL", mechanism="OAUTHBEARER", oauth_token_file=token_file)
    text = login_message(KafkaSettings("kafka:9093", security=security))
    assert f"write a current token into sasl.oauthbearer.token.file {token_file}" in text
    assert text.endswith(": expired")  # the token file's own exp claim
    assert token_file.read_text() not in text  # the token itself is a secret
