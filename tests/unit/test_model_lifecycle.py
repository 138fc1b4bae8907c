"""Pod lifecycles derived from container statuses, with SimKube's no-regression order."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.model.lifecycle import PodLifecycle, derive_lifecycle, finish_on_delete, parse_k8s_time

T0 = "2025-03-29T22:21:01Z"
T0_MS = 1743286861000


def _pod(
    statuses: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, containers: int = 1
) -> dict[str, Any]:
    return {
        "spec": {"containers": [{"name": f"c{i}"} for i in range(containers)]},
        "status": {"containerStatuses": statuses, "initContainerStatuses": init or []},
    }


def _running(started: str) -> dict[str, Any]:
    return {"state": {"running": {"startedAt": started}}}


def _terminated(started: str, finished: str) -> dict[str, Any]:
    return {"state": {"terminated": {"startedAt": started, "finishedAt": finished, "exitCode": 0}}}


def test_parse_k8s_time_gives_milliseconds() -> None:
    assert parse_k8s_time(T0) == T0_MS
    assert parse_k8s_time("2025-03-29T22:21:01.250Z") == T0_MS + 250
    assert parse_k8s_time("2025-03-29T23:21:01+01:00") == T0_MS


def test_pending_pod_has_no_lifecycle() -> None:
    assert derive_lifecycle(_pod([{"state": {"waiting": {"reason": "ContainerCreating"}}}])) is None
    assert derive_lifecycle({"spec": {"containers": []}}) is None


def test_running_pod_starts_at_earliest_container_start_including_init() -> None:
    pod = _pod(
        [_running("2025-03-29T22:21:10Z")],
        init=[_terminated(T0, "2025-03-29T22:21:05Z")],
    )
    assert derive_lifecycle(pod) == PodLifecycle(T0_MS, None)


def test_pod_finishes_only_when_every_main_container_terminated() -> None:
    half = _pod([_terminated(T0, "2025-03-29T22:21:31Z"), _running(T0)], containers=2)
    assert derive_lifecycle(half) == PodLifecycle(T0_MS, None)
    done = _pod(
        [_terminated(T0, "2025-03-29T22:21:31Z"), _terminated(T0, "2025-03-29T22:21:41Z")], containers=2
    )
    assert derive_lifecycle(done) == PodLifecycle(T0_MS, T0_MS + 40_000)


def test_malformed_container_state_is_ignored() -> None:
    both = {"state": {"running": {"startedAt": T0}, "waiting": {}}}
    assert derive_lifecycle(_pod([both])) is None
    assert derive_lifecycle(_pod([{"state": {"running": {"startedAt": "not a time"}}}])) is None


def test_updates_follow_simkubes_partial_order() -> None:
    running = PodLifecycle(1000)
    finished = PodLifecycle(1000, 5000)
    assert running.supersedes(None)
    assert finished.supersedes(running)
    assert not running.supersedes(finished)  # no regression
    assert not PodLifecycle(2000).supersedes(running)  # a restart keeps the earliest start
    assert not PodLifecycle(1000, 6000).supersedes(finished)  # finished data is final
    assert not running.supersedes(running)


@pytest.mark.parametrize(
    ("lifecycle", "expected"),
    [
        (PodLifecycle(0, 50), False),  # over before the window
        (PodLifecycle(0, 100), False),  # ends exactly at the window start
        (PodLifecycle(0, 101), True),
        (PodLifecycle(150), True),
        (PodLifecycle(50), True),  # started before, still running
        (PodLifecycle(200), False),  # starts at the (exclusive) window end
    ],
)
def test_overlap_with_a_window(lifecycle: PodLifecycle, expected: bool) -> None:
    assert lifecycle.overlaps(100, 200) is expected


def test_clipping_to_a_window() -> None:
    assert PodLifecycle(50, 150).clipped(100, 200) == PodLifecycle(100, 150)
    assert PodLifecycle(120, 250).clipped(100, 200) == PodLifecycle(120, None)  # end not yet known at B
    assert PodLifecycle(120).clipped(100, 200) == PodLifecycle(120)


def test_deleted_running_pod_is_guessed_finished_at_deletion() -> None:
    assert finish_on_delete(PodLifecycle(1000), 9000) == PodLifecycle(1000, 9000)
    assert finish_on_delete(PodLifecycle(1000, 2000), 9000) == PodLifecycle(1000, 2000)
    assert finish_on_delete(None, 9000) is None
