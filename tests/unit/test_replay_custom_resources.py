"""Custom resources without pod templates (a SparkApplication): their recorded pods are exported and
replayed as recorded, owned by the replayed resource, whose CRD the replay installs from the trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.formats.assemble import assemble_window
from pipeline.io.kube.types import ApiResource
from pipeline.model.errors import ConfigError
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.model.tracer_config import TracerConfig
from pipeline.replay.crds import CRD_API_VERSION
from pipeline.replay.inputs import read_crds
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.rewrite import LIFETIME_ANNOTATION, RECORDED_OWNER_ANNOTATION
from tests.unit.test_replay_replayer import KINDS, MemoryCluster, fast

SPARK = "sparkoperator.k8s.io/v1beta2"
CONFIG = TracerConfig.from_mapping(
    {
        "trackedObjects": {
            f"{SPARK}.SparkApplication": {"trackLifecycle": True},
            "apiextensions.k8s.io/v1.CustomResourceDefinition": {},
            "apps/v1.Deployment": {"trackLifecycle": True},
            "v1.Pod": {"trackLifecycle": True, "skipOwned": True},
        }
    },
    "test",
)


def spark_app(name: str = "pi") -> dict[str, Any]:
    return {
        "apiVersion": SPARK,
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": "jobs", "uid": f"rec-{name}"},
        "spec": {"type": "Scala", "driver": {"cores": 1}, "executor": {"instances": 1}},
    }


def owned_pod(name: str, owner: dict[str, Any], restart: str = "Never") -> dict[str, Any]:
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "jobs", "uid": f"rec-{name}", "ownerReferences": [ref]},
        "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "spark"}]},
    }


def spark_crd() -> dict[str, Any]:
    return {
        "apiVersion": CRD_API_VERSION,
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "sparkapplications.sparkoperator.k8s.io"},
        "spec": {
            "group": "sparkoperator.k8s.io",
            "scope": "Namespaced",
            "names": {"kind": "SparkApplication", "plural": "sparkapplications"},
            "versions": [{"name": "v1beta2", "served": True, "storage": True}],
            "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://op"}}},
        },
    }


def recording() -> list[Event]:
    """A SparkApplication with its driver (owned by it) and an executor (owned by the driver, as Spark
    does), lifecycles under the application, and a Deployment's pod for contrast."""
    app = spark_app()
    driver = owned_pod("pi-driver", app)
    executor = owned_pod("pi-exec-1", driver)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "jobs", "uid": "rec-web"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }
    rs = {**deployment, "kind": "ReplicaSet", "metadata": {"name": "web-1", "namespace": "jobs", "uid": "rs"}}
    web_pod = owned_pod("web-1-a", rs, restart="Always")
    app_key = key_of(app)
    return [
        Event.applied(0, key_of(spark_crd()), spark_crd(), 1),
        Event.applied(1_000, app_key, app, 2),
        Event.applied(1_000, key_of(deployment), deployment, 3),
        Event.applied(2_000, key_of(driver), driver, 4),
        Event.applied(2_000, key_of(web_pod), web_pod, 5),
        Event.applied(3_000, key_of(executor), executor, 6),
        Event.pod_lifecycle(
            3_000, key_of(driver), owner_key=app_key, pod_spec_hash=1, start_ms=2_000, end_ms=22_000
        ),
        Event.pod_lifecycle(
            4_000, key_of(executor), owner_key=app_key, pod_spec_hash=2, start_ms=3_000, end_ms=13_000
        ),
        Event.pod_lifecycle(
            3_000, key_of(web_pod), owner_key=key_of(deployment), pod_spec_hash=3, start_ms=2_000, end_ms=None
        ),
        Event.deleted(23_000, key_of(executor), executor, 6),
        Event.deleted(23_000, key_of(driver), driver, 4),
        Event.deleted(24_000, app_key, app, 2),
    ]


def test_the_export_keeps_the_pods_no_simulated_controller_makes() -> None:
    exported = assemble_window(None, recording(), 0, 30_000, config=CONFIG)
    objects = {e.key.split("/")[-1] for e in exported.events if e.obj is not None}
    # the Deployment makes its pod again in the simulated cluster; nothing makes Spark's pods there
    assert objects == {"sparkapplications.sparkoperator.k8s.io", "pi", "web", "pi-driver", "pi-exec-1"}
    lifecycles = {e.key.split("/")[-1]: e.owner_key for e in exported.events if e.owner_key is not None}
    assert (
        lifecycles["pi-driver"] == lifecycles["pi-exec-1"] == "sparkoperator.k8s.io/SparkApplication/jobs/pi"
    )


def test_the_plan_gives_such_pods_their_own_lifetimes_and_starts_owners_first() -> None:
    exported = assemble_window(None, recording(), 0, 30_000, config=CONFIG)
    plan = plan_replay(exported, speed=10)
    pods = {k.split("/")[-1]: v for k, v in plan.lifetimes_ms.items() if k.startswith("core/Pod/")}
    assert pods == {"pi-driver": 2_000.0, "pi-exec-1": 1_000.0}
    assert set(plan.recorded_owners.values()) == {"sparkoperator.k8s.io/SparkApplication/jobs/pi"}
    # the report judges the application by its recorded pods
    assert plan.recorded_by_owner is not None
    assert plan.recorded_by_owner["sparkoperator.k8s.io/SparkApplication/jobs/pi"][:2] == [
        (2_000, 1),
        (3_000, 2),
    ]
    # a range starting later folds everything into its first instant, sorted by key ("core/Pod/…" first):
    # the plan starts each owner before what it owns
    later = plan_replay(assemble_window(None, recording(), 5_000, 30_000, config=CONFIG), speed=10)
    first = [s.payload.key.split("/")[-1] for s in later.steps if s.ts_ms == 5_000]
    assert first.index("pi") < first.index("pi-driver")


class CrdCluster(MemoryCluster):
    """Serves a custom kind once its CRD is applied (Established at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds = {
            **KINDS,
            ("apps/v1", "Deployment"): ApiResource("apps/v1", "Deployment", "deployments", True),
        }

    async def resource_for(self, api_version: str, kind: str) -> ApiResource:
        found = self.kinds.get((api_version, kind))
        return found if found is not None else await super().resource_for(api_version, kind)

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        live = await super().apply(obj, force=force)
        if obj["kind"] == "CustomResourceDefinition":
            spec = obj["spec"]
            for version in spec["versions"]:
                api_version = f"{spec['group']}/{version['name']}"
                self.kinds[(api_version, spec["names"]["kind"])] = ApiResource(
                    api_version, spec["names"]["kind"], spec["names"]["plural"], spec["scope"] == "Namespaced"
                )
            live["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
        return live


async def test_the_replay_installs_the_recorded_crd_and_owns_the_pods_by_the_replayed_resource() -> None:
    cluster = CrdCluster()
    plan = plan_replay(assemble_window(None, recording(), 0, 30_000, config=CONFIG), speed=1000)
    report = await Replayer(cluster, plan, fast(keep=True)).run()
    assert report.failed == 0, report.summary()
    crd = cluster.applies[1]  # after the root, before trace time
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["conversion"] == {"strategy": "None"}  # the recorded operator's webhook is not there
    assert crd["metadata"]["ownerReferences"][0]["kind"] == "ReplayRoot"  # the cleanup removes it
    applies = {o["metadata"]["name"]: o for o in cluster.applies}
    app_uid, driver_uid = "uid-pi", "uid-pi-driver"  # their uids in the simulated cluster
    driver, executor = applies["pi-driver"]["metadata"], applies["pi-exec-1"]["metadata"]
    assert [(r["kind"], r["uid"], r.get("controller")) for r in driver["ownerReferences"]] == [
        ("SparkApplication", app_uid, True)
    ]
    assert [(r["kind"], r["uid"]) for r in executor["ownerReferences"]] == [("Pod", driver_uid)]
    assert driver["annotations"][LIFETIME_ANNOTATION] == "0.020s"
    assert (
        executor["annotations"][RECORDED_OWNER_ANNOTATION] == "sparkoperator.k8s.io/SparkApplication/jobs/pi"
    )
    assert ("SparkApplication", "kubetape-jobs", "pi") not in cluster.objects  # deleted at its time
    recorded_step = [o for o in cluster.applies if o["kind"] == "CustomResourceDefinition"][1]
    assert recorded_step["spec"]["conversion"] == {"strategy": "None"}


async def test_a_custom_kind_without_its_crd_fails_its_steps_and_the_rest_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING", logger="pipeline.replay")
    events = [e for e in recording() if not e.key.startswith("apiextensions.k8s.io/")]
    plan = plan_replay(assemble_window(None, events, 0, 30_000, config=CONFIG), speed=1000)
    report = await Replayer(CrdCluster(), plan, fast()).run()
    failed = {f.key.split("/")[-1] for f in report.failures}
    assert failed == {"pi"}  # its apply and its delete; the pods went on without it
    assert report.applied >= 3
    [warning] = [r.getMessage() for r in caplog.records if "CustomResourceDefinition" in r.getMessage()]
    assert "SparkApplication" in warning
    assert "track apiextensions.k8s.io/v1.CustomResourceDefinition" in warning


async def test_a_crd_the_simulated_cluster_has_already_is_left_as_it_is() -> None:
    """Its cleanup would otherwise delete it, and every object of its kind with it, other replays' too."""
    cluster = CrdCluster()
    await cluster.apply(spark_crd())  # installed by the cluster's owner
    cluster.applies.clear()
    events = [*recording(), Event.deleted(25_000, key_of(spark_crd()), spark_crd(), 1)]
    plan = plan_replay(assemble_window(None, events, 0, 30_000, config=CONFIG), speed=1000)
    report = await Replayer(cluster, plan, fast()).run()
    assert report.failed == 0, report.summary()
    assert [o for o in cluster.applies if o["kind"] == "CustomResourceDefinition"] == []
    assert ("CustomResourceDefinition", None, "sparkapplications.sparkoperator.k8s.io") in cluster.objects


async def test_a_crd_given_with_the_replay_serves_a_trace_that_lacks_it(tmp_path: Path) -> None:
    crd_file = tmp_path / "crds.yaml"
    crd_file.write_text(yaml.safe_dump_all([spark_crd()]))
    events = [e for e in recording() if not e.key.startswith("apiextensions.k8s.io/")]
    plan = plan_replay(assemble_window(None, events, 0, 30_000, config=CONFIG), speed=1000)
    cluster = CrdCluster()
    report = await Replayer(cluster, plan, fast(crds=tuple(read_crds(crd_file)))).run()
    assert report.failed == 0, report.summary()
    assert [o["kind"] for o in cluster.applies][1] == "CustomResourceDefinition"


def test_a_crd_file_holding_something_else_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all([spark_crd(), {"kind": "ConfigMap"}]))
    with pytest.raises(
        ConfigError, match=r"--crd: document 1 of .*bad.yaml is not a CustomResourceDefinition"
    ):
        read_crds(bad)
