"""``kubetape validate TRACE...``: find what would stop a replay; ``validate explain [CODE]``: the rules.

Several traces, or directories of traces, can be checked at once (a CI job over a folder of traces);
an unreadable one is reported and the others are still checked.

Exit codes: 0 when no errors are found (warnings allowed unless ``--strict``), 1 when errors are found
(for CI), 2 when a trace is unreadable or the arguments are bad (this wins over 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from services.settings import from_flags

TRACE_SUFFIXES = (".sktrace", ".json", ".kseg", ".ktrace", ".trace")
"""What a directory argument expands to (its files with these suffixes, not recursive)."""


@dataclass(frozen=True, slots=True)
class ValidateSettings:
    traces: list[str]
    format: str = "table"
    fix: Path | None = None
    generate_skel: Path | None = None
    start: str | None = None
    end: str | None = None
    strict: bool = False
    cluster: str | None = None
    ignore: Collection[str] = ()
    """Rule codes not reported (``--ignore``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check traces (SimKube v2 msgpack/JSON, or kubetape traces/segments) for what would "
        "stop a replay. A directory stands for its "
        f"{', '.join('*' + s for s in TRACE_SUFFIXES)} files. Exit code: 0 no errors, 1 errors found "
        "(warnings too with --strict), 2 unreadable trace or bad arguments. "
        "`kubetape validate explain [CODE]` explains one rule or lists them all."
    )
    parser.add_argument(
        "traces", nargs="+", metavar="TRACE", help="trace files or directories, or 'explain [CODE]'"
    )
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="output (default: table); with several traces, JSON is one document with a 'traces' list",
    )
    parser.add_argument(
        "--fix",
        type=Path,
        default=None,
        metavar="FIX.yaml",
        help="write the recommended repairs as a transform (one trace only)",
    )
    parser.add_argument(
        "--generate-skel",
        type=Path,
        default=None,
        metavar="FIX.skel",
        help="write the repairs as a SKEL program (SimKube's language; one trace only): where --fix "
        "creates a placeholder object, the program removes the references to it (SKEL cannot create "
        "objects); a repair SKEL cannot express at all is a comment there, use --fix for it",
    )
    parser.add_argument("--start", default=None, help="check events from here: offset (90s, 5m) or @unix")
    parser.add_argument("--end", default=None, help="check events before here: offset (90s, 5m) or @unix")
    parser.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    parser.add_argument(
        "--cluster",
        default=None,
        help="with a segment store directory holding a fleet: the cluster whose segments to check "
        "(`kubetape inspect --clusters DIR` lists them)",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="CODE[,CODE]",
        help="leave out the findings of these rules (e.g. W0000 for traces that keep status); "
        "SimKube's codes mean SimKube's rules; repeatable",
    )
    parser.set_defaults(settings=from_flags(ValidateSettings), func=_run)


def _run(args: ValidateSettings) -> int:
    from pipeline.model.errors import ConfigError

    if args.traces[0] == "explain":
        if len(args.traces) > 2:
            raise ConfigError("`validate explain` takes at most one rule code")
        return _explain(args.traces[1] if len(args.traces) == 2 else None)
    args = replace(args, ignore=_ignored_codes(args.ignore))
    paths = _expand(args.traces, args.cluster)
    if args.fix is not None and len(paths) != 1:
        raise ConfigError(f"--fix writes the repairs of one trace; got {len(paths)} traces")
    if args.generate_skel is not None and len(paths) != 1:
        raise ConfigError(f"--generate-skel writes the repairs of one trace; got {len(paths)} traces")
    if len(paths) == 1:
        return _validate_one(paths[0], args)
    return _validate_many(paths, args)


def _ignored_codes(values: Collection[str]) -> set[str]:
    """The rule codes given to ``--ignore`` (ConfigError listing the known codes for an unknown one); a
    former code of kubetape's is taken with a note on stderr naming the rule's code now."""
    codes = set()
    for value in values:
        for code in value.split(","):
            if code.strip():
                codes.add(_rule_of(code.strip(), "--ignore").code)
    return codes


def _rule_of(code: str, where: str) -> Any:
    """The rule of ``code``, telling the user on stderr when ``code`` is a former code."""
    from pipeline.validate.rules import lookup

    found, note = lookup(code)
    if note is not None:  # a note when the code is current (SimKube's), a warning when it is deprecated
        level = "note" if found.code == code.upper() else "warning"
        print(f"kubetape: {level}: {where} {code}: {note}", file=sys.stderr)
    return found


def _expand(arguments: list[str], cluster: str | None) -> list[Path]:
    from pipeline.model.errors import ConfigError

    paths: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            path = _cluster_directory(path, cluster)
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in TRACE_SUFFIXES)
            if not found:
                raise ConfigError(
                    f"{path}: no trace files in this directory (looked for {', '.join(TRACE_SUFFIXES)})"
                )
            paths.extend(found)
        else:
            paths.append(path)
    return paths


def _cluster_directory(path: Path, cluster: str | None) -> Path:
    """The directory of ``cluster``'s segments when ``path`` is a segment store of a fleet (or when a
    cluster is asked for); a store of several clusters without ``--cluster`` is refused naming them."""
    from pipeline.store.store_url import CLUSTERS_DIR, LocalLocation, cluster_location

    if cluster is None and not (path / CLUSTERS_DIR).is_dir():
        return path
    location = cluster_location(LocalLocation(path), cluster)
    assert isinstance(location, LocalLocation)
    return location.path


def _findings(path: Path, args: ValidateSettings) -> list[Any]:
    from pipeline.validate.report import parse_range_bound
    from pipeline.validate.rules import validate_trace
    from pipeline.validate.tracefile import read_trace_file

    trace = read_trace_file(path)
    first_ts = trace.events[0].ts if trace.events else 0
    start = parse_range_bound(args.start, first_ts) if args.start else None
    end = parse_range_bound(args.end, first_ts) if args.end else None
    return [f for f in validate_trace(trace, start=start, end=end) if f.code not in args.ignore]


def _failing(findings: list[Any], strict: bool) -> bool:
    return any(strict or f.severity.value == "error" for f in findings)


def _validate_one(path: Path, args: ValidateSettings) -> int:
    from pipeline.model.errors import ConfigError
    from pipeline.validate.fixes import render_fix_file
    from pipeline.validate.report import findings_json, render_table

    findings = _findings(path, args)
    if args.format == "json":
        document = {"trace": str(path), **findings_json(findings), "ignored_rules": sorted(args.ignore)}
        print(json.dumps(document, indent=2))
    else:
        print(render_table(findings) + _ignored_note(args.ignore))
    if args.fix is not None:
        try:
            args.fix.write_text(render_fix_file(findings, str(path)), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{args.fix}: cannot write the fix file ({exc.strerror or exc})") from None
        print(f"repairs written to {args.fix}", file=sys.stderr)
    if args.generate_skel is not None:
        from pipeline.validate.skel.generate import fix_skel

        try:
            args.generate_skel.write_text(fix_skel(findings, str(path)), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"{args.generate_skel}: cannot write the SKEL file ({exc.strerror or exc})"
            ) from None
        print(f"repairs written as SKEL to {args.generate_skel}", file=sys.stderr)
    return 1 if _failing(findings, args.strict) else 0


def _validate_many(paths: list[Path], args: ValidateSettings) -> int:
    """Every trace in turn; an unreadable one is reported (exit 2 at the end) and the rest checked."""
    from pipeline.model.errors import ConfigError, FormatError
    from pipeline.validate.report import findings_json, render_table, summary_line

    results: list[dict[str, Any]] = []
    code = 0
    for path in paths:
        try:
            findings = _findings(path, args)
        except (ConfigError, FormatError) as exc:
            print(f"kubetape: error: {exc}", file=sys.stderr)
            results.append({"trace": str(path), "unreadable": str(exc)})
            code = 2
            continue
        if _failing(findings, args.strict):
            code = max(code, 1)
        if args.format == "json":
            results.append({"trace": str(path), **findings_json(findings)})
        else:
            print(f"== {path}\n{render_table(findings)}\n")
            results.append({"trace": str(path), "summary": summary_line(findings)})
    if args.format == "json":
        document = {"traces": results, "exit_code": code, "ignored_rules": sorted(args.ignore)}
        print(json.dumps(document, indent=2))
    else:
        print(_overview(results) + _ignored_note(args.ignore))
    return code


def _ignored_note(ignored: Collection[str]) -> str:
    return f"\n(findings of {', '.join(sorted(ignored))} left out: --ignore)" if ignored else ""


def _overview(results: list[dict[str, Any]]) -> str:
    width = max(len(r["trace"]) for r in results)
    rows = [f"{r['trace']:<{width}}  {r.get('summary') or 'UNREADABLE'}" for r in results]
    return "\n".join([f"{len(results)} traces:", *rows])


def _explain(code: str | None) -> int:
    from pipeline.validate.report import explain, list_rules
    from pipeline.validate.rules import RULES

    print(explain(_rule_of(code, "explain")) if code else list_rules(list(RULES.values())))
    return 0
