"""Running external tools and supervising long-lived child processes (stdlib only)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pipeline.model.errors import MissingToolError, StackError
from pipeline.stack.progress import Reporter

_INSTALL_HINTS = {
    "java": "install a JDK 17+ (e.g. `apt-get install openjdk-17-jre-headless`)",
    "mvn": "install Maven 3.8+ (e.g. `apt-get install maven`)",
    "go": "install Go 1.26+ from your distribution or go.dev",
    "openssl": "install openssl (e.g. `apt-get install openssl`)",
}


def require_tool(name: str, purpose: str) -> str:
    """Return the path of ``name`` or fail with an error naming the tool and how to install it."""
    path = shutil.which(name)
    if path is None:
        hint = _INSTALL_HINTS.get(name, f"install {name}")
        raise MissingToolError(f"`{name}` is not on PATH but is needed to {purpose}: {hint}, then rerun.")
    return path


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def run_logged(
    argv: Sequence[str],
    *,
    step: str,
    report: Reporter,
    log_file: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    heartbeat_s: float = 30.0,
) -> None:
    """Run a long build step, teeing output to ``log_file`` and reporting a heartbeat.

    The first build of the stack takes many minutes; a heartbeat with the last output line shows it
    is moving without flooding the terminal with thousands of ``go: downloading`` lines.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    report(f"{step}: {' '.join(argv[:3])} … (log: {log_file})")
    started = time.monotonic()
    with (
        log_file.open("ab") as log,
        subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        ) as proc,
    ):
        assert proc.stdout is not None
        last_line = b""
        last_beat = started
        for line in proc.stdout:
            log.write(line)
            if line.strip():
                last_line = line.strip()
            now = time.monotonic()
            if now - last_beat >= heartbeat_s:
                last_beat = now
                latest = last_line.decode(errors="replace")[:100]
                report(f"{step}: still working ({now - started:.0f}s) — {latest}")
        code = proc.wait()
    if code != 0:
        tail = log_tail(log_file, 25)
        raise StackError(f"{step} failed with exit code {code}. Last lines of {log_file}:\n{tail}")
    report(f"{step}: done in {time.monotonic() - started:.0f}s")


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` of a component's log, for an error message."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(log unreadable)"
    return "\n".join(content[-lines:])


def wait_until_ready(
    component: str,
    pid: int,
    probe: Callable[[], str | None],
    *,
    log_file: Path,
    timeout_s: float,
    interval_s: float = 0.25,
    progress: Callable[[], object] | None = None,
    max_s: float = 600.0,
) -> None:
    """Poll ``probe`` (None when the component is ready, else what it last saw) until it is ready; a
    StackError naming the log, with its tail, when the process exits first or ``timeout_s`` passes.

    With ``progress`` (e.g. the size of the component's log), ``timeout_s`` counts from its last change
    (at most ``max_s`` in all): a start that is slow because the machine is loaded, but goes on, is
    waited for; one that has stalled is not."""
    started = time.monotonic()
    deadline = started + timeout_s
    last = "no answer yet"
    mark = progress() if progress is not None else None
    while True:
        now = time.monotonic()
        if progress is not None and (current := progress()) != mark:
            mark = current
            deadline = min(now + timeout_s, started + max_s)
        if now > deadline:
            break
        if not pid_alive(pid):
            raise StackError(f"{component} exited during start-up; see {log_file}:\n{log_tail(log_file)}")
        seen = probe()
        if seen is None:
            return
        last = seen
        time.sleep(interval_s)
    stalled = f" of no progress ({now - started:.0f}s in all)" if progress is not None else ""
    raise StackError(
        f"{component} did not become ready within {timeout_s:.0f}s{stalled} (last: {last}); "
        f"see {log_file}:\n" + log_tail(log_file)
    )


def http_probe(url: str, *, ready_below: int = 300) -> Callable[[], str | None]:
    """A readiness probe for :func:`wait_until_ready`: ready when ``url`` answers with a status below
    ``ready_below``; otherwise what it answered, or why it could not connect."""

    def probe() -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=2.0) as reply:
                status = int(reply.status)
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError as exc:
            return str(exc)
        return None if status < ready_below else f"HTTP {status}"

    return probe


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def terminate_process_group(pid: int, grace_s: float = 15.0) -> None:
    """SIGTERM the process group led by ``pid``; SIGKILL it if it outlives ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)  # the pid may not lead its own group (e.g. started by kwokctl)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_alive(pid):
                return
            time.sleep(0.1)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def spawn_detached(
    argv: Sequence[str],
    *,
    log_file: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start a long-lived process in its own session (survives the CLI; killable as a group)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc.pid
