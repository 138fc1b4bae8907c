"""The made-up manifests autoscaled benchmarks and integration tests replay."""

from __future__ import annotations

from pipeline.replay.autoscale.settings import scale_nodepool
from pipeline.replay.workload_manifests import deployment, kwok_node_pool


def test_a_deployment_selects_the_pods_it_labels_and_requests_what_it_was_given() -> None:
    made = deployment("web", "shop", 3, cpu="250m", memory="64Mi", container="web", image="web:1")

    assert made["metadata"] == {"name": "web", "namespace": "shop"}
    assert made["spec"]["replicas"] == 3
    assert made["spec"]["selector"]["matchLabels"] == made["spec"]["template"]["metadata"]["labels"]
    (container,) = made["spec"]["template"]["spec"]["containers"]
    assert container == {
        "name": "web",
        "image": "web:1",
        "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
    }


def test_a_labelled_deployment_carries_its_pods_label_itself() -> None:
    assert "labels" not in deployment("web", "shop", 1, cpu="1", memory="1Gi")["metadata"]
    labelled = deployment("web", "shop", 1, cpu="1", memory="1Gi", labelled=True)
    assert labelled["metadata"] == {"name": "web", "namespace": "shop", "labels": {"app": "web"}}


def test_changing_one_deployment_leaves_the_next_one_built_alone() -> None:
    first = deployment("web", "shop", 1, cpu="1", memory="1Gi")
    first["spec"]["template"]["spec"]["affinity"] = {}
    first["spec"]["selector"]["matchLabels"]["extra"] = "x"

    second = deployment("web", "shop", 1, cpu="1", memory="1Gi")

    assert "affinity" not in second["spec"]["template"]["spec"]
    assert second["spec"]["selector"]["matchLabels"] == {"app": "web"}


def test_a_kwok_node_pool_limits_cpu_only_when_asked_and_its_timers_scale() -> None:
    pool = kwok_node_pool("general", ("kwok-standard-8",), consolidate_after="30s", cpu_limit="64")
    unlimited = kwok_node_pool("bench", ("kwok-standard-4", "kwok-standard-8"))

    assert pool["spec"]["limits"] == {"cpu": "64"}
    assert "limits" not in unlimited["spec"]
    (requirement,) = unlimited["spec"]["template"]["spec"]["requirements"]
    assert requirement["values"] == ["kwok-standard-4", "kwok-standard-8"]
    scaled, _ = scale_nodepool(pool, 10.0, source="test")
    assert scaled["spec"]["disruption"]["consolidateAfter"] == "3s"
