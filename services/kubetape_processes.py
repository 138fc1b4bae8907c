"""kubetape commands run as the user runs them: a service process polled for readiness over its loopback
HTTP port, and a one-shot command whose output is returned. The demo's mission and the integration tests
drive the CLI through these, so they prove the commands rather than a shortcut."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.ports import free_port
from pipeline.stack.processes import http_probe

REPO_ROOT = Path(__file__).resolve().parents[1]


class KubetapeService:
    """A kubetape service subprocess whose readiness is polled over its loopback HTTP port."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.port = free_port()
        self.log = log
        self._log_handle = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", *argv, "--http-port", str(self.port)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StackError(
                    f"the {self.name} exited during start-up (code {self.proc.returncode}); see {self.log}"
                )
            if http_probe(f"http://127.0.0.1:{self.port}/readyz")() is None:
                return
            time.sleep(0.3)
        raise StackError(f"the {self.name} was not ready within {timeout_s:.0f}s; see {self.log}")

    def stop(self, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_handle.close()
        return self.proc.returncode


def run_kubetape(*argv: str) -> str:
    """Run one ``kubetape`` command as a user types it; its output, or a StackError with its stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(
            f"`kubetape {' '.join(argv[:2])}` failed (exit {result.returncode}):\n"
            f"{result.stderr.strip()[-2000:]}"
        )
    return result.stdout
