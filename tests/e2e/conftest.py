"""Everything under tests/e2e runs the whole pipeline against the real local stack.

The scripted workload is recorded once per session (``mission``): every end-to-end check of a recorded
trace (its replay's fidelity, the same range from the topic and the segments, repeated runs compared,
the analytics consumer on the recorded range) reads that one recording instead of recording its own.
"""

from __future__ import annotations

import pytest

from pipeline.stack.stack import LocalStack
from services.mission import MissionResult, run_mission
from tests.e2e.oracle import MAX_LAG_S


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def mission(local_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> MissionResult:
    """The scripted workload recorded (watcher → Kafka → sink → export) on a cluster of its own, and its
    replay on ``sim`` at speed 10 through ``kubetape replay`` (with ``--max-lag``, see
    tests/e2e/oracle.py). Its own cluster: the export holds the recorded cluster's whole state at the
    range's start, and the integration tests leave workloads of theirs on ``source``."""
    return run_mission(
        local_stack,
        tmp_path_factory.mktemp("mission"),
        speed=10.0,
        max_lag_s=MAX_LAG_S,
        say=print,
        source_cluster="recorded",
    )
