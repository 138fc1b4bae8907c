"""The production manifests run the sink the way its store supports: several replicas sharing one object
store, none with a volume of its own."""

from __future__ import annotations

from pathlib import Path

import yaml

PROD = Path(__file__).resolve().parents[2] / "k8s" / "prod"
SINK = PROD / "sink.yaml"


def test_the_prod_sink_replicas_share_one_object_store() -> None:
    """Replicas with a volume each would restore partitions from stale segments and export only their
    own partitions; sharing one object store, each restores and exports every partition."""
    docs = [d for d in yaml.safe_load_all(SINK.read_text()) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert not [d for d in docs if d["kind"] == "StatefulSet"]
    assert deployment["spec"]["replicas"] > 1
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # no storage of its own: the only volumes are read-only Secrets (Kafka's TLS files)
    assert all(set(v) == {"name", "secret"} for v in pod.get("volumes", []))
    assert all(m.get("readOnly") for m in container.get("volumeMounts", []))
    assert "--segment-dir" not in container["args"]
    assert {"secretRef": {"name": "kubetape-s3"}} in container["envFrom"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"  # 503 while the store is down
    kustomization = yaml.safe_load((PROD / "kustomization.yaml").read_text())
    (s3_secret,) = [g for g in kustomization["secretGenerator"] if g["name"] == "kubetape-s3"]
    env = dict(
        line.split("=", 1)
        for line in (PROD / s3_secret["envs"][0]).read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert env["KUBETAPE_SEGMENT_STORE"].startswith("s3://")  # what `kubetape sink` reads by default
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} <= set(env)
