"""The replayer's RBAC: as narrow as what a replay does. Every call a replay makes is one its role grants,
the role k8s/sim ships is the one generated for the shipped tracer config, no role of kubetape's grants
``*``,
and a tracer config tracking more kinds widens it (``kubetape sim rbac``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.io.kube.types import ApiResource
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.model.tracer_config import TracerConfig, load_tracer_config
from pipeline.replay.plan import plan_replay
from pipeline.replay.rbac import REPLAYER_ROLE, grants, replayer_cluster_role, resource_of
from pipeline.replay.replayer import Replayer
from services.cli import main
from tests.unit.test_replay_replayer import KINDS, KwokLikeCluster, applied, deployment, fast, pod, trace

K8S = Path(__file__).resolve().parents[2] / "k8s"
SHIPPED_TRACER_CONFIG = K8S / "prod" / "tracer.yaml"


def _roles(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] in ("ClusterRole", "Role")]


def _shipped_replayer_role() -> dict[str, Any]:
    (role,) = [r for r in _roles(K8S / "sim" / "rbac.yaml") if r["metadata"]["name"] == REPLAYER_ROLE]
    return role


def test_the_shipped_replayer_role_is_the_one_generated_for_the_shipped_tracer_config() -> None:
    generated = replayer_cluster_role(load_tracer_config(SHIPPED_TRACER_CONFIG))
    assert grants(_shipped_replayer_role()["rules"]) == grants(generated["rules"])


@pytest.mark.parametrize("path", [K8S / "sim" / "rbac.yaml", K8S / "prod" / "rbac.yaml"], ids=str)
def test_no_role_of_kubetape_grants_a_wildcard(path: Path) -> None:
    for role in _roles(path):
        for rule in role.get("rules", []):
            where = f"{path.relative_to(K8S)}: {role['kind']} {role['metadata']['name']}: {rule}"
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), where


def test_the_replayer_never_reads_secrets_with_the_shipped_config() -> None:
    assert not [g for g in grants(_shipped_replayer_role()["rules"]) if g[1] == "secrets"]


@pytest.mark.parametrize(
    ("kind", "resource"),
    [
        ("Deployment", "deployments"),
        ("HorizontalPodAutoscaler", "horizontalpodautoscalers"),
        ("Ingress", "ingresses"),
        ("NetworkPolicy", "networkpolicies"),
        ("PriorityClass", "priorityclasses"),
        ("Gateway", "gateways"),
        ("Endpoints", "endpoints"),
    ],
)
def test_a_kind_is_granted_by_its_resource_name(kind: str, resource: str) -> None:
    assert resource_of(kind) == resource


def test_a_tracer_config_tracking_more_kinds_widens_the_role_by_those_alone() -> None:
    config = TracerConfig.from_mapping(
        {
            "trackedObjects": {
                "apps/v1.Deployment": {},
                "example.com/v1.TrainingJob": {"podSpecTemplatePaths": ["/spec/template"]},
            }
        },
        "test",
    )
    wider = grants(replayer_cluster_role(config)["rules"]) - grants(
        replayer_cluster_role(
            TracerConfig.from_mapping({"trackedObjects": {"apps/v1.Deployment": {}}}, "test")
        )["rules"]
    )
    verbs = {"get", "list", "create", "patch", "delete"}
    assert wider == {("example.com", "trainingjobs", (), verb) for verb in verbs}


def test_kubetape_sim_rbac_prints_the_role_for_a_tracer_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "tracer.yaml"
    config.write_text(yaml.safe_dump({"trackedObjects": {"scheduling.k8s.io/v1.PriorityClass": {}}}))
    assert main(["sim", "rbac", "--config", str(config)]) == 0
    (role,) = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert role["kind"] == "ClusterRole"
    assert role["metadata"]["name"] == REPLAYER_ROLE
    assert ("scheduling.k8s.io", "priorityclasses", (), "create") in grants(role["rules"])


# ---- every call of a replay is granted -------------------------------------------------------------
READ_ONLY_KINDS = {
    ("v1", "ServiceAccount"): ApiResource("v1", "ServiceAccount", "serviceaccounts", True),
    ("apps/v1", "Deployment"): ApiResource("apps/v1", "Deployment", "deployments", True),
}


class AuthorizingCluster(KwokLikeCluster):
    """Records each call as the (group, resource, verb) the apiserver would authorize: server-side
    apply is a ``patch``, and a ``create`` too when the object is new."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[tuple[str, str, str]] = set()

    def _ask(self, api_version: str, kind: str, verb: str) -> None:
        resource = {**KINDS, **READ_ONLY_KINDS}[(api_version, kind)]
        group = api_version.rpartition("/")[0]
        self.asked.add((group, resource.plural, verb))

    async def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        meta = obj["metadata"]
        self._ask(obj["apiVersion"], obj["kind"], "patch")
        if (obj["kind"], meta.get("namespace"), meta["name"]) not in self.objects:
            self._ask(obj["apiVersion"], obj["kind"], "create")
        return await super().apply(obj, force=force)

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        self._ask(api_version, kind, "get")
        return await super().get(api_version, kind, namespace, name)

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]:
        self._ask(api_version, kind, "list")
        return await super().list_objects(api_version, kind, label_selector=label_selector)

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
    ) -> bool:
        self._ask(api_version, kind, "delete")
        return await super().delete(api_version, kind, namespace, name, propagation=propagation)


async def test_every_call_of_a_replay_of_the_shipped_kinds_is_one_the_shipped_role_grants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(KINDS, ("apps/v1", "Deployment"), READ_ONLY_KINDS[("apps/v1", "Deployment")])
    cluster = AuthorizingCluster()
    bare, web = pod("batch"), deployment("web")
    events = [
        applied(0, web),
        applied(0, bare),
        Event.pod_lifecycle(0, key_of(bare), owner_key=key_of(bare), pod_spec_hash=1, start_ms=0, end_ms=5),
        Event.deleted(20, key_of(bare), bare),
        Event.deleted(30, key_of(web), web),
    ]
    skeleton = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sk"}, "status": {}}
    settings = fast(node_pools=((skeleton, 2),))
    report = await Replayer(cluster, plan_replay(trace(events), speed=1000), settings).run()

    assert report.failed == 0, report.summary()
    assert report.cleanup.startswith("done"), report.cleanup
    granted = {(g, r, v) for g, r, _names, v in grants(_shipped_replayer_role()["rules"])}
    asked = {(g, r, v) for g, r, v in cluster.asked if (g, r) != ("", "configmaps")}
    assert asked - granted == set(), f"asked for but not granted: {sorted(asked - granted)}"
    # the profile ConfigMap: read by name only, and that name is the one granted
    assert ("", "configmaps", ("kubetape-cluster-profile",), "get") in grants(
        _shipped_replayer_role()["rules"]
    )
