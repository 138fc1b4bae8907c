"""Unit-test settings: the hypothesis profile."""

from __future__ import annotations

import os

from hypothesis import settings

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
