"""skctl's flags where kubetape has no such setting: each is refused with a message naming the kubetape
way, instead of argparse's "unrecognized arguments" (or, worse, a flag taken for something else).

The flags are hidden from ``--help`` (they are not kubetape's); docs/simkube.md lists them all.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class _Refused(argparse.Action):
    """Stops the parse with ``instead``: what kubetape does in place of this skctl flag."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, instead: str, **kwargs: Any) -> None:
        self.instead = instead
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.error(f"{option_string} is skctl's and has no counterpart here: {self.instead}")


class _Ignored(argparse.Action):
    """Takes the flag and says on stderr why it changes nothing (what it asks for is kubetape's way)."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, why: str, **kwargs: Any) -> None:
        self.why = why
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(f"{parser.prog}: {option_string} changes nothing: {self.why}", file=sys.stderr)


def refuse(parser: argparse.ArgumentParser, *flags: str, instead: str) -> None:
    """skctl's ``flags`` (with or without a value) stop ``parser`` with ``instead``."""
    parser.add_argument(*flags, action=_Refused, instead=instead, help=argparse.SUPPRESS)


def ignore(parser: argparse.ArgumentParser, *flags: str, why: str) -> None:
    """skctl's ``flags`` (no value) are taken and change nothing; ``why`` is printed."""
    parser.add_argument(*flags, action=_Ignored, why=why, help=argparse.SUPPRESS)


NO_PROMETHEUS = (
    "kubetape starts no Prometheus for a simulation; the replay's report (--report-json) and `kubetape "
    "analytics` give its figures (docs/metrics.md)"
)
METRICS_FLAGS = (
    "--metrics-namespace",
    "--metrics-service-account",
    "--metrics-pod-monitor-namespaces",
    "--metrics-pod-monitor-names",
    "--metrics-service-monitor-namespaces",
    "--metrics-service-monitor-names",
    "--prometheus-shards",
    "--remote-write-endpoint",
)
"""``skctl run``'s Prometheus settings."""


def refuse_skctl_metrics(parser: argparse.ArgumentParser) -> None:
    """``skctl run``'s Prometheus flags: ``--disable-metrics`` is what kubetape does anyway, the others
    are refused."""
    ignore(parser, "--disable-metrics", why=NO_PROMETHEUS)
    for flag in METRICS_FLAGS:
        refuse(parser, flag, instead=NO_PROMETHEUS)


def hook_files(text: str) -> list[Path]:
    """``--hooks a.yml:b.yml`` as skctl takes it (a colon-separated list), or one file."""
    return [Path(part) for part in text.split(":") if part]
