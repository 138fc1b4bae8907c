"""``kubetape inspect FILE``: summarise any trace or segment file (``--json`` for machines)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "inspect", help="summarise a trace (kubetape or SimKube) or a segment file"
    )
    parser.add_argument("file", type=Path)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pipeline.formats.inspect import inspect_file

    report = inspect_file(args.file)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print(report.render_text())
    return 0
