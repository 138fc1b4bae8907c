"""An autoscaled workload under a rising, then falling load: a Deployment ``api`` with its HPA, on a
cluster serving the Metrics API (``kubetape stack up --metrics``), so the HPA's decisions are real.

The load is played by :class:`~pipeline.stack.load_driver.LoadDriver` (KWOK's usage annotation, the
total shared by the running pods). It rises once the HPA holds its minimum, and falls once the HPA has
scaled to its maximum and held it: each phase waits for the HPA instead of a fixed time, so a slow
machine makes the recording longer, not different. ``kubetape demo --hpa`` runs it after the scripted
workload; the metrics stack's end-to-end test records and replays it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from pipeline.model.errors import StackError
from pipeline.stack.kwok import KwokCluster
from pipeline.stack.load_driver import CPU_ANNOTATION, LoadDriver, LoadPattern

APP = "api"
REQUEST_M = 100
TARGET_PERCENT = 50
MIN_REPLICAS, MAX_REPLICAS = 2, 4
LOW_M = 40
"""Total CPU at rest: 20 % of two pods' requests, 10 % of four."""
HIGH_M = 170
"""Total CPU at the peak: 85 % of two pods' requests against the 50 % target, so the HPA wants
ceil(2 x 85 / 50) = 4 pods, which then run at 42.5 %: within the HPA's tolerance, it stays there."""
HOLD_S = 15.0
SETTLE_TIMEOUT_S = 300.0
"""metrics-server needs two 15 s scrapes of a new pod and the HPA syncs every 15 s: about a minute per
step on an idle machine."""

Say = Callable[[str], None]


def deployment(namespace: str) -> dict[str, Any]:
    labels = {"app": APP}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": namespace},
        "spec": {
            "replicas": MIN_REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {
                # the load at rest until the driver takes over: each pod its share
                "metadata": {"labels": labels, "annotations": {CPU_ANNOTATION: f"{LOW_M // MIN_REPLICAS}m"}},
                "spec": {
                    "containers": [
                        {
                            "name": "api",
                            "image": "example/api:1",
                            "resources": {"requests": {"cpu": f"{REQUEST_M}m", "memory": "64Mi"}},
                        }
                    ]
                },
            },
        },
    }


def hpa(namespace: str) -> dict[str, Any]:
    one_step = {"type": "Percent", "value": 100, "periodSeconds": 15}
    utilization = {"type": "Utilization", "averageUtilization": TARGET_PERCENT}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": APP, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
            "minReplicas": MIN_REPLICAS,
            "maxReplicas": MAX_REPLICAS,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": utilization}}],
            # a 30 s scale-down window instead of the controller's 5 minutes: the fall shows in minutes
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [one_step]},
                "scaleDown": {"stabilizationWindowSeconds": 30, "policies": [one_step]},
            },
        },
    }


class HpaWorkload:
    """The Deployment and its HPA in ``namespace`` (which exists), driven through the load's phases."""

    def __init__(self, cluster: KwokCluster, namespace: str) -> None:
        self.cluster = cluster
        self.ns = namespace
        self.drivers: list[LoadDriver] = []

    def run(self, say: Say, *, delete: bool = True) -> None:
        for manifest in (deployment(self.ns), hpa(self.ns)):
            self.cluster.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
        bounds = f"{MIN_REPLICAS}..{MAX_REPLICAS} at {TARGET_PERCENT} % CPU"
        say(f"workload: Deployment {APP} with an HPA ({bounds})")
        self.settle_at(MIN_REPLICAS)
        for total, replicas, what in ((HIGH_M, MAX_REPLICAS, "rises"), (LOW_M, MIN_REPLICAS, "falls")):
            say(f"workload: the load on {APP} {what} to {total}m in total; waiting for its HPA")
            driver = LoadDriver(self.cluster.kubectl, self.ns, f"app={APP}", LoadPattern(((0.0, total),)))
            self.drivers.append(driver)
            with driver.running():
                self.settle_at(replicas)
            say(f"workload: the HPA scaled {APP} to {replicas}")
        if delete:
            say(f"workload: deleting Deployment {APP} and its HPA")
            self.cluster.kubectl("delete", "hpa,deployment", APP, "-n", self.ns, "--wait=true")

    def settle_at(self, replicas: int) -> None:
        """Wait until the HPA has set ``replicas`` and that many pods have been ready for HOLD_S."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        since: float | None = None
        while True:
            got = self._replicas()
            since = (since or time.monotonic()) if got == (replicas, replicas) else None
            if since is not None and time.monotonic() - since >= HOLD_S:
                return
            if time.monotonic() > deadline:
                status = self.cluster.kubectl("get", "hpa", APP, "-n", self.ns, "-o", "jsonpath={.status}")
                raise StackError(
                    f"workload: the HPA of {APP} did not settle at {replicas} replicas in "
                    f"{SETTLE_TIMEOUT_S:.0f} s (spec.replicas, ready): last {got}; its status: {status} "
                    "(does the cluster serve the Metrics API? `kubetape stack status`)"
                )
            time.sleep(2.0)

    def _replicas(self) -> tuple[int, int]:
        listed = json.loads(self.cluster.kubectl("get", "deployment", APP, "-n", self.ns, "-o", "json"))
        return listed["spec"]["replicas"], (listed.get("status") or {}).get("readyReplicas", 0)
