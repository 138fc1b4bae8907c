"""The root settings of one ``kubetape`` run, built once in :func:`services.cli.main` from the flags and
the environment: how the run logs, and the chosen command's own part.

Every command registers a builder (``parser.set_defaults(settings=...)``) turning its flags into its
own frozen, typed settings: a service's (``WatchServiceSettings``, ``SinkServiceSettings``,
``ControllerServiceSettings``), the replay's spec, or a plain dataclass of the command's flags made by
:func:`from_flags`. The command's ``func`` receives its part only, never the parsed flags.
Environment variables are defaults of flags, all in :mod:`services.environment`.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, Protocol, TypeVar


@dataclass(frozen=True, slots=True)
class LogSettings:
    json_lines: bool = False
    level: int = logging.WARNING
    with_time: bool = False
    """Text lines start with the time: a service's log has it, an interactive command's warnings not."""


INTERACTIVE_LOG = LogSettings()
"""Interactive commands log short text, warnings and worse."""


class CommandSettings(Protocol):
    """A command's settings: a (frozen) dataclass, typed field by field."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class KubetapeSettings:
    log: LogSettings
    command: CommandSettings
    """The command's part, made by its builder from its flags."""


def settings_from_args(args: argparse.Namespace) -> KubetapeSettings:
    """The root settings; a builder's ConfigError (a bad flag or variable) reaches ``main`` unchanged."""
    build: Callable[[argparse.Namespace], CommandSettings] | None = getattr(args, "settings", None)
    if build is None:
        raise TypeError(
            f"`kubetape {args.command}` registers no settings builder (set_defaults(settings=...))"
        )
    return KubetapeSettings(log=log_settings(args), command=build(args))


S = TypeVar("S", bound=CommandSettings)


def from_flags(cls: type[S]) -> Callable[[argparse.Namespace], S]:
    """A builder of ``cls``, a dataclass whose fields are named as the command's flags (their ``dest``):
    each field takes its flag's value; a field without a flag keeps its default."""

    def build(args: argparse.Namespace) -> S:
        values: dict[str, Any] = {}
        for f in fields(cls):
            if hasattr(args, f.name):
                values[f.name] = getattr(args, f.name)
            elif f.default is MISSING and f.default_factory is MISSING:
                raise TypeError(f"{cls.__name__}.{f.name} has no flag of that name and no default")
        return cls(**values)

    return build


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
