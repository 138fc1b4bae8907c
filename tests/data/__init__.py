"""Test data shipped with the project, so that a clone of kubetape alone can run the whole suite."""

from __future__ import annotations

from pathlib import Path

SIMKUBE_TRACES = Path(__file__).resolve().parent / "simkube"
"""SimKube's public example traces (MIT licence, see ``simkube/README.md``)."""
