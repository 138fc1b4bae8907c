"""``kubetape validate TRACE``: find what would stop a replay; ``validate explain [CODE]``: the rules.

Exit codes: 0 when no errors are found (warnings allowed unless ``--strict``), 1 when errors are found
(for CI), 2 for unreadable traces or bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "validate",
        help="check a trace for what would stop a replay (missing references, unplaceable objects, ...)",
        description="Check a trace (SimKube v2 msgpack/JSON, or a kubetape trace) for what would stop a "
        "replay. `kubetape validate explain [CODE]` explains one rule or lists them all.",
    )
    parser.add_argument("trace", help="the trace file, or 'explain' to explain rules")
    parser.add_argument("code", nargs="?", default=None, help="with 'explain': the rule code (e.g. E0002)")
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="output (default: table)"
    )
    parser.add_argument(
        "--fix",
        type=Path,
        default=None,
        metavar="FIX.yaml",
        help="write the recommended repairs as a transform",
    )
    parser.add_argument("--start", default=None, help="check events from here: offset (90s, 5m) or @unix")
    parser.add_argument("--end", default=None, help="check events before here: offset (90s, 5m) or @unix")
    parser.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pipeline.model.errors import ConfigError
    from pipeline.validate.fixes import render_fix_file
    from pipeline.validate.report import findings_json, parse_time, render_table
    from pipeline.validate.rules import validate_trace
    from pipeline.validate.tracefile import read_trace_file

    if args.trace == "explain":
        return _explain(args.code)
    if args.code is not None:
        raise ConfigError(f"unexpected argument {args.code!r} (only `validate explain` takes a code)")
    trace = read_trace_file(Path(args.trace))
    first_ts = trace.events[0].ts if trace.events else 0
    start = parse_time(args.start, first_ts) if args.start else None
    end = parse_time(args.end, first_ts) if args.end else None
    findings = validate_trace(trace, start=start, end=end)
    if args.format == "json":
        print(json.dumps(findings_json(findings), indent=2))
    else:
        print(render_table(findings))
    if args.fix is not None:
        try:
            args.fix.write_text(render_fix_file(findings, args.trace), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{args.fix}: cannot write the fix file ({exc.strerror or exc})") from None
        print(f"repairs written to {args.fix}", file=sys.stderr)
    failing = [f for f in findings if args.strict or f.severity.value == "error"]
    return 1 if failing else 0


def _explain(code: str | None) -> int:
    from pipeline.validate.report import explain, list_rules
    from pipeline.validate.rules import RULES, rule

    print(explain(rule(code)) if code else list_rules(list(RULES.values())))
    return 0
