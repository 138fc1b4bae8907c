"""A Kafka client properties file reads as java.util.Properties reads it (users copy their Java clients'
files), and no mistake in one quotes a value: a password never reaches an error, stderr or a status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.io.kafka.properties import PropertiesError, parse_properties
from pipeline.io.kafka.security import load_security
from pipeline.model.errors import ConfigError

SECRET = "hunter2-Zq9"

# (file text, the (key, value) pairs java.util.Properties.load gives for it)
JAVA_CASES = [
    ("k=v", [("k", "v")]),
    ("k:v", [("k", "v")]),
    ("k v", [("k", "v")]),
    ("k\tv", [("k", "v")]),
    ("k\fv", [("k", "v")]),
    ("  k  =  v", [("k", "v")]),
    ("k : v", [("k", "v")]),
    ("k \t v w", [("k", "v w")]),
    ("k=v  ", [("k", "v  ")]),  # Java keeps trailing whitespace (Kafka's clients trim it)
    ("k==v", [("k", "=v")]),
    ("k = = v", [("k", "= v")]),
    ("k=:v", [("k", ":v")]),
    ("k=a=b:c", [("k", "a=b:c")]),
    ("k", [("k", "")]),
    ("k=", [("k", "")]),
    ("=v", [("", "v")]),
    ("# k=v\n! k=v\n\n   \n   # indented comment", []),
    ("k=v # not a comment", [("k", "v # not a comment")]),
    ("k=#v", [("k", "#v")]),
    ("a\\=b=c", [("a=b", "c")]),
    ("a\\:b:c", [("a:b", "c")]),
    ("a\\ b c", [("a b", "c")]),
    ("\\#k=v", [("#k", "v")]),
    ("k=\\ v", [("k", " v")]),
    ("k=a\\\\b", [("k", "a\\b")]),
    ("k=a\\tb\\nc\\rd\\fe", [("k", "a\tb\nc\rd\fe")]),
    ("k=\\u0041\\u00e9", [("k", "Aé")]),
    ("k=\\q", [("k", "q")]),
    ("k=one\\\n    two\\\n three", [("k", "onetwothree")]),
    ("k=one\\\n# not a comment", [("k", "one# not a comment")]),
    ("# a comment\\\nk=v", [("k", "v")]),  # a comment line does not continue
    ("k=a\\\\\nj=b", [("k", "a\\"), ("j", "b")]),  # an even count of backslashes does not continue
    ("k=a\\\n\nj=b", [("k", "a"), ("j", "b")]),  # a continuation into an empty line ends there
    ("k=v\\", [("k", "v")]),  # a backslash ending the file
    ("k=1\r\nj=2\rl=3", [("k", "1"), ("j", "2"), ("l", "3")]),
    ("k=1\nk=2", [("k", "1"), ("k", "2")]),  # the later one wins when read as a mapping
]


@pytest.mark.parametrize(("text", "pairs"), JAVA_CASES, ids=[repr(c[0]) for c in JAVA_CASES])
def test_lines_read_as_java_reads_them(text: str, pairs: list[tuple[str, str]]) -> None:
    assert [(p.key, p.value) for p in parse_properties(text)] == pairs


def test_each_property_knows_its_first_line() -> None:
    entries = parse_properties("# c\nk=a\\\n  b\n\nj=c\n")
    assert [(p.key, p.line) for p in entries] == [("k", 2), ("j", 5)]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


@pytest.mark.parametrize("separator", ["=", ":", " ", "\t", " : ", "\t=\t"])
def test_java_separators_read_the_password(tmp_path: Path, separator: str) -> None:
    path = _write(
        tmp_path,
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=watcher\n"
        f"sasl.password{separator}{SECRET}\n",
    )
    security, _ = load_security(path, {})
    password = security.current_password()
    assert password is not None
    assert password.reveal() == SECRET


def test_a_malformed_escape_names_the_line_and_key_never_the_value(tmp_path: Path) -> None:
    with pytest.raises(PropertiesError) as parsed:
        parse_properties(f"a=b\nsasl.password={SECRET}\\u12G4\n")
    assert "line 2" in str(parsed.value)
    assert "sasl.password" in str(parsed.value)
    assert SECRET not in str(parsed.value)
    path = _write(tmp_path, f"sasl.password={SECRET}\\uZZ\n")
    with pytest.raises(ConfigError) as caught:
        load_security(path, {})
    message = str(caught.value)
    assert "client.properties" in message
    assert "line 1" in message
    assert "sasl.password" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    "text",
    [
        f"{SECRET}\n",  # a stray word (a password wrapped onto its own line)
        f"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="u" password="{SECRET}";\n',
        f"sasl.pasword={SECRET}\n",  # a typo in the name: the value is a password all the same
        f"sasl.password={SECRET}\nsecurity.protocol=PLAINTEXT\n",
        f"security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.password {SECRET}\n",
    ],
)
def test_no_mistake_quotes_a_value(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_security(_write(tmp_path, text), {})
    assert SECRET not in str(caught.value)
    assert "client.properties" in str(caught.value)


def test_a_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_bytes(b"a=b\nsasl.password=\xe9t\xe9\n")
    with pytest.raises(ConfigError, match="line 2 is not UTF-8"):
        load_security(path, {})


def test_the_cli_refuses_a_bad_file_without_the_secret_on_stderr(tmp_path: Path) -> None:
    path = _write(tmp_path, f"security.protocol=SASL_SSL\nsasl.password={SECRET}\\u00\n")
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "watch", "--kafka-config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "line 2: sasl.password" in done.stderr, done.stderr
    assert SECRET not in done.stderr + done.stdout
