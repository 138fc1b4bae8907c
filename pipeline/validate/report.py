"""Rendering findings for people (a table) and machines (JSON), and explaining rules."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Sequence
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.timespec import parse_duration
from pipeline.validate.comments import one_line
from pipeline.validate.findings import Finding, Rule, Severity

_HEADERS = ("CODE", "EVENT", "TS", "OBJECT", "PATH", "PROBLEM")


def summary_line(findings: Sequence[Finding]) -> str:
    """``8 findings: 7 errors, 1 warning`` (or ``no findings``)."""
    if not findings:
        return "no findings: the trace passes every rule"
    errors = sum(f.severity is Severity.ERROR for f in findings)
    warnings = len(findings) - errors
    return (
        f"{len(findings)} finding{'s' * (len(findings) != 1)}: "
        f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"
    )


def render_table(findings: Sequence[Finding]) -> str:
    """An aligned table, one finding per row (extra paths on their own rows), then a summary line."""
    rows: list[tuple[str, ...]] = []
    for f in findings:
        first, *more = f.paths or ("",)
        event = f"{f.event_index} (+{len(f.repeated_at)})" if f.repeated_at else str(f.event_index)
        # names and messages hold the trace's text: escaped, so it cannot break rows or drive the terminal
        rows.append(
            (
                f.code,
                event,
                str(f.ts),
                one_line(f.obj.describe()),
                one_line(first) or "(object)",
                one_line(f.message),
            )
        )
        rows.extend(("", "", "", "", one_line(path), "") for path in more)
    lines = []
    if rows:
        widths = [max(len(r[i]) for r in (_HEADERS, *rows)) for i in range(len(_HEADERS) - 1)]
        for row in (_HEADERS, *rows):
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            lines.append("  ".join([*cells, row[-1]]).rstrip())
        lines.append("")
    lines.append(summary_line(findings))
    if any(f.fixes for f in findings):
        lines.append(
            "repairs: `kubetape validate TRACE --fix FIX.yaml`; rules: `kubetape validate explain CODE`"
        )
    return "\n".join(lines)


def findings_json(findings: Sequence[Finding]) -> dict[str, Any]:
    """The JSON document ``kubetape validate --format json`` prints."""
    errors = sum(f.severity is Severity.ERROR for f in findings)
    return {
        "findings": [f.to_json() for f in findings],
        "errors": errors,
        "warnings": len(findings) - errors,
    }


def explain(rule: Rule) -> str:
    """What ``kubetape validate explain CODE`` prints."""
    body = textwrap.fill(rule.explanation, width=100)
    return f"{rule.code} {rule.name} ({rule.severity.value}): {rule.summary}\n\n{body}"


def list_rules(rules: Sequence[Rule]) -> str:
    """One line per rule: code, severity, name, summary."""
    width = max((len(r.name) for r in rules), default=0)
    return "\n".join(f"{r.code}  {r.severity.value:<7}  {r.name:<{width}}  {r.summary}" for r in rules)


def parse_range_bound(text: str, trace_start: int) -> int:
    """A time-range bound in Unix seconds.

    ``@1709241485`` is an absolute Unix time; anything else is an offset from the trace's first event:
    seconds (``90``) or a duration (``90s``, ``5m``, ``1h30m``; :mod:`pipeline.model.timespec`).
    """
    value = text.strip()
    try:
        if value.startswith("@"):
            return int(value[1:])
        with contextlib.suppress(ValueError):
            return trace_start + int(value)
        return trace_start + int(parse_duration(value, where=""))
    except (ValueError, ConfigError):
        raise ConfigError(
            f"invalid time {text!r}: give an offset from the trace start (90, 90s, 5m, 2h) "
            f"or an absolute Unix time (@1709241485)"
        ) from None
