"""The root settings of one ``kubetape`` run, built once in :func:`services.cli.main` from the flags and
the environment: how the run logs, and the chosen command's own part.

A command that runs a service registers a builder (``parser.set_defaults(settings=...)``) turning its
flags into that service's frozen settings (``WatchServiceSettings``, ``SinkServiceSettings``,
``ControllerServiceSettings``); the others take their parsed flags as they are. Either way the
command's ``func`` receives its part only.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class LogSettings:
    json_lines: bool = False
    level: int = logging.WARNING
    with_time: bool = False
    """Text lines start with the time: a service's log has it, an interactive command's warnings not."""


INTERACTIVE_LOG = LogSettings()
"""Interactive commands log short text, warnings and worse."""


@dataclass(frozen=True, slots=True)
class KubetapeSettings:
    log: LogSettings
    command: Any
    """The command's part: its service's settings, or the parsed flags of a command without a builder."""


def settings_from_args(args: argparse.Namespace) -> KubetapeSettings:
    """The root settings; a builder's ConfigError (a bad flag or variable) reaches ``main`` unchanged."""
    build: Callable[[argparse.Namespace], Any] | None = getattr(args, "settings", None)
    return KubetapeSettings(log=log_settings(args), command=args if build is None else build(args))


def log_settings(args: argparse.Namespace) -> LogSettings:
    """A service (flags from :func:`services.flags.add_log_flags`) logs JSON lines, or timed text, at its
    ``--log-level``; anything else as :data:`INTERACTIVE_LOG`."""
    service_log: bool | Callable[[argparse.Namespace], bool] = getattr(args, "service_log", False)
    if callable(service_log):  # a command that is a service only in some of its forms
        service_log = service_log(args)
    if not service_log:
        return INTERACTIVE_LOG
    return LogSettings(
        json_lines=args.log_format == "json", level=getattr(logging, args.log_level.upper()), with_time=True
    )
