"""``kubetape version`` (and ``kubetape --version``): the installed kubetape and the SimKube trace
versions it reads and writes; ``skctl version``'s counterpart."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version

from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class VersionSettings:
    """``kubetape version`` has no flags."""


def kubetape_version() -> str:
    """``kubetape X.Y.Z`` of the installed package, and the SimKube trace versions it handles."""
    from pipeline.formats.simkube.model import READABLE_VERSIONS, WRITABLE_VERSIONS, versions_text

    try:
        installed = package_version("kubetape")
    except PackageNotFoundError:  # run from a checkout that was never installed
        installed = "(not installed as a package)"
    return (
        f"kubetape {installed} (SimKube traces: reads versions {versions_text(READABLE_VERSIONS)}, "
        f"writes {versions_text(WRITABLE_VERSIONS)})"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(settings=from_flags(VersionSettings), func=_run)


def _run(_args: VersionSettings) -> int:
    print(kubetape_version())
    return 0
