"""Pod lifecycles (start, and end once finished) derived from container statuses as SimKube does.

SimKube (``sk-core/src/k8s/pod_lifecycle.rs``) ignores the pod phase and creation time: a pod starts at
the earliest ``startedAt`` among its init and main containers (running or terminated) and ends at the
latest ``finishedAt``, but only once every main container has terminated. Times here are milliseconds
(SimKube truncates to seconds). Updates follow SimKube's partial order so that data never regresses:
nothing < Running(s) < Finished(s, e), with different start times incomparable (a CrashLoopBackOff
restart keeps the earliest start); see :meth:`PodLifecycle.supersedes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class PodLifecycle:
    """A pod that started at ``start_ms`` and, if ``end_ms`` is set, finished then."""

    start_ms: int
    end_ms: int | None = None

    @property
    def finished(self) -> bool:
        """Whether the pod has finished."""
        return self.end_ms is not None

    def supersedes(self, old: PodLifecycle | None) -> bool:
        """Whether this is a valid update of ``old`` (strictly greater in SimKube's partial order)."""
        if old is None:
            return True
        return self.start_ms == old.start_ms and old.end_ms is None and self.end_ms is not None

    def overlaps(self, start_ms: int, end_ms: int) -> bool:
        """Whether the pod runs at some time in ``[start_ms, end_ms)``."""
        return self.start_ms < end_ms and (self.end_ms is None or self.end_ms > start_ms)

    def clipped(self, start_ms: int, end_ms: int) -> PodLifecycle:
        """This lifecycle seen from the window ``[start_ms, end_ms)``: a start before the window moves up to
        it (as SimKube's export does) and an end at or after the window end is unknown yet (running)."""
        end = self.end_ms if self.end_ms is not None and self.end_ms < end_ms else None
        return PodLifecycle(max(self.start_ms, start_ms), end)


def parse_k8s_time(text: str) -> int:
    """Milliseconds since the epoch of a Kubernetes RFC 3339 time (``2024-02-16T17:02:25Z``)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _ONE_MS


def _container_times(status: Any) -> tuple[int | None, int | None]:
    """(start, end) of one container status; (None, None) when waiting, malformed or unparsable."""
    state = status.get("state") if isinstance(status, Mapping) else None
    if not isinstance(state, Mapping):
        return None, None
    set_states = [name for name in ("running", "terminated", "waiting") if state.get(name) is not None]
    if len(set_states) != 1 or set_states[0] == "waiting":
        return None, None
    detail = state[set_states[0]]
    if not isinstance(detail, Mapping):
        return None, None
    start, end = detail.get("startedAt"), detail.get("finishedAt") if set_states[0] == "terminated" else None
    try:
        return (
            parse_k8s_time(start) if isinstance(start, str) else None,
            parse_k8s_time(end) if isinstance(end, str) else None,
        )
    except ValueError:
        return None, None


def derive_lifecycle(pod: Mapping[str, Any]) -> PodLifecycle | None:
    """The lifecycle of ``pod`` from its container statuses, or None if no container has started."""
    status, spec = pod.get("status"), pod.get("spec")
    if not isinstance(status, Mapping) or not isinstance(spec, Mapping):
        return None
    starts: list[int] = []
    ends: list[int] = []
    main_terminated = 0
    for status_list in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(status_list) or []:
            start, end = _container_times(container)
            if start is not None:
                starts.append(start)
            if end is not None:
                ends.append(end)
                main_terminated += status_list == "containerStatuses"
    if not starts:
        return None
    # init containers all end before main ones start, so only the main ones decide "finished"
    all_done = main_terminated == len(spec.get("containers") or [])
    return PodLifecycle(min(starts), max(ends) if ends and all_done else None)


def finish_on_delete(current: PodLifecycle | None, deleted_at_ms: int) -> PodLifecycle | None:
    """SimKube's guess for a pod deleted before it was seen finishing: it finished when deleted."""
    if current is None or current.finished:
        return current
    return PodLifecycle(current.start_ms, max(deleted_at_ms, current.start_ms))
