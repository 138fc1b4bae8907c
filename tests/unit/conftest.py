"""Unit-test fixtures: the shared SimKube example traces (test data for format interoperability)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

SHARED_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """``/work/shared/traces`` (SimKube's public example traces). Missing test data is a failure."""
    if not (SHARED_TRACES / "cronjob.sktrace").is_file():
        pytest.fail(f"shared example traces not found at {SHARED_TRACES}; the format tests need them")
    return SHARED_TRACES


# Property tests must not leave an example database in the working tree (it is not test data).
# In CI they are derandomized so that a red run is reproducible from its commit alone; locally each
# run explores new examples.
settings.register_profile(
    "kubetape-unit",
    database=None,
    deadline=None,
    derandomize=os.environ.get("CI", "").lower() in {"1", "true", "yes"},
)
settings.load_profile("kubetape-unit")
