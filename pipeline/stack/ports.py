"""Ports for the stack's servers, never handed to two stacks of this machine at once.

The kernel's answer to "bind port 0" is a port free at that instant; it stays free only until someone binds
it. Two stacks starting at the same time (the test suite's two workers, each with its own stack) can be
given the same port for their Kafka, s3proxy or Karpenter before either server has bound it, and the
loser then fails to start. So every port handed out is remembered, under a machine-wide lock, for
``RESERVED_S`` seconds (far longer than a server takes to bind), and the kernel's answer is not taken again
in that time.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.machine_locks import machine_lock
from pipeline.stack.versions import cache_root

RESERVED_S = 600.0
DRAWS = 50
"""How many times the kernel is asked before giving up; it hands out ports from thousands, so one
reserved port is seldom drawn twice in a row."""


def kernel_free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now, as the kernel picks it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_port(draw: Callable[[], int] = kernel_free_port) -> int:
    """A TCP port on 127.0.0.1 that is free now and not handed to any stack of this machine in the last
    ``RESERVED_S`` seconds; it is reserved for the caller for that long."""
    registry = cache_root() / "locks" / "ports.json"
    with machine_lock("ports"):
        now = time.time()
        reserved = {port: until for port, until in _read(registry).items() if until > now}
        for _ in range(DRAWS):
            port = draw()
            if port not in reserved:
                reserved[port] = now + RESERVED_S
                _write(registry, reserved)
                return port
    raise StackError(
        f"no free TCP port on 127.0.0.1 outside the {len(reserved)} reserved by this machine's stacks "
        f"(in {registry}) after {DRAWS} tries: free some ports, or delete that file if no stack is starting"
    )


def _read(registry: Path) -> dict[int, float]:
    """The reservations in ``registry``; a missing or unreadable file (our own scratch state, written
    whole by rename) holds none."""
    try:
        raw = json.loads(registry.read_text())
        return {int(port): float(until) for port, until in raw.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _write(registry: Path, reserved: dict[int, float]) -> None:
    scratch = registry.with_name(f"{registry.name}.{os.getpid()}.tmp")
    scratch.write_text(json.dumps({str(port): until for port, until in sorted(reserved.items())}))
    scratch.replace(registry)
