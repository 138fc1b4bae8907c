"""``kubetape xray TRACE``: browse a trace (kubetape trace or segment, SimKube v2/v3) in the terminal.

The events over time (``/`` filters by kind, namespace/name or type), an object's versions (Enter) with the
diff of one against the previous (``d``), and an owner's pods over time (``p``). Escape goes back, ``q``
quits. It takes the place of SimKube's ``skctl xray TRACE``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class XraySettings:
    trace: Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "trace", type=Path, help="the trace to browse (kubetape trace or segment, SimKube v2/v3 msgpack/JSON)"
    )
    parser.set_defaults(settings=from_flags(XraySettings), func=_run)


def _run(args: XraySettings) -> int:
    from pipeline.formats.trace import read_trace
    from pipeline.formats.xray import browse
    from services.xray_app import XrayApp  # Textual loads only for this command

    XrayApp(browse(read_trace(args.trace)), str(args.trace)).run()
    return 0
