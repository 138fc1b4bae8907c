"""``kubetape report REPORT.json --html OUT.html``: one replay's report as a page to read or share.

REPORT.json is the report one replay wrote: ``kubetape replay --report-json FILE``, the demo's
``replay-*.json`` in its workdir, or a sweep run directory's ``report.json`` (the directory works too).
The page puts the verdict first (HELD, DEGRADED, FAILED or UNMEASURED, with its reasons), then the
replay's figures and, per recorded owner, its pods running recorded against replayed. Without
``--html`` the verdict, its reasons and the per-owner figures are printed. Several replays side by side
are ``kubetape compare RUN… --html``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.model.errors import ConfigError
from services.settings import from_flags

REPORT_NAME = "report.json"
"""A sweep run directory's report."""


@dataclass(frozen=True, slots=True)
class ReportSettings:
    report: Path
    html: Path | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "report",
        type=Path,
        metavar="REPORT.json",
        help="a replay's JSON report (replay --report-json, the demo's replay-*.json, or a run directory)",
    )
    parser.add_argument("--html", type=Path, default=None, help="write the report as one self-contained page")
    parser.set_defaults(settings=from_flags(ReportSettings), func=_run)


def read_report(path: Path) -> dict[str, Any]:
    """The replay report in ``path`` (a run directory: its ``report.json``); ConfigError naming the file
    and what to give instead when it is missing or not JSON."""
    file = path / REPORT_NAME if path.is_dir() else path
    try:
        doc = json.loads(file.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"{file}: no such file; give the JSON a replay wrote (kubetape replay --report-json FILE)"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{file}: not JSON ({exc}); give the JSON a replay wrote") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{file}: not a kubetape replay report (a JSON object is expected)")
    return doc


def _run(args: ReportSettings) -> int:
    from pipeline.analytics.replay_page import render_replay_report
    from services.commands.demo import owner_table

    report = read_report(args.report)
    page = render_replay_report(report, str(args.report))  # checks the report's shape first
    fidelity = report["owner_fidelity"]
    print(f"{str(fidelity.get('verdict', 'unknown')).upper()}: replay {report.get('replay_name', '?')}")
    for reason in fidelity.get("reasons") or ():
        print(f"  {reason}")
    table = owner_table(report)
    if table:
        print(table)
    if args.html is not None:
        args.html.write_text(page)
        print(f"wrote {args.html}")
    return 0
