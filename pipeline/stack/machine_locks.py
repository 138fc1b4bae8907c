"""Locks shared by every stack of this machine (in the build cache, which they share).

One builder per cache entry: a second process that needs the same entry waits for the first. Tests,
benchmarks and ``scripts/bootstrap.sh`` may all start the stack at once on a new machine; without this
lock each would compile Kubernetes into the same Go work directory at the same time, tripling a
15-minute build and racing on its files. The same lock, by name, serialises other machine-wide steps
(``kwokctl create``, handing out ports).
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.stack.progress import Reporter
from pipeline.stack.versions import cache_root


@contextmanager
def machine_lock(name: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the machine-wide lock ``name``; ``on_wait`` is called once if another process holds it."""
    path = cache_root() / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def build_lock(entry: str, report: Reporter) -> Iterator[None]:
    """Hold the lock of cache entry ``entry`` (a version key) while building it; callers check
    again that the entry is missing once they hold it, since the build they waited for made it."""
    with machine_lock(
        entry, lambda: report(f"{entry}: another process is building it; waiting for that build to finish")
    ):
        yield


def build_once(
    entry: str, done: Path, build: Callable[[], Path], report: Reporter, *, result: Path | None = None
) -> Path:
    """``result`` (default ``done``) once ``done`` exists; else ``build()`` under the lock of cache entry
    ``entry``, unless the build this process waited for made ``done`` meanwhile."""
    if done.exists():
        return result or done
    with build_lock(entry, report):
        if done.exists():
            return result or done
        return build()
