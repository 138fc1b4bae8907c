"""A small synthetic recording of an HPA at work, for the replay-with-the-HPA tests: a Deployment
``web`` (one container requesting 100m CPU), its ``autoscaling/v2`` HPA at 50 % CPU, the replica
writes production's HPA made, and the load it reacted to (usage samples, rising)."""

from __future__ import annotations

from typing import Any

from pipeline.formats.segment.content import Segment, build_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey, key_of
from pipeline.model.usage import ContainerUsage, UsageSample

NAMESPACE = "hpa-shop"
APP = "web"
REQUEST_M = 100
TARGET_PERCENT = 50
OWNER = ObjectKey(f"apps/Deployment/{NAMESPACE}/{APP}")


def deployment(replicas: int, image: str = "example/web:1") -> dict[str, Any]:
    labels = {"app": APP}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": NAMESPACE, "uid": "u-web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": image,
                            "resources": {"requests": {"cpu": f"{REQUEST_M}m", "memory": "64Mi"}},
                        }
                    ]
                },
            },
        },
    }


MIN_REPLICAS = 2
MAX_REPLICAS = 4


def hpa() -> dict[str, Any]:
    fast = {"type": "Percent", "value": 100, "periodSeconds": 15}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": APP, "namespace": NAMESPACE, "uid": "u-hpa"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
            "minReplicas": MIN_REPLICAS,
            "maxReplicas": MAX_REPLICAS,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": TARGET_PERCENT},
                    },
                }
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [fast]},
                "scaleDown": {"stabilizationWindowSeconds": 60, "policies": [fast]},
            },
        },
    }


def namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}


def recording(
    replica_writes: list[tuple[int, int]], *, span_ms: int, image_change_at_ms: int | None = None
) -> Segment:
    """The namespace, the Deployment at 2 replicas and its HPA at 0, production's HPA's writes
    ``(ms, replicas)``, and optionally a new image at ``image_change_at_ms`` (at the replicas then)."""
    events = [
        Event.applied(0, key_of(namespace()), namespace(), 1),
        Event.applied(0, key_of(deployment(2)), deployment(2), 2),
        Event.applied(0, key_of(hpa()), hpa(), 3),
    ]
    replicas = 2
    for ts_ms, replicas in replica_writes:
        events.append(Event.applied(ts_ms, OWNER, deployment(replicas), 2))
    if image_change_at_ms is not None:
        obj = deployment(replicas, image="example/web:2")
        events.append(Event.applied(image_change_at_ms, OWNER, obj, 4))
    return build_segment(events, start_ms=0, end_ms=span_ms, kind=SegmentKind.TRACE)


def rising_load(
    span_ms: int, *, rise_at_ms: int | None = None, every_ms: int = 15_000, pods: int = 2
) -> tuple[UsageSample, ...]:
    """The owner's total CPU: ``pods`` pods at 20 % of their request until ``rise_at_ms`` (default: a
    third of the span), then at 180 % (the recorded HPA's cause to scale up to its maximum)."""
    rise_at_ms = span_ms // 3 if rise_at_ms is None else rise_at_ms
    samples = []
    for ts_ms in range(0, span_ms, every_ms):
        per_pod_m = 20 if ts_ms < rise_at_ms else 180
        samples.append(
            UsageSample(ts_ms, OWNER, "h1", pods, (ContainerUsage("app", per_pod_m * pods, 64 << 20),))
        )
    return tuple(samples)
