"""How long each test directory (unit, integration, e2e) took within one pytest session, for the phase
times scripts/test.sh prints at the end of a run.

A directory's time is the wall time from the start of its first test to the end of its last, set-up and
tear-down included: the session's local stack starts in the first integration test's set-up and stops in
the last test's tear-down, and those belong to the suite's time too. Written only when
``KUBETAPE_PHASE_TIMES`` names a file, by the controlling process (not by pytest-xdist's workers).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

_spans: dict[str, list[float]] = {}
"""Per test directory: [start of its first test, end of its last test] (monotonic seconds)."""


def _directory(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def pytest_runtest_logstart(nodeid: str) -> None:
    span = _spans.setdefault(_directory(nodeid), [time.monotonic(), time.monotonic()])
    span[1] = time.monotonic()


def pytest_runtest_logfinish(nodeid: str) -> None:
    _spans[_directory(nodeid)][1] = time.monotonic()


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("KUBETAPE_PHASE_TIMES")
    if not target or hasattr(session.config, "workerinput") or not _spans:
        return
    ordered = sorted(_spans.items(), key=lambda item: item[1][0])
    Path(target).write_text("".join(f"{name} {end - start:.0f}\n" for name, (start, end) in ordered))
