"""No Kafka secret reaches ``--help``: with every secret the environment can hold set, the help of every
command (and of every subcommand below it) shows none of them (issue 31: secrets never in --help)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from services.cli import build_parser

SECRETS = {
    "KUBETAPE_KAFKA_SASL_PASSWORD": "pw-5f0c1e",
    "KUBETAPE_KAFKA_SSL_KEY_PASSWORD": "keypw-9a7b2d",
    "KUBETAPE_KAFKA_SASL_USERNAME": "user-3e8d41",  # not a secret, but it must not show either
}


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def test_no_command_shows_a_kafka_secret_from_the_environment_in_its_help(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    helps = {parser.prog: parser.format_help() for parser in _parsers(build_parser())}
    assert len(helps) > 20  # every command was reached
    shown = {prog: [v for v in SECRETS.values() if v in text] for prog, text in helps.items()}
    assert not any(shown.values()), {prog: found for prog, found in shown.items() if found}
