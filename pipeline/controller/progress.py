"""Reading a repetition's outcome back from its Job and pod: the Simulation's status is derived, not kept.

The replayer writes its JSON report to the termination-log file; the kubelet copies it (at most 4 KiB)
into the pod's status. When the replayer fails, ``FallbackToLogsOnError`` puts its last log lines there
instead, which end with ``kubetape: error: …`` saying what was wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_MESSAGE = 600
"""Status messages are cut to this many characters (a full log tail would crowd ``kubectl get``)."""


@dataclass(frozen=True, slots=True)
class RepetitionResult:
    index: int
    job: str
    phase: str
    """Running, Succeeded or Failed."""
    start_time: str | None = None
    completion_time: str | None = None
    applied: int | None = None
    failed: int | None = None
    lateness_p99_ms: float | None = None
    wall_seconds: float | None = None
    message: str = ""

    def to_status(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"index": self.index, "job": self.job, "phase": self.phase}
        optional = {
            "startTime": self.start_time,
            "completionTime": self.completion_time,
            "applied": self.applied,
            "failed": self.failed,
            "latenessP99Ms": self.lateness_p99_ms,
            "wallSeconds": self.wall_seconds,
            "message": self.message or None,
        }
        doc.update({key: value for key, value in optional.items() if value is not None})
        return doc


def _condition(job: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            found: Mapping[str, Any] = cond
            return found
    return None


def termination_message(pods: Sequence[Mapping[str, Any]]) -> str:
    """The replay container's termination message of the most recent finished pod ('' if none)."""
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            message = terminated.get("message")
            if message:
                return str(message)
    return ""


def _error_line(message: str) -> str:
    """The line of a log tail that says what went wrong (the CLI prints ``kubetape: error: …``)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if "error" in line.lower():
            return line[:MAX_MESSAGE]
    return (lines[-1] if lines else "")[:MAX_MESSAGE]


def repetition_result(
    index: int, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
) -> RepetitionResult:
    """The outcome of repetition ``index`` from its Job's conditions and its pod's termination message."""
    status = job.get("status") or {}
    name = job["metadata"]["name"]
    start, end = status.get("startTime"), status.get("completionTime")
    failed = _condition(job, "Failed")
    message = termination_message(pods)
    if failed is not None:
        why = _error_line(message) or str(failed.get("message") or failed.get("reason") or "the Job failed")
        end = end or failed.get("lastTransitionTime")
        return RepetitionResult(index, name, "Failed", start, end, message=f"replayer failed: {why}")
    if _condition(job, "Complete") is None:
        return RepetitionResult(index, name, "Running", start)
    report, complete = read_report(message)
    if report is None:
        note = "no report in the pod's termination message" if not message else "the report is unreadable"
        return RepetitionResult(
            index, name, "Succeeded", start, end, message=f"{note}; see `kubectl logs job/{name}`"
        )
    events = report.get("events") or {}
    lateness = report.get("lateness_ms") or {}
    return RepetitionResult(
        index,
        name,
        "Succeeded",
        start,
        end,
        applied=_int(events.get("applied")),
        failed=_int(events.get("failed")),
        lateness_p99_ms=_float(lateness.get("p99")),
        wall_seconds=_float(report.get("wall_seconds")),
        message="" if complete else f"report cut at 4 KiB; the full one: `kubectl logs job/{name}`",
    )


def read_report(message: str) -> tuple[dict[str, Any] | None, bool]:
    """The replay report in a termination message: (report, complete).

    The kubelet keeps only the first 4 KiB, and a report with its timelines is usually longer; the
    summary fields near its start (``events``, ``lateness_ms``) are then read from the cut text.
    """
    if not message.strip():
        return None, False
    try:
        report = json.loads(message)
    except json.JSONDecodeError:
        pass
    else:
        return (report, True) if isinstance(report, dict) else (None, False)
    decoder = json.JSONDecoder()
    partial: dict[str, Any] = {}
    for key in _SUMMARY_KEYS:
        at = message.find(f'"{key}":')
        if at < 0:
            continue
        start = at + len(key) + 3
        try:
            value, _ = decoder.raw_decode(message[start:].lstrip())
        except json.JSONDecodeError:
            continue  # this field was cut off
        partial[key] = value
    return (partial, False) if partial else (None, False)


_SUMMARY_KEYS = ("events", "lateness_ms", "wall_seconds")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
