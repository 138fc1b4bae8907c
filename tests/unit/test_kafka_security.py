"""The one Kafka connection setting set: read from a properties file and $KUBETAPE_KAFKA_*, checked as a
whole, secrets masked everywhere they could be shown, and applied to every client alike."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pipeline.io.kafka.clients import connection
from pipeline.io.kafka.security import PLAINTEXT, Secret, load_security
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import ConfigError
from services.flags import add_kafka_config_flag, kafka_settings

PASSWORD = "s3cret-pa55word"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def _scram_file(tmp_path: Path, extra: str = "") -> Path:
    ca = tmp_path / "ca.crt"
    ca.write_text("not read until a client connects")
    return _file(
        tmp_path,
        "# a comment\n! another\nbootstrap.servers = broker:9093\nsecurity.protocol=SASL_SSL\n"
        f"sasl.mechanism: SCRAM-SHA-512\nsasl.username=watcher\nsasl.password={PASSWORD}\n"
        f"ssl.ca.location={ca}\n{extra}",
    )


def test_a_scram_properties_file_reads_with_the_ecosystems_names(tmp_path: Path) -> None:
    security, bootstrap = load_security(_scram_file(tmp_path), {})
    assert bootstrap == "broker:9093"
    assert (security.protocol, security.mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert security.username == "watcher"
    assert security.password == Secret(PASSWORD)
    assert security.ca_location == tmp_path / "ca.crt"
    assert security.check_hostname


def test_the_environment_overrides_the_file_and_needs_no_file(tmp_path: Path) -> None:
    env = {"KUBETAPE_KAFKA_SASL_PASSWORD": "from-env", "KUBETAPE_KAFKA_SASL_USERNAME": "sink"}
    security, _ = load_security(_scram_file(tmp_path), env)
    assert security.password == Secret("from-env")
    assert security.username == "sink"
    only_env = {
        "KUBETAPE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KUBETAPE_KAFKA_SASL_MECHANISM": "PLAIN",
        **env,
    }
    security, bootstrap = load_security(None, only_env)
    assert (security.protocol, security.mechanism, bootstrap) == ("SASL_PLAINTEXT", "PLAIN", None)
    assert load_security(None, {}) == (PLAINTEXT, None)


def test_no_secret_in_repr_str_or_description(tmp_path: Path) -> None:
    security, _ = load_security(_scram_file(tmp_path, "ssl.key.password=keypass\n"), {})
    settings = KafkaSettings("broker:9093", security=security)
    for shown in (repr(security), str(security), repr(settings), settings.describe(), str(security.password)):
        assert PASSWORD not in shown
        assert "keypass" not in shown
    assert settings.describe() == "broker:9093 (SASL_SSL, SCRAM-SHA-512 as watcher)"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", "sasl.mechanism 'GSSAPI' is not supported"),
        ("security.protocol=TLS\n", "security.protocol 'TLS' is not one of"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=u\n", "and sasl.password"),
        ("security.protocol=PLAINTEXT\nsasl.mechanism=PLAIN\n", "SASL settings are given but"),
        ("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n", "ssl.ca.location /nonexistent"),
        ("security.protocol=SSL\nssl.certificate.location=/etc/hostname\n", "needs both"),
        ("sasl.jaas.config=x\n", "read only by Java clients; set sasl.username"),
        ("sasl.pasword=typo\n", "unknown property 'sasl.pasword'"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n", "needs sasl.oauthbearer.token.file"),
        ("just a line\n", "line 1: unknown property 'just'"),
    ],
)
def test_a_mistake_is_refused_naming_the_property(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"client\.properties") as caught:
        load_security(_file(tmp_path, text), {})
    assert says in str(caught.value)


def test_every_client_gets_the_same_sasl_and_tls_arguments(tmp_path: Path) -> None:
    security, _ = load_security(_scram_file(tmp_path), {})
    settings = KafkaSettings("broker:9093", security=security)
    with pytest.raises(ConfigError, match="cannot load the Kafka TLS files"):
        connection(settings)  # the CA file above is not PEM: told at start, naming the file
    plain = connection(KafkaSettings("broker:9092"))
    assert plain == {
        "bootstrap_servers": "broker:9092",
        "security_protocol": "PLAINTEXT",
        "ssl_context": None,
    }
    sasl, _ = load_security(
        None,
        {
            "KUBETAPE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KUBETAPE_KAFKA_SASL_MECHANISM": "scram-sha-256",
            "KUBETAPE_KAFKA_SASL_USERNAME": "sink",
            "KUBETAPE_KAFKA_SASL_PASSWORD": PASSWORD,
        },
    )
    kwargs = connection(KafkaSettings("b:1", security=sasl))
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("sink", PASSWORD)


def test_a_password_file_is_read_each_time_a_client_is_built(tmp_path: Path) -> None:
    """A password rotated in a mounted Secret reaches the next client without a restart."""
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    env = {
        "KUBETAPE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KUBETAPE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "KUBETAPE_KAFKA_SASL_USERNAME": "sink",
        "KUBETAPE_KAFKA_SASL_PASSWORD_FILE": str(password_file),
    }
    security, _ = load_security(None, env)
    settings = KafkaSettings("b:1", security=security)
    assert connection(settings)["sasl_plain_password"] == PASSWORD
    password_file.write_text("rotated\n")
    assert connection(settings)["sasl_plain_password"] == "rotated"
    assert "rotated" not in repr(security)
    assert PASSWORD not in repr(security)
    password_file.write_text("")
    with pytest.raises(ConfigError, match=rf"sasl.password.file {password_file} is empty"):
        connection(settings)
    password_file.unlink()
    with pytest.raises(ConfigError, match=rf"sasl.password.file {password_file}: cannot read it"):
        connection(settings)


def test_the_environments_password_or_password_file_wins_over_the_files_other(tmp_path: Path) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("from-file")
    config = _scram_file(tmp_path)  # sasl.password inline
    security, _ = load_security(config, {"KUBETAPE_KAFKA_SASL_PASSWORD_FILE": str(password_file)})
    assert (security.password, security.password_file) == (None, password_file)
    config = _file(tmp_path, f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=u\n"
                   f"sasl.password.file={password_file}\n")  # fmt: skip
    security, _ = load_security(config, {"KUBETAPE_KAFKA_SASL_PASSWORD": "from-env"})
    assert (security.password, security.password_file) == (Secret("from-env"), None)
    both = _file(tmp_path, config.read_text() + "sasl.password=inline\n")
    with pytest.raises(ConfigError, match=r"both sasl\.password and sasl\.password\.file are set"):
        load_security(both, {})


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap")
    add_kafka_config_flag(parser)
    return parser.parse_args(list(argv))


def test_the_bootstrap_is_resolved_once_flag_then_environment_then_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = str(_scram_file(tmp_path))
    monkeypatch.delenv("KUBETAPE_BOOTSTRAP", raising=False)
    monkeypatch.delenv("KUBETAPE_KAFKA_CONFIG", raising=False)
    assert kafka_settings(_args("--kafka-config", config), client_id="x").bootstrap == "broker:9093"
    assert kafka_settings(_args(), client_id="x", default_bootstrap="d:1").bootstrap == "d:1"
    with pytest.raises(ConfigError, match="no Kafka bootstrap"):
        kafka_settings(_args(), client_id="x")
    monkeypatch.setenv("KUBETAPE_BOOTSTRAP", "env:2")
    assert kafka_settings(_args("--kafka-config", config), client_id="x").bootstrap == "env:2"
    assert kafka_settings(_args("--bootstrap", "flag:3"), client_id="x").bootstrap == "flag:3"
    monkeypatch.setenv("KUBETAPE_KAFKA_CONFIG", config)
    assert kafka_settings(_args(), client_id="x").security.username == "watcher"


def test_help_shows_no_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETAPE_KAFKA_SASL_PASSWORD", PASSWORD)
    from services.cli import build_parser

    parser = build_parser()
    for command in ("watch", "sink", "replay"):
        sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr,index]
        text = sub.format_help()
        assert "--kafka-config" in text
        assert PASSWORD not in text
