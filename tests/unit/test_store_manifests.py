"""The production manifests run the sink the way its store supports: one replica, one volume."""

from __future__ import annotations

from pathlib import Path

import yaml

SINK = Path(__file__).resolve().parents[2] / "k8s" / "prod" / "sink.yaml"


def test_the_prod_sink_runs_one_replica_and_says_how_to_scale() -> None:
    """Replicas with a volume each would restore partitions from stale segments and export only their
    own partitions; the manifest runs one and documents the shared-store path."""
    docs = [d for d in yaml.safe_load_all(SINK.read_text()) if d]
    (statefulset,) = [d for d in docs if d["kind"] == "StatefulSet"]
    assert statefulset["spec"]["replicas"] == 1
    text = SINK.read_text()
    assert "Exactly ONE replica" in text
    assert "shared by all replicas" in text
