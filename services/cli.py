"""The ``kubetape`` command line: one subcommand module per capability, wired here once.

Every user-facing error is a :class:`~pipeline.model.errors.KubetapeError`; it is printed as one clear
message with exit code 2 (bad input/config) or 1 (anything else), never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from pipeline.model.errors import ConfigError, FormatError, KubetapeError
from services.logs import configure_logging
from services.settings import settings_from_args

# Each module exposes ``register(subparsers)``, which adds its subcommand and sets ``func``.
COMMAND_MODULES = (
    "services.commands.stack",
    "services.commands.demo",
    "services.commands.inspect",
    "services.commands.replay",
    "services.commands.watch",
    "services.commands.sink",
    "services.commands.export",
    "services.commands.validate",
    "services.commands.transform",
    "services.commands.sim",
    "services.commands.controller",
    "services.commands.analytics",
    "services.commands.compare",
    "services.commands.sweep",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubetape",
        description="Record what a Kubernetes cluster does onto Kafka and replay it in a simulated cluster.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        # the one root of settings: every command takes its part of it, services their frozen settings
        settings = settings_from_args(args)
        configure_logging(settings.log)
        code: int = args.func(settings.command)
    except (ConfigError, FormatError) as exc:
        print(f"kubetape: error: {exc}", file=sys.stderr)
        return 2
    except KubetapeError as exc:
        print(f"kubetape: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Output piped into `head` and friends: the reader left, nothing went wrong here.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("kubetape: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
