"""How much memory one statement costs at its peak, measured in a fresh Python process of its own.

``ru_maxrss`` of the test's own process says nothing of the statement: a pytest worker that peaked
higher earlier (another test, or the test building its input) hides any growth below that peak. Nor
is a child's ``ru_maxrss`` its own: at ``exec`` the kernel carries the high-water mark of the process
that started it into the new program's (``bench/peak_of.py`` says more). A fresh process's
``VmHWM`` (``/proc/self/status``) is the peak of its own address space only, so the child reads it
before and after the statement, once its imports and input are in place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import json


def _peak_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise SystemExit("no VmHWM in /proc/self/status: peak memory is measured on Linux only")


{prepare}
_before = _peak_kib()
_error = ""
try:
{statement}
except Exception as exc:
    _error = f"{{type(exc).__name__}}: {{exc}}"
print(json.dumps({{"grown_kib": _peak_kib() - _before, "error": _error}}))
"""


@dataclass(frozen=True, slots=True)
class PeakGrowth:
    grown_kib: int
    """How far the statement raised the process's peak resident memory, in KiB."""
    error: str
    """The exception the statement raised, as ``Type: message`` (empty when it raised none)."""


def peak_growth(statement: str, *, prepare: str = "") -> PeakGrowth:
    """Run ``prepare`` (imports, reading the input from a file), then ``statement``, in a new Python
    process importing this checkout's code, and return how much ``statement`` raised its peak."""
    script = _CHILD.format(
        prepare=textwrap.dedent(prepare), statement=textwrap.indent(textwrap.dedent(statement), "    ")
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"the measuring process failed: {result.stderr[-2000:]}"
    measured = json.loads(result.stdout.splitlines()[-1])
    return PeakGrowth(int(measured["grown_kib"]), str(measured["error"]))
