"""A load on a workload of the local stack, as KWOK emulates it, so its HPA really scales.

A pod of a KWOK cluster runs no code: its CPU usage is what its ``kwok.x-k8s.io/usage-cpu`` annotation
says (KWOK's ``usage-from-annotation``, read at every scrape, docs/metrics.md). :class:`LoadDriver`
plays a :class:`LoadPattern` (the workload's total CPU over time) by writing that annotation onto the
running pods of a selector, every couple of seconds: the total is shared evenly among the pods running
then, as a service's requests are shared by its replicas, so when the HPA adds pods each one gets
less. That is what makes the HPA settle instead of scaling to its maximum.

The pattern's logic is pure; the driver writes with kubectl, on a thread of its own beside whatever
the caller does (the demo's script, a test's recording).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.model.errors import ConfigError, StackError

log = logging.getLogger(__name__)

CPU_ANNOTATION = "kwok.x-k8s.io/usage-cpu"
"""KWOK's usage annotation (the replay writes the same one: pipeline.replay.hpa.load)."""


@dataclass(frozen=True, slots=True)
class LoadPattern:
    """A workload's total CPU (millicores) over time: ``steps`` of (seconds from the start, total),
    each in force until the next one."""

    steps: tuple[tuple[float, int], ...]

    def __post_init__(self) -> None:
        times = [t for t, _ in self.steps]
        if not self.steps or times[0] != 0 or times != sorted(times):
            raise ConfigError(f"a load pattern's steps start at 0 s and go forward in time: {self.steps}")
        if any(total < 0 for _, total in self.steps):
            raise ConfigError(f"a load pattern's totals are millicores, not negative: {self.steps}")

    def total_m(self, at_s: float) -> int:
        """The total in force ``at_s`` seconds from the start (the first step's before it)."""
        index = bisect.bisect_right([t for t, _ in self.steps], at_s) - 1
        return self.steps[max(index, 0)][1]

    @property
    def length_s(self) -> float:
        """When the last step starts."""
        return self.steps[-1][0]


def rise_and_fall(low_m: int, high_m: int, *, rise_at_s: float, fall_at_s: float) -> LoadPattern:
    """``low_m`` in total, ``high_m`` from ``rise_at_s``, ``low_m`` again from ``fall_at_s``."""
    if not 0 < rise_at_s < fall_at_s:
        raise ConfigError(f"the load rises at {rise_at_s} s, before it falls at {fall_at_s} s, after 0")
    return LoadPattern(((0.0, low_m), (rise_at_s, high_m), (fall_at_s, low_m)))


def per_pod_m(total_m: int, pods: int) -> int:
    """Each of ``pods`` running pods' share of ``total_m`` (rounded up: the total is never lost)."""
    return math.ceil(total_m / pods) if pods > 0 else 0


def running_pods(listed: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """(name, its usage annotation) of the Running, not terminating pods of a ``kubectl get -o json``."""
    out = []
    for pod in listed.get("items") or []:
        meta = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") == "Running" and not meta.get("deletionTimestamp"):
            out.append((meta["name"], (meta.get("annotations") or {}).get(CPU_ANNOTATION)))
    return out


Kubectl = Callable[..., str]


@dataclass(slots=True)
class LoadDriver:
    """Plays ``pattern`` on the running pods of ``selector`` in ``namespace`` through ``kubectl``
    (a :meth:`pipeline.stack.kwok.KwokCluster.kubectl`), every ``interval_s`` (module docstring)."""

    kubectl: Kubectl
    namespace: str
    selector: str
    pattern: LoadPattern
    interval_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    writes: int = 0
    failures: int = 0
    last_failure: str = ""
    played: list[tuple[float, int, int]] = field(default_factory=list)
    """(seconds from the start, total, running pods) at each pass: what the workload was given."""

    def play_once(self, at_s: float) -> None:
        """One pass: every running pod of the selector gets its share of the total at ``at_s``."""
        listed = json.loads(
            self.kubectl("get", "pods", "-n", self.namespace, "-l", self.selector, "-o", "json")
        )
        pods = running_pods(listed)
        total = self.pattern.total_m(at_s)
        self.played.append((at_s, total, len(pods)))
        wanted = f"{per_pod_m(total, len(pods))}m"
        stale = [name for name, have in pods if have != wanted]
        if stale:
            self.kubectl(
                "annotate", "pods", "-n", self.namespace, "--overwrite", *stale, f"{CPU_ANNOTATION}={wanted}"
            )
            self.writes += len(stale)

    def run(self, stop: threading.Event) -> None:
        """Play until ``stop`` is set; a failed pass (a pod gone meanwhile, a busy apiserver) is
        counted and the next one tries again."""
        started = self.clock()
        while not stop.is_set():
            try:
                self.play_once(self.clock() - started)
            except StackError as exc:
                self.failures += 1
                self.last_failure = str(exc)
                log.warning("load pass failed: %s", exc)
            stop.wait(self.interval_s)

    @contextlib.contextmanager
    def running(self) -> Iterator[LoadDriver]:
        """The driver playing on a thread of its own while the block runs."""
        stop = threading.Event()
        thread = threading.Thread(target=self.run, args=(stop,), name="load-driver", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=30)


def describe(pattern: LoadPattern, request_m: int) -> Sequence[str]:
    """The pattern in words, for a demo's output."""
    return [
        f"from {t:g} s: {total}m in total ({100 * total / request_m:.0f} % of one pod's request)"
        for t, total in pattern.steps
    ]
