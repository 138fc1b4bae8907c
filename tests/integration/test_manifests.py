"""k8s/: every kustomize overlay renders and passes a server-side dry-run on the real ``sim`` apiserver
(the Simulation CRD applied for real first, so Simulations validate against its schema), and the
manifests keep the promises the README makes: read-only recording, no Secrets, probes, requests."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.stack.state import StackInfo
from tests.polling import crd_established, eventually, eventually_sync

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S = REPO_ROOT / "k8s"
OVERLAYS = ("prod", "sim")
WORKLOAD_KINDS = ("Deployment", "StatefulSet")

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def kubectl(stack_info: StackInfo, sim_kubeconfig: Path) -> Kubectl:
    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(stack_info.bin_dir / "kubectl"), "--kubeconfig", str(sim_kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    return run


@pytest.fixture(scope="module")
def rendered(kubectl: Kubectl) -> dict[str, str]:
    """Each overlay as kustomize renders it (kubectl's built-in kustomize, from the stack's binaries)."""
    out = {}
    for overlay in OVERLAYS:
        result = kubectl("kustomize", str(K8S / overlay))
        assert result.returncode == 0, f"k8s/{overlay} does not render: {result.stderr}"
        out[overlay] = result.stdout
    return out


@pytest.fixture(scope="module")
def target_cluster(kubectl: Kubectl) -> None:
    """The CRDs for real (custom resources validate against them) and the namespace (namespaced objects
    in a namespace that does not exist yet fail a dry-run)."""
    for crd, manifest in (
        ("simulations.kubetape.dev", "simulation-crd.yaml"),
        ("replayroots.kubetape.dev", "replayroot-crd.yaml"),
    ):
        applied = kubectl("apply", "-f", str(K8S / "sim" / manifest))
        assert applied.returncode == 0, applied.stderr
        crd_established(lambda *args: kubectl(*args).stdout, crd)
    with contextlib.suppress(AssertionError):
        kubectl("create", "namespace", "kubetape")


def objects(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def dry_run(kubectl: Kubectl, manifest: str) -> list[str]:
    result = kubectl("apply", "--dry-run=server", "-f", "-", stdin=manifest)
    assert result.returncode == 0, f"server-side dry-run refused:\n{result.stderr}"
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout
    return lines


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_passes_a_server_side_dry_run(
    overlay: str, rendered: dict[str, str], kubectl: Kubectl, target_cluster: None
) -> None:
    lines = dry_run(kubectl, rendered[overlay])
    assert len(lines) == len(objects(rendered[overlay]))  # every object was checked, none skipped


def test_the_example_simulation_and_the_standalone_watcher_rbac_pass_a_dry_run(
    kubectl: Kubectl, target_cluster: None
) -> None:
    for path in (K8S / "sim" / "examples" / "simulation.yaml", K8S / "prod" / "rbac.yaml"):
        dry_run(kubectl, path.read_text())


def test_the_apiserver_refuses_a_simulation_with_two_sources(kubectl: Kubectl, target_cluster: None) -> None:
    bad = {
        "apiVersion": "kubetape.dev/v1",
        "kind": "Simulation",
        "metadata": {"name": "two-sources"},
        "spec": {
            "source": {
                "traceURL": "https://x/t.sktrace",
                "topic": {"bootstrap": "k:9092", "from": "-1h", "to": "now"},
            }
        },
    }
    result = kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(bad))
    assert result.returncode != 0
    assert "spec.source needs exactly one of segments, topic or traceURL" in result.stderr


def test_the_recording_side_is_read_only_and_never_reads_secrets(rendered: dict[str, str]) -> None:
    rules = [
        rule
        for obj in objects(rendered["prod"])
        if obj["kind"] in ("ClusterRole", "Role")
        for rule in obj.get("rules", [])
    ]
    assert rules
    for rule in rules:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
        assert "secrets" not in rule["resources"], rule
        assert "*" not in rule["resources"], rule
        assert "*" not in rule["apiGroups"], rule
    # the cluster id: one namespace, read only; nothing else of namespaces
    assert [r for r in rules if "namespaces" in r["resources"]] == [
        {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["kube-system"], "verbs": ["get"]}
    ]


def test_watcher_and_sink_name_the_same_cluster(rendered: dict[str, str]) -> None:
    docs = objects(rendered["prod"])
    refs = {}
    for workload in (o for o in docs if o["kind"] in WORKLOAD_KINDS):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container.get("env", [])}
        refs[workload["metadata"]["name"]] = env["KUBETAPE_CLUSTER_ID"]["valueFrom"]["configMapKeyRef"]
    assert len(refs) == 2, refs
    (ref,) = {(r["name"], r["key"]) for r in refs.values()}
    assert ref[1] == "cluster-id"
    (config_map,) = [o for o in docs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref[0]]
    assert config_map["data"]["cluster-id"] == "prod"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_run_non_root_with_requests_probes_and_the_built_image(
    overlay: str, rendered: dict[str, str]
) -> None:
    workloads = [o for o in objects(rendered[overlay]) if o["kind"] in WORKLOAD_KINDS]
    assert workloads
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            where = f"{overlay}: {workload['metadata']['name']}/{container['name']}"
            assert container["image"] == "kubetape:dev", where
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), where
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", where
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", where
            args = container["args"]
            assert args[args.index("--http-host") + 1] == "$(POD_IP)", f"{where}: binds the pod IP only"
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, where


def test_the_kafka_connection_comes_from_a_secret(rendered: dict[str, str]) -> None:
    docs = objects(rendered["prod"])
    secrets = {o["metadata"]["name"] for o in docs if o["kind"] == "Secret"}
    for workload in (o for o in docs if o["kind"] in WORKLOAD_KINDS):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        refs = {ref["secretRef"]["name"] for ref in container.get("envFrom", [])}
        assert refs, workload["metadata"]["name"]
        assert refs <= secrets, workload["metadata"]["name"]
        assert "--bootstrap" not in container["args"]


def _apply_controller_rbac(rendered: dict[str, str], kubectl: Kubectl) -> str:
    """Apply the sim chart's service accounts and RBAC; the controller's user name."""
    rbac = [
        o
        for o in objects(rendered["sim"])
        if o["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    ]
    applied = kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
    assert applied.returncode == 0, applied.stderr
    return "system:serviceaccount:kubetape:kubetape-controller"


def test_the_controller_may_do_what_it_does_and_no_more(
    rendered: dict[str, str], kubectl: Kubectl, target_cluster: None
) -> None:
    controller = _apply_controller_rbac(rendered, kubectl)
    allowed = [
        ("watch", "simulations.kubetape.dev", None),
        ("patch", "simulations.kubetape.dev/status", None),
        ("create", "jobs.batch", "kubetape"),
        ("delete", "jobs.batch", "kubetape"),
        ("list", "pods", "kubetape"),
        ("create", "configmaps", "kubetape"),
        ("get", "persistentvolumeclaims", "kubetape"),
        ("get", "serviceaccounts", "kubetape"),
        ("update", "leases.coordination.k8s.io", "kubetape"),
        ("create", "events", "default"),
        # a deleted Simulation's replays: their namespaces first, then their roots
        ("list", "namespaces", None),
        ("delete", "namespaces", None),
        ("list", "replayroots.kubetape.dev", None),
        ("delete", "replayroots.kubetape.dev/kubetape-demo-r1", None),
        ("patch", "replayroots.kubetape.dev/kubetape-demo-r1", None),  # a running replay's pause
    ]
    refused = [
        ("get", "secrets", "kubetape"),
        ("delete", "pods", "kubetape"),
        # the replay root is kubetape's own kind, so nothing grants the controller ClusterRoles
        ("delete", "clusterrole/cluster-admin", None),
        ("patch", "clusterrole/cluster-admin", None),
        ("delete", "clusterroles.rbac.authorization.k8s.io", None),
        ("create", "clusterroles.rbac.authorization.k8s.io", None),
        ("create", "replayroots.kubetape.dev", None),  # the replayer's, not the controller's
    ]
    for verb, resource, namespace in [*allowed, *refused]:
        scope = ["-n", namespace] if namespace else []
        answer = kubectl("auth", "can-i", verb, resource, "--as", controller, *scope).stdout.strip()
        expected = "yes" if (verb, resource, namespace) in allowed else "no"
        assert answer == expected, f"{controller} {verb} {resource} in {namespace}: {answer}"


def test_the_replayer_jobs_run_the_controllers_own_image(rendered: dict[str, str]) -> None:
    (deployment,) = [o for o in objects(rendered["sim"]) if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBETAPE_IMAGE"] == container["image"]  # kustomize `images:` changes both at once


def test_the_controller_cannot_delete_cluster_admin_and_can_still_clean_up_its_replays(
    rendered: dict[str, str], kubectl: Kubectl, target_cluster: None
) -> None:
    """Not only what ``kubectl auth can-i`` answers: the apiserver itself refuses the controller's
    delete of cluster-admin and carries out its delete of a replay root."""
    controller = _apply_controller_rbac(rendered, kubectl)

    def can_i(*args: str) -> str:
        return kubectl("auth", "can-i", *args, "--as", controller).stdout.strip()

    assert can_i("delete", "clusterrole/cluster-admin") == "no"
    assert can_i("delete", "replayroots.kubetape.dev/kubetape-rbac-r1") == "yes"
    assert can_i("list", "namespaces") == "yes"

    refused = kubectl("delete", "clusterrole", "cluster-admin", "--dry-run=server", "--as", controller)
    assert refused.returncode != 0
    assert "forbidden" in refused.stderr, refused.stderr
    assert kubectl("get", "clusterrole", "cluster-admin", "-o", "name").stdout.strip() == (
        "clusterrole.rbac.authorization.k8s.io/cluster-admin"
    )

    root = {
        "apiVersion": "kubetape.dev/v1",
        "kind": "ReplayRoot",
        "metadata": {"name": "kubetape-rbac-r1", "labels": {"kubetape.dev/replay": "rbac-r1"}},
    }
    created = kubectl("apply", "-f", "-", "-o", "json", stdin=yaml.safe_dump(root))
    assert created.returncode == 0, created.stderr
    owner = {
        "apiVersion": "kubetape.dev/v1",
        "kind": "ReplayRoot",
        "name": "kubetape-rbac-r1",
        "uid": json.loads(created.stdout)["metadata"]["uid"],
    }
    replayed = {  # what the replayer creates: owned by the root, so the root's deletion takes it along
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "kubetape-rbac-r1-shop", "ownerReferences": [owner]},
    }
    created = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(replayed))
    assert created.returncode == 0, created.stderr
    listed = kubectl(
        "get", "replayroots", "-l", "kubetape.dev/replay=rbac-r1", "-o", "name", "--as", controller
    )
    assert listed.stdout.split() == ["replayroot.kubetape.dev/kubetape-rbac-r1"], listed.stderr
    # as the controller deletes a root: in the foreground (kubectl's own wait would need watch, which
    # the controller does not have, so the admin polls)
    deleted = kubectl(
        "delete", "replayroot", "kubetape-rbac-r1", "--cascade=foreground", "--wait=false", "--as", controller
    )
    assert deleted.returncode == 0, deleted.stderr

    def left() -> list[str]:
        owned = ("replayroot/kubetape-rbac-r1", "namespace/kubetape-rbac-r1-shop")
        return kubectl("get", *owned, "--ignore-not-found", "-o", "name").stdout.split()

    eventually_sync(left, lambda names: names == [], "the root and what it owns deleted", timeout_s=120)


def test_the_apiserver_takes_a_fleet_clusters_name_and_refuses_one_the_sink_could_not_have_written(
    kubectl: Kubectl, target_cluster: None
) -> None:
    from pipeline.controller.spec import parse_spec

    def simulation(source: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "kubetape.dev/v1",
            "kind": "Simulation",
            "metadata": {"name": "one-of-a-fleet"},
            "spec": {"source": source},
        }

    sources = [
        {"segments": {"url": "s3://traces/kubetape", "from": "-1h", "to": "now", "cluster": "prod-eu.1"}},
        {"topic": {"bootstrap": "k:9092", "from": "-1h", "to": "now", "cluster": "prod-eu.1"}},
    ]
    for source in sources:
        dry_run(kubectl, yaml.safe_dump(simulation(source)))
        assert parse_spec(simulation(source)).source.cluster == "prod-eu.1"  # type: ignore[union-attr]
    for name in ("Prod", "prod-", "a" * 64):
        bad = simulation({"topic": {"bootstrap": "k:9092", "from": "-1h", "to": "now", "cluster": name}})
        result = kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(bad))
        assert result.returncode != 0, name
        assert "spec.source.topic.cluster" in result.stderr, result.stderr


REPLAYER = "system:serviceaccount:kubetape:kubetape-replayer"
Access = tuple[str, str, str, str | None, str | None]
"""(verb, group, resource, namespace, name) of one request."""


async def _may(api: Any, user: str, access: Access) -> bool:
    """The apiserver's own answer (a SubjectAccessReview, as ``kubectl auth can-i`` asks it, without
    starting a kubectl per question): whether ``user``, a service account, may make the request."""
    from kubernetes_asyncio import client

    from pipeline.io.kube.connect import body

    verb, group, resource, namespace, name = access
    attributes = {"verb": verb, "group": group, "resource": resource, "namespace": namespace, "name": name}
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kubetape", "system:authenticated"],
            "resourceAttributes": {k: v for k, v in attributes.items() if v is not None},
        },
    }
    # kubernetes-asyncio's own call: a review's metadata must stay empty (no fieldManager)
    answer = await client.AuthorizationV1Api(api).create_subject_access_review(body(review))
    return bool(answer.status.allowed)


async def test_the_replayer_may_write_the_tracked_kinds_and_what_a_replay_makes_and_no_more(
    rendered: dict[str, str], kubectl: Kubectl, target_cluster: None, sim_kubeconfig: Path
) -> None:
    from pipeline.io.kube.connect import kube_api

    _apply_controller_rbac(rendered, kubectl)
    allowed: list[Access] = [
        ("create", "kubetape.dev", "replayroots", None, None),
        ("delete", "kubetape.dev", "replayroots", None, None),
        ("create", "", "namespaces", None, None),
        ("delete", "", "namespaces", None, None),
        ("create", "", "nodes", None, None),
        ("watch", "", "pods", None, None),
        ("create", "apiextensions.k8s.io", "customresourcedefinitions", None, None),
        ("create", "apps", "deployments", "kubetape-shop", None),
        ("delete", "batch", "jobs", "kubetape-shop", None),
        ("patch", "autoscaling", "horizontalpodautoscalers", "kubetape-shop", None),
        ("create", "", "pods", "kubetape-shop", None),
        ("get", "", "configmaps", "kube-system", "kubetape-cluster-profile"),
    ]
    refused: list[Access] = [
        ("get", "", "secrets", "kubetape", None),
        ("list", "", "secrets", None, None),
        ("get", "", "configmaps", "kube-system", "kubeadm-config"),  # the profile's, by name, no other
        ("create", "rbac.authorization.k8s.io", "clusterroles", None, None),
        ("create", "rbac.authorization.k8s.io", "rolebindings", "kubetape", None),
        ("create", "scheduling.k8s.io", "priorityclasses", None, None),  # not a kind the config tracks
        ("delete", "apiextensions.k8s.io", "customresourcedefinitions", None, None),  # nor are CRDs
        ("delete", "", "nodes", None, None),
        ("create", "kubetape.dev", "simulations", None, None),
    ]
    async with kube_api(sim_kubeconfig) as api:
        answers = {access: await _may(api, REPLAYER, access) for access in [*allowed, *refused]}
    wrong = {access: may for access, may in answers.items() if may != (access in allowed)}
    assert wrong == {}, f"{REPLAYER}: allowed or refused contrary to the role: {wrong}"


def _service_account_kubeconfig(kubectl: Kubectl, admin: Path, account: str, out: Path) -> Path:
    """A kubeconfig holding a token of ``account`` (namespace kubetape), as a replayer Job's pod has."""
    token = kubectl("create", "token", account, "-n", "kubetape", "--duration", "10m")
    assert token.returncode == 0, token.stderr
    config = yaml.safe_load(admin.read_text())
    (context,) = [c for c in config["contexts"] if c["name"] == config["current-context"]]
    (cluster,) = [c for c in config["clusters"] if c["name"] == context["context"]["cluster"]]
    out.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": account, "user": {"token": token.stdout.strip()}}],
                "contexts": [{"name": account, "context": {"cluster": cluster["name"], "user": account}}],
                "current-context": account,
            }
        )
    )
    return out


def _rbac_trace() -> Any:
    """A Deployment and a bare pod (tracked kinds of the shipped config), and a PriorityClass (not one)."""
    from pipeline.formats.segment.content import build_segment
    from pipeline.formats.segment.header import SegmentKind
    from pipeline.model.events import Event
    from pipeline.model.keys import key_of
    from pipeline.replay.workload_manifests import deployment

    web = deployment("web", "shop", 2, cpu="100m", memory="64Mi")
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "batch", "namespace": "shop"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }
    priority = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "kubetape-rbac-high"},
        "value": 1000,
    }
    events = [Event.applied(ts, key_of(o), o, 0) for ts, o in ((0, web), (0, bare), (1_000, priority))]
    return build_segment(events, start_ms=0, end_ms=3_000, kind=SegmentKind.TRACE)


async def test_a_replay_runs_as_the_replayer_and_a_widened_role_writes_cluster_scoped_kinds_owned_by_the_root(
    rendered: dict[str, str], kubectl: Kubectl, target_cluster: None, sim_kubeconfig: Path, tmp_path: Path
) -> None:
    """As a replayer Job runs: with a token of kubetape-replayer. Under the shipped role the tracked kinds
    replay and the PriorityClass is refused (reported, the rest goes on); under the role `kubetape sim
    rbac` prints for a config tracking it too, it is written owned by the cluster-scoped root alone,
    and the cleanup deletes it. No virtual nodes (their writes are among the reviews above): the pods
    stay Pending, and the cleanup takes no pod termination time."""
    from functools import partial

    from pipeline.io.kube.client import KubeClient
    from pipeline.io.kube.connect import kube_api
    from pipeline.io.kube.pod_watch import PodWatch
    from pipeline.model.tracer_config import load_tracer_config
    from pipeline.replay.plan import plan_replay
    from pipeline.replay.rbac import replayer_cluster_role
    from pipeline.replay.replayer import Replayer
    from pipeline.replay.settings import ReplaySettings

    _apply_controller_rbac(rendered, kubectl)
    kubeconfig = _service_account_kubeconfig(kubectl, sim_kubeconfig, "kubetape-replayer", tmp_path / "kc")
    priority_class = ("scheduling.k8s.io/v1", "PriorityClass", None, "kubetape-rbac-high")

    async def replay(name: str, before_cleanup: Callable[[], Awaitable[None]] | None = None) -> Replayer:
        """A replay as the replayer; ``before_cleanup`` looks at what it wrote before the cleanup."""
        async with kube_api(kubeconfig) as api:
            replayer = Replayer(
                KubeClient(api),
                plan_replay(_rbac_trace(), 10),
                ReplaySettings(
                    speed=10,
                    replay_name=name,
                    namespace_prefix=name,
                    keep=before_cleanup is not None,
                ),
                pod_watch=partial(PodWatch, api),
            )
            await replayer.run()
            if before_cleanup is not None:
                await before_cleanup()
                await replayer.cleanup()
            return replayer

    async with kube_api(sim_kubeconfig) as admin_api:
        admin = KubeClient(admin_api)

        async def granted(access: Access) -> None:
            """Wait until the apiserver's authorizer (fed by a watch) answers as the role now says."""
            await eventually(
                lambda: _may(admin_api, REPLAYER, access), bool, f"{REPLAYER} may {access}", timeout_s=30
            )

        try:
            await granted(("create", "kubetape.dev", "replayroots", None, None))
            report = (await replay("rbac-narrow")).report
            assert report.applied == 2, report.summary()
            assert [f.key for f in report.failures] == [
                "scheduling.k8s.io/PriorityClass/_/kubetape-rbac-high"
            ]
            assert "HTTP 403" in report.failures[0].reason, report.failures[0].reason
            assert report.cleanup.startswith("done"), report.cleanup

            config = tmp_path / "tracer.yaml"
            tracer = yaml.safe_load((K8S / "prod" / "tracer.yaml").read_text())
            tracer["trackedObjects"]["scheduling.k8s.io/v1.PriorityClass"] = {}
            config.write_text(yaml.safe_dump(tracer))
            await admin.apply(replayer_cluster_role(load_tracer_config(config)))  # `kubetape sim rbac`'s
            await granted(("create", "scheduling.k8s.io", "priorityclasses", None, None))

            async def owned_by_the_root_alone() -> None:
                live = await admin.get(*priority_class)
                root = await admin.get("kubetape.dev/v1", "ReplayRoot", None, "kubetape-rbac-wide")
                assert live is not None, "the PriorityClass was not written"
                assert root is not None
                refs = [(r["kind"], r["name"], r["uid"]) for r in live["metadata"]["ownerReferences"]]
                assert refs == [("ReplayRoot", "kubetape-rbac-wide", root["metadata"]["uid"])], refs

            wide = await replay("rbac-wide", before_cleanup=owned_by_the_root_alone)
            assert wide.report.failed == 0, wide.report.summary()
            assert wide.report.cleanup.startswith("done"), wide.report.cleanup
            assert await admin.get(*priority_class) is None, "the cleanup deletes what the root owns"
            events = await admin.list_objects("v1", "Event")
            invalid = [e["metadata"]["name"] for e in events if e.get("reason") == "OwnerRefInvalidNamespace"]
            assert invalid == [], invalid
        finally:
            await admin.apply(replayer_cluster_role(load_tracer_config(K8S / "prod" / "tracer.yaml")))
            await admin.delete(*priority_class)
