"""One component of a running KWOK cluster restarted with other flags (a replay's HPA timers).

kwokctl has no command to restart one component, and it bakes a configuration's ``componentsPatches``
into the component's command line only when the cluster is created. So the running process is the
truth: its command line is read from ``/proc``, the flags replaced or appended, and the same binary
started again as kwokctl starts it (its own session, the cluster's log and pid files, which kwokctl's
``stop``/``delete`` and :func:`~pipeline.stack.kwok.lifecycle.cluster_processes` then find). The
cluster's saved configuration (``kwok.yaml``) is left as created: a cluster stopped and started again
runs the component with its flags as created, and whoever needs other values asks again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.kwok.cluster import KwokCluster
from pipeline.stack.processes import (
    pid_alive,
    port_open,
    spawn_detached,
    terminate_process_group,
    wait_until_ready,
)

RESTART_TIMEOUT_S = 90.0
"""How long a (re)started component may take to serve its port (a loaded 2-core machine)."""


def _pid_file(cluster: KwokCluster, component: str) -> Path:
    # kwokctl names the pid file after the binary, which is the component's name for every component
    return cluster.cluster_dir / "pids" / f"{component}.pid"


def _log_file(cluster: KwokCluster, component: str) -> Path:
    return cluster.cluster_dir / "logs" / f"{component}.log"


def component_pid(cluster: KwokCluster, component: str) -> int | None:
    """The pid of the cluster's running ``component``; None when it is not running."""
    try:
        pid = int(_pid_file(cluster, component).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def component_command(cluster: KwokCluster, component: str) -> list[str] | None:
    """The running ``component``'s command line (binary, then flags); None when it is not running."""
    pid = component_pid(cluster, component)
    if pid is None:
        return None
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def flag_values(argv: Sequence[str]) -> dict[str, str]:
    """The ``--name=value`` flags of a command line, by name (the last one wins, as Go's flag parsing
    does); a flag without ``=`` maps to an empty string."""
    values = {}
    for arg in argv[1:]:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            values[name] = value
    return values


def with_flags(argv: Sequence[str], flags: Mapping[str, str]) -> list[str]:
    """``argv`` with each of ``flags`` set: an existing ``--name=...`` replaced in place (every one, so
    no earlier copy survives), a missing one appended."""
    out = [argv[0]]
    placed = set()
    for arg in argv[1:]:
        name = arg[2:].partition("=")[0] if arg.startswith("--") else None
        if name is not None and name in flags:
            if name not in placed:
                out.append(f"--{name}={flags[name]}")
                placed.add(name)
            continue
        out.append(arg)
    out += [f"--{name}={value}" for name, value in flags.items() if name not in placed]
    return out


def wait_serving(cluster: KwokCluster, component: str) -> None:
    """Return once the cluster's running ``component`` serves its port (``--secure-port``);
    StackError with its log's tail when it is not running, exits first, or does not serve in time
    (metrics-server, say, opens its port only once it has read its configuration from the apiserver)."""
    pid = component_pid(cluster, component)
    argv = component_command(cluster, component)
    log_file = _log_file(cluster, component)
    if pid is None or argv is None:
        raise StackError(f"cluster {cluster.name!r}: {component} is not running; see {log_file}")
    port_text = flag_values(argv).get("secure-port", "")
    port = int(port_text) if port_text.isdigit() else None

    def serving() -> str | None:
        if port is None or port_open(port):
            return None
        return f"nothing listens on 127.0.0.1:{port} yet"

    wait_until_ready(
        f"cluster {cluster.name!r}: {component}", pid, serving, log_file=log_file, timeout_s=RESTART_TIMEOUT_S
    )


def start_stopped_components(cluster: KwokCluster) -> None:
    """Start the cluster's components that are not running, with their flags as created (kwokctl
    skips those that run); :func:`wait_serving` tells when one serves. A component can die alone:
    metrics-server exits when the apiserver does not answer its start-up reads in time, as on a
    loaded machine, and nothing restarts it."""
    # a component that has just died is a zombie until its parent (init) reaps it, and kwokctl takes
    # a zombie for running (it only signals the pid): forget the pid files of dead components first
    for pid_file in (cluster.cluster_dir / "pids").glob("*.pid"):
        if component_pid(cluster, pid_file.stem) is None:
            pid_file.unlink(missing_ok=True)
    cluster.kwokctl("start", "cluster", timeout_s=180.0)


def restart_component(
    cluster: KwokCluster, component: str, flags: Mapping[str, str], *, binary: Path | None = None
) -> list[str]:
    """Stop the cluster's running ``component`` and start it again with ``flags`` set (and ``binary``
    in place of the running one, when given: a build the cluster was not created with); returns once
    its port serves. Returns the new command line. StackError (with the log's tail) when it is not
    running, or exits or does not serve after the restart."""
    pid = component_pid(cluster, component)
    argv = component_command(cluster, component)
    if pid is None or argv is None:
        raise StackError(
            f"cluster {cluster.name!r}: {component} is not running, so it cannot be restarted with "
            f"other flags (pid file {_pid_file(cluster, component)}); start it first "
            "(start_stopped_components)"
        )
    try:
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        cwd = cluster.cluster_dir
    wanted = with_flags([str(binary) if binary is not None else argv[0], *argv[1:]], flags)
    terminate_process_group(pid, grace_s=10.0)
    log_file = _log_file(cluster, component)
    new_pid = spawn_detached(wanted, log_file=log_file, cwd=cwd, env=cluster.env())
    _pid_file(cluster, component).write_text(str(new_pid))
    wait_serving(cluster, component)
    return wanted
