"""The ``kubetape`` command line: one subcommand module per capability, wired here once.

Every user-facing error is a :class:`~pipeline.model.errors.KubetapeError`; it is printed as one clear
message with exit code 2 (bad input/config) or 1 (anything else), never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.model.errors import ConfigError, FormatError, KubetapeError
from services.logs import configure_logging
from services.settings import settings_from_args


@dataclass(frozen=True, slots=True)
class Command:
    """One ``kubetape`` command: its module ``services.commands.<name>`` has ``add_arguments(parser)``,
    which adds its flags and sets ``func`` (and, for a service, the ``settings`` builder)."""

    name: str
    help: str
    shows_doc: bool = False
    """``--help`` shows the module's docstring, line breaks kept."""


COMMANDS = (
    Command("stack", "build, start, inspect and stop the local stack (Kafka + KWOK clusters, no Docker)"),
    Command("demo", "record a scripted workload on the local stack and replay it faster (the mission)"),
    Command("inspect", "summarise a trace (kubetape or SimKube) or a segment file"),
    Command(
        "xray", "browse a trace in the terminal: events over time, object versions and diffs, pods", True
    ),
    Command("list", "the recordings in a segment store (per cluster), or the Simulations in a cluster"),
    Command("describe", "one recording of a segment store, or one Simulation, in detail"),
    Command("replay", "replay a trace (kubetape or SimKube .sktrace) into a simulated KWOK cluster", True),
    Command("watch", "list+watch a cluster and publish its changes to Kafka (read-only on the cluster)"),
    Command("sink", "compact the events topic into durable trace segments; serve health, metrics, export"),
    Command(
        "topics",
        "create kubetape's Kafka topics (replicas, min.insync.replicas, compaction) or describe them",
    ),
    Command("export", "write a time range of the segment store as one self-contained trace file"),
    Command(
        "validate", "check traces for what would stop a replay (missing references, invalid objects, ...)"
    ),
    Command(
        "transform",
        "apply a transform file (YAML) or a SKEL program (.skel, SimKube's) to a trace",
    ),
    Command("sim", "create and drive Simulation resources (replays run by `kubetape controller`)"),
    Command("controller", "run the Simulation controller (replayer Jobs, one simulation at a time)"),
    Command(
        "analytics",
        "run analytics consumers (timeline → Parquet, Prometheus metrics) over Kafka or a trace",
        True,
    ),
    Command(
        "compare",
        "fidelity of replays against their recording and run-vs-run differences with intervals",
        True,
    ),
    Command("report", "one replay's report (its JSON) as an HTML page, verdict first", True),
    Command(
        "sweep",
        "replay a trace under a grid of parameters and report the cost/reliability Pareto frontier",
        True,
    ),
    Command("version", "print kubetape's version (also `kubetape --version`)"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubetape",
        description="Record what a Kubernetes cluster does onto Kafka and replay it in a simulated cluster.",
    )
    parser.add_argument("-V", "--version", action=_VersionAction, help="print kubetape's version and exit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        module = importlib.import_module(f"services.commands.{command.name}")
        described: dict[str, Any] = (
            {"description": module.__doc__, "formatter_class": argparse.RawDescriptionHelpFormatter}
            if command.shows_doc
            else {}
        )
        module.add_arguments(subparsers.add_parser(command.name, help=command.help, **described))
    return parser


class _VersionAction(argparse.Action):
    """``kubetape --version``: what ``kubetape version`` prints (argparse's own action needs the text
    when the parser is built; this reads the installed version only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        from services.commands.version import kubetape_version

        print(kubetape_version())
        parser.exit()


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
