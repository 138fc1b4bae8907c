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
    """The scripted workload recorded on ``source`` (watcher → Kafka → sink → export), and its replay
    on ``sim`` at speed 10 through ``kubetape replay`` (with ``--max-lag``, see tests/e2e/oracle.py)."""
    return run_mission(
        local_stack, tmp_path_factory.mktemp("mission"), speed=10.0, max_lag_s=MAX_LAG_S, say=print
    )
