"""One root settings object per run: how it logs, and the chosen command's part (no cluster needed)."""

from __future__ import annotations

import argparse
import logging

import pytest

from pipeline.model.errors import ConfigError
from pipeline.sink.compactor import CompactionSettings
from pipeline.sink.service import SinkServiceSettings
from services.cli import build_parser
from services.commands.inspect import InspectSettings
from services.controller_service import ControllerServiceSettings
from services.settings import INTERACTIVE_LOG, KubetapeSettings, LogSettings, settings_from_args
from services.watch_service import WatchServiceSettings


def root(*argv: str) -> KubetapeSettings:
    return settings_from_args(build_parser().parse_args(list(argv)))


def test_a_service_takes_its_frozen_settings_and_logs_as_a_service() -> None:
    settings = root("watch", "--kubeconfig", "k.yaml", "--log-format", "text", "--log-level", "debug")
    assert isinstance(settings.command, WatchServiceSettings)
    assert settings.log == LogSettings(json_lines=False, level=logging.DEBUG, with_time=True)
    assert root("sink", "--bootstrap", "b:9092").log.json_lines  # the sink logs JSON lines only


def test_an_interactive_command_takes_its_typed_settings_and_logs_short_text() -> None:
    settings = root("inspect", "trace.kseg")
    assert settings.log == INTERACTIVE_LOG
    assert settings.command == InspectSettings(file="trace.kseg")


def test_analytics_is_a_service_over_kafka_only() -> None:
    assert root("analytics", "run", "timeline", "--trace", "t.kseg").log == INTERACTIVE_LOG
    assert root("analytics", "run", "timeline", "--bootstrap", "b:9092").log.json_lines


def test_the_controller_settings_are_checked_when_built() -> None:
    settings = root("controller", "--identity", "me", "--http-port", "0")
    assert isinstance(settings.command, ControllerServiceSettings)
    assert (settings.command.controller.identity, settings.command.http.port) == ("me", 0)
    with pytest.raises(ConfigError, match="--renew-interval"):
        root("controller", "--renew-interval", "20")


def test_every_command_turns_its_flags_into_typed_settings() -> None:
    def leaves(name: str, parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
        verbs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not verbs:
            return [(name, parser)]
        return [leaf for v in verbs for n, p in v.choices.items() for leaf in leaves(f"{name} {n}", p)]

    commands = leaves("kubetape", build_parser())
    assert len(commands) >= 14
    unbuilt = [name for name, parser in commands if parser.get_default("settings") is None]
    assert unbuilt == []


def _compaction(*argv: str) -> CompactionSettings:
    command = root("sink", "--bootstrap", "b:9092", *argv).command
    assert isinstance(command, SinkServiceSettings)
    return command.sink.compaction


def test_the_sink_writes_keyframes_by_count_and_cost_unless_told_count_alone() -> None:
    assert (_compaction().keyframe_every, _compaction().keyframe_cost) == (60, 4.0)
    told = _compaction("--keyframe-every", "10", "--keyframe-cost", "0")
    assert (told.keyframe_every, told.keyframe_cost) == (10, None)
    with pytest.raises(ConfigError, match="--keyframe-cost 0 or more"):
        _compaction("--keyframe-cost", "-1")
