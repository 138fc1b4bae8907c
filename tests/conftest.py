"""Session fixtures: the real local stack (one Kafka broker, one S3 server, KWOK clusters ``source`` and
``sim``), started once per test session (per pytest-xdist worker) in a private directory and stopped at
the end.

With ``CI=true`` a stack that cannot be built or started fails every test that needs it; elsewhere
those tests are skipped with the reason, so unit tests stay usable on a laptop without Go or Java.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from pipeline.model.errors import StackError
from pipeline.stack import s3
from pipeline.stack.progress import stderr_reporter
from pipeline.stack.stack import LocalStack
from pipeline.stack.state import StackInfo
from tests.data import SIMKUBE_TRACES
from tests.phase_times import (  # noqa: F401 - hooks: the phase times scripts/test.sh prints
    pytest_runtest_logfinish,
    pytest_runtest_logstart,
    pytest_sessionfinish,
)

# Integration and e2e tests run on pytest-xdist workers (scripts/test.sh), each worker with a local stack of
# its own: the tests mostly wait on the clusters' controllers and timers, so two stacks side by side take
# about half the wall time of one. A module runs whole on one worker (its module fixtures start once), the
# e2e modules together (they share one recording). The modules that take longest go first, so that no
# worker is left with a long module at the end while the other idles.
_LONGEST_FIRST = (
    "tests/integration/test_autoscaler.py",
    "tests/integration/test_metrics_stack.py",
    "tests/e2e",
    "tests/integration/test_replay_traces.py",
    "tests/integration/test_analytics_sweep.py",
    "tests/integration/test_sink.py",
)


def _stack_group(nodeid: str) -> str:
    """The unit of work one worker runs whole: a test module, or all of ``tests/e2e``."""
    module = nodeid.split("::", 1)[0]
    return "tests/e2e" if module.startswith("tests/e2e/") else module


def _order(item: pytest.Item) -> int:
    group = _stack_group(item.nodeid)
    return _LONGEST_FIRST.index(group) if group in _LONGEST_FIRST else len(_LONGEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_order)  # stable: a module's tests keep their order


class _StackGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type hints
    """pytest-xdist's scope scheduling with :func:`_stack_group` as the scope. (Its ``xdist_group``
    marks would say the same, but with pytest 9 the group never reaches the scheduler: the node ids it
    receives lack the ``@group`` suffix the worker sets.)"""

    def _split_scope(self, nodeid: str) -> str:
        return _stack_group(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadScopeScheduling | None:
    """``--dist loadscope`` (as scripts/test.sh runs the integration and e2e tests): by stack group."""
    return _StackGroupScheduling(config, log) if config.getvalue("dist") == "loadscope" else None


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A started local stack private to this test session."""
    stack = LocalStack(tmp_path_factory.mktemp("kubetape-stack"), report=stderr_reporter)
    try:
        stack.up(["source", "sim"])
    except StackError as exc:
        with contextlib.suppress(StackError):
            stack.down()
        if _in_ci():
            pytest.fail(f"the local stack could not start (CI=true, so this is a failure): {exc}")
        pytest.skip(f"the local stack could not start: {exc}")
    try:
        yield stack
    finally:
        stack.down()


@pytest.fixture(scope="session")
def stack_info(local_stack: LocalStack) -> StackInfo:
    """The session's stack as it was when first asked for: the broker, S3 and the ``source`` and ``sim``
    clusters stay, but a cluster a module adds and deletes may still be listed; ask ``local_stack.info()``
    for the stack as it is now."""
    return local_stack.info()


@pytest.fixture(scope="session")
def kafka_bootstrap(stack_info: StackInfo) -> str:
    return stack_info.bootstrap


@pytest.fixture(scope="session")
def source_kubeconfig(stack_info: StackInfo) -> Path:
    return stack_info.kubeconfigs["source"]


@pytest.fixture(scope="session")
def sim_kubeconfig(stack_info: StackInfo) -> Path:
    return stack_info.kubeconfigs["sim"]


@pytest.fixture(scope="session")
def simkube_traces() -> Path:
    """SimKube's public example traces, shipped in ``tests/data/simkube``. Missing test data is a failure."""
    if not (SIMKUBE_TRACES / "cronjob.sktrace").is_file():
        pytest.fail(
            f"SimKube example traces not found at {SIMKUBE_TRACES}; the format and replay tests need them"
        )
    return SIMKUBE_TRACES


@pytest.fixture(scope="session")
def s3_env(stack_info: StackInfo) -> dict[str, str]:
    """The AWS_* variables that reach the stack's S3 server (s3proxy), as `kubetape stack env` prints."""
    if stack_info.s3_endpoint is None:
        pytest.fail(f"the local stack in {stack_info.stack_dir} runs no S3 server")
    return dict(
        line.removeprefix("export ").split("=", 1)
        for line in s3.env_lines(stack_info.s3_endpoint)
        if line.startswith("export AWS_")
    )


@pytest.fixture
def s3_url(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix in the stack's bucket, with this process's AWS_* variables pointing at the server."""
    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    return f"s3://{s3.BUCKET}/tests/{uuid.uuid4().hex[:12]}"
