"""Everything a replay creates before trace time starts, and the namespaces it creates on the way.

* The root: a ``ReplayRoot``, kubetape's own cluster-scoped custom resource, without any effect, so it
  can own namespaces, nodes and cluster-scoped objects alike, and RBAC can grant its deletion alone.
  Its CRD is installed when the cluster lacks it. Deleting the root in the foreground deletes all.
* The simulated cluster's stated profile (``kubetape stack up --profile``), checked when asked for.
* The virtual nodes of the fixed node pools, waited for until KWOK marks them Ready, and the
  autoscaler's NodePools.
* The trace's namespaces (each waited for until its default ServiceAccount exists) and the discovery
  of every kind the trace holds, so the first steps do not pay for them in lateness.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

from pipeline.io.kube.types import ApiResource
from pipeline.model.errors import ConfigError, KubeApiError, KubetapeError, UnknownKindError
from pipeline.model.events import EventType
from pipeline.model.keys import group_of
from pipeline.model.node_labels import HOSTNAME_LABEL, ZONE_LABEL
from pipeline.model.tracer_config import BUILT_IN_GROUPS
from pipeline.replay.apply import Retrying
from pipeline.replay.autoscale.settings import NODEPOOL_API_VERSION
from pipeline.replay.clock.schedule import Clock, pause
from pipeline.replay.crds import CRD_API_VERSION, defining_crd, recorded_crd, simulated_crd
from pipeline.replay.plan import ReplayPlan
from pipeline.replay.ports import ReplayCluster
from pipeline.replay.rewrite import (
    REPLAY_LABEL,
    RewriteSettings,
    RootRef,
    autoscaler_node_pool,
    map_namespace,
    namespace_object,
    rewrite_object,
    virtual_nodes,
)
from pipeline.replay.settings import ReplaySettings

log = logging.getLogger(__name__)

ROOT_API_VERSION = "kubetape.dev/v1"
ROOT_KIND = "ReplayRoot"
ROOT_CRD_TIMEOUT_S = 60.0
"""How long the replay waits for the root's CRD, once it installed it, to be served."""
PROFILE_CONFIGMAP = ("kube-system", "kubetape-cluster-profile")
"""Where a simulated cluster states its profile (``kubetape stack up --profile``, k8s/sim/profiles)."""


def root_crd() -> dict[str, Any]:
    """The root's CustomResourceDefinition, as k8s/sim/replayroot-crd.yaml ships it."""
    return {
        "apiVersion": CRD_API_VERSION,
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "replayroots.kubetape.dev"},
        "spec": {
            "group": "kubetape.dev",
            "scope": "Cluster",
            "names": {
                "kind": ROOT_KIND,
                "listKind": f"{ROOT_KIND}List",
                "plural": "replayroots",
                "singular": "replayroot",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                    "additionalPrinterColumns": [
                        {
                            "name": "Replay",
                            "type": "string",
                            "jsonPath": ".metadata.labels.kubetape\\.dev/replay",
                        },
                        {
                            "name": "Paused",
                            "type": "string",
                            "jsonPath": ".metadata.annotations.kubetape\\.dev/paused",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


async def read_cluster_profile(cluster: ReplayCluster) -> dict[str, Any] | None:
    """The simulated cluster's profile, for the report: its name, settings and the settings that can
    change where pods land; None when the cluster states none (or it cannot be read)."""
    namespace, name = PROFILE_CONFIGMAP
    try:
        found = await cluster.get("v1", "ConfigMap", namespace, name)
    except KubetapeError:
        return None
    data = (found or {}).get("data") or {}
    if not data.get("profile"):
        return None
    out: dict[str, Any] = {"profile": str(data["profile"])}
    for field_name, key in (
        ("settings", "settings"),
        ("changes_scheduling", "changesScheduling"),
        ("changes_scheduling_on_zoned_nodes", "changesSchedulingOnZonedNodes"),
    ):
        try:
            out[field_name] = json.loads(data.get(key) or "null")
        except ValueError:
            out[field_name] = data.get(key)
    return out


async def note_zoned_nodes(cluster: ReplayCluster, profile: dict[str, Any] | None) -> None:
    """Add the profile's settings that change placements only on zoned nodes (or nodes without a
    hostname label) to its ``changes_scheduling``, once the cluster has such a node: the stack's own
    nodes have none, a user's node skeleton or an autoscaler's nodes may."""
    conditional = [str(c) for c in (profile or {}).get("changes_scheduling_on_zoned_nodes") or []]
    if profile is None or not conditional:
        return
    changes = profile.get("changes_scheduling")
    if not isinstance(changes, list):
        changes = profile["changes_scheduling"] = []
    if all(c in changes for c in conditional):
        return
    try:
        nodes = await cluster.list_objects("v1", "Node")
    except KubetapeError as exc:
        # not knowing is not "the same placements": they are named, and the log says why
        log.warning(
            "cannot list the nodes to check for zones; the report names the settings that depend on them",
            extra={"ctx": {"reason": str(exc)}},
        )
        zoned = True
    else:
        zoned = any(_zoned(node) for node in nodes)
    if zoned:
        changes.extend(c for c in conditional if c not in changes)


def _zoned(node: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return ZONE_LABEL in labels or HOSTNAME_LABEL not in labels


def check_profile(expected: str | None, stated: Mapping[str, Any] | None) -> None:
    """Refuse a cluster that does not state the ``expected`` profile (``--expect-profile``)."""
    found = (stated or {}).get("profile")
    if expected is not None and found != expected:
        namespace, name = PROFILE_CONFIGMAP
        raise ConfigError(
            f"the simulated cluster states profile {found!r} (ConfigMap {namespace}/{name}), not the "
            f"expected {expected!r}: create it with `kubetape stack up --profile {expected}`, or apply "
            f"k8s/sim/profiles/{expected}/ to your cluster's control plane and that ConfigMap"
        )


def _is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Namespaces:
    """The namespaces the replay's objects land in, each created once, when first needed."""

    def __init__(
        self,
        cluster: ReplayCluster,
        rewrite: RewriteSettings,
        retrying: Retrying,
        clock: Clock,
        *,
        ready_timeout_s: float,
    ) -> None:
        self._cluster = cluster
        self._rewrite = rewrite
        self._retrying = retrying
        self._clock = clock
        self._ready_timeout_s = ready_timeout_s
        self._created: dict[str, asyncio.Task[None]] = {}
        self.root: RootRef | None = None
        """Set once the root exists: it owns every namespace created."""

    @property
    def names(self) -> list[str]:
        """Every namespace asked for so far (created or not)."""
        return list(self._created)

    async def ensure(self, name: str) -> None:
        """Create ``name`` unless done already (or being done), and wait until pods may go in."""
        task = self._created.get(name)
        if task is None or (task.done() and task.exception() is not None):
            assert self.root is not None
            body = namespace_object(name, self._rewrite, self.root)

            async def create() -> None:
                await self._retrying(lambda: self._cluster.apply(body))
                await self._wait_for_default_service_account(name)

            task = asyncio.ensure_future(create())
            self._created[name] = task
        await asyncio.shield(task)

    async def _wait_for_default_service_account(self, namespace: str) -> None:
        # the apiserver refuses pods (403) until the controller-manager created the namespace's
        # "default" ServiceAccount, a few ms to a second after the namespace
        deadline = self._clock.now() + self._ready_timeout_s
        while await self._cluster.get("v1", "ServiceAccount", namespace, "default") is None:
            if self._clock.now() > deadline:
                log.warning(
                    "no default ServiceAccount yet; pods in the namespace may be refused",
                    extra={"ctx": {"namespace": namespace}},
                )
                return
            await pause(self._clock, 0.05)


class ReplaySetup:
    """Creates the root, the virtual nodes and node pools, and prepares the trace's kinds and
    namespaces (module doc)."""

    def __init__(
        self,
        cluster: ReplayCluster,
        settings: ReplaySettings,
        rewrite: RewriteSettings,
        *,
        namespaces: Namespaces,
        retrying: Retrying,
        clock: Clock,
    ) -> None:
        self._cluster = cluster
        self._settings = settings
        self._rewrite = rewrite
        self._namespaces = namespaces
        self._retrying = retrying
        self._clock = clock
        self.node_pool_names: list[str] = []
        """The autoscaler's NodePools created, by name."""

    @property
    def _name(self) -> str:
        return self._rewrite.replay_name

    async def create_root(self) -> RootRef:
        """The root is a kind of kubetape's own, not a built-in one such as ClusterRole, so that RBAC
        can let a controller delete replay roots and nothing else."""
        name = f"kubetape-{self._name}"
        body: dict[str, Any] = {
            "apiVersion": ROOT_API_VERSION,
            "kind": ROOT_KIND,
            "metadata": {"name": name, "labels": {REPLAY_LABEL: self._name}},
        }
        deadline = self._clock.now() + ROOT_CRD_TIMEOUT_S
        try:
            await self._cluster.resource_for(ROOT_API_VERSION, ROOT_KIND)
        except UnknownKindError:
            await self._install_root_crd(deadline)
        while True:
            try:
                live = await self._retrying(lambda: self._cluster.apply(body))
                break
            except UnknownKindError:
                # Established, but discovery can lag behind it for a moment
                if self._clock.now() >= deadline:
                    raise
                await pause(self._clock, 0.25)
        return RootRef(ROOT_API_VERSION, ROOT_KIND, name, live["metadata"]["uid"])

    async def _install_recorded_crd(self, plan: ReplayPlan, api_version: str, kind: str) -> ApiResource:
        """A custom kind the simulated cluster does not serve: install its CRD from the trace, else from
        ``--crd`` (owned by
        the root, so the cleanup removes it) before trace time starts, and wait until it is served.
        Without one in the trace, the kind's steps fail, each naming it; the rest of the replay goes on."""
        crd = recorded_crd(plan, api_version, kind) or defining_crd(self._settings.crds, api_version, kind)
        if crd is None and group_of(api_version) in BUILT_IN_GROUPS:
            raise UnknownKindError(f"no kind {kind!r} in {api_version!r}", status=404, reason="UnknownKind")
        if crd is None:
            log.warning(
                f"the trace holds {kind} objects ({api_version}), which the simulated cluster does not "
                f"serve, and not their CustomResourceDefinition: track "
                f"apiextensions.k8s.io/v1.CustomResourceDefinition in the tracer config so that the "
                f"recording holds it, give it with --crd FILE, or install it in the simulated cluster; "
                f"until then every {kind} step fails",
                extra={"ctx": {"api_version": api_version, "kind": kind}},
            )
            raise UnknownKindError(f"no kind {kind!r} in {api_version!r}", status=404, reason="UnknownKind")
        assert self._namespaces.root is not None
        body = simulated_crd(rewrite_object(crd, self._rewrite, self._namespaces.root, namespaced=False))
        deadline = self._clock.now() + ROOT_CRD_TIMEOUT_S
        await self._install_crd(body, deadline)
        while True:
            try:
                resource = await self._cluster.resource_for(api_version, kind)
                break
            except UnknownKindError:
                if self._clock.now() >= deadline:  # Established, but discovery may lag behind it
                    raise
                await pause(self._clock, 0.25)
        # a new kind's storage answers 429 for a moment after it is served: wait for it here, not in
        # the lateness of its first steps
        selector = f"{REPLAY_LABEL}={self._name}"
        await self._retrying(lambda: self._cluster.list_objects(api_version, kind, label_selector=selector))
        return resource

    async def _install_root_crd(self, deadline: float) -> None:
        """Install the root's CRD (k8s/sim ships it too; a plain simulated cluster has no kubetape
        manifests) and wait until the apiserver serves it."""
        await self._install_crd(root_crd(), deadline)

    async def _install_crd(self, crd: dict[str, Any], deadline: float) -> None:
        """Apply a CRD and wait until it is Established: a new CRD has no conditions at first."""
        name = crd["metadata"]["name"]
        await self._retrying(lambda: self._cluster.apply(crd))
        conditions: list[dict[str, Any]] = []
        while True:
            live = await self._retrying(
                lambda: self._cluster.get(CRD_API_VERSION, "CustomResourceDefinition", None, name)
            )
            conditions = ((live or {}).get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                return
            if self._clock.now() >= deadline:
                raise KubeApiError(
                    f"CustomResourceDefinition {name} not Established after {ROOT_CRD_TIMEOUT_S:.0f} s; "
                    f"last conditions: {conditions}"
                )
            await pause(self._clock, 0.25)

    async def create_virtual_nodes(self, root: RootRef) -> None:
        pools = [(skeleton, count) for skeleton, count in self._settings.node_pools if count > 0]
        if not pools:
            return
        nodes: list[dict[str, Any]] = []
        for index, (skeleton, count) in enumerate(pools):
            pool = skeleton
            if index:  # node names come from the skeleton's name: keep pools apart
                name = (skeleton.get("metadata") or {}).get("name") or "node"
                pool = {
                    **skeleton,
                    "metadata": {**(skeleton.get("metadata") or {}), "name": f"{name}-{index}"},
                }
            nodes += virtual_nodes(pool, count, self._rewrite, root)
        await asyncio.gather(*(self._retrying(partial(self._cluster.apply, node)) for node in nodes))
        # start the trace clock only once KWOK marked the nodes Ready, or the first pods would wait
        # for them and start late
        selector = f"{REPLAY_LABEL}={self._name}"
        deadline = self._clock.now() + self._settings.node_ready_timeout_s
        while self._clock.now() < deadline:
            live = await self._cluster.list_objects("v1", "Node", label_selector=selector)
            if sum(1 for node in live if _is_ready(node)) >= len(nodes):
                # KWOK marks a node Ready before its pod handling for that node has started; a pod
                # bound in between is never started (kubernetes-sigs/kwok#1572): let it settle
                await pause(self._clock, self._settings.node_settle_s)
                return
            await pause(self._clock, 0.1)
        log.warning(
            "virtual nodes not Ready in time; replaying anyway",
            extra={"ctx": {"replay": self._name, "timeout_s": self._settings.node_ready_timeout_s}},
        )

    async def create_node_pools(self, root: RootRef) -> None:
        """The autoscaler's NodePools, owned by the root (deleting it makes Karpenter drain and delete
        the nodes it launched). Pending pods then make Karpenter launch KWOK nodes."""
        if not self._settings.autoscaler_node_pools:
            return
        try:
            await self._cluster.resource_for(NODEPOOL_API_VERSION, "NodePool")
        except UnknownKindError:
            raise ConfigError(
                "the simulated cluster has no Karpenter NodePool kind: start Karpenter beside it "
                "(`kubetape stack up --autoscaler karpenter`) or install its CRDs"
            ) from None
        for pool in self._settings.autoscaler_node_pools:
            body = autoscaler_node_pool(pool, self._rewrite, root)
            await self._retrying(partial(self._cluster.apply, body))
            self.node_pool_names.append(body["metadata"]["name"])

    async def prepare(self, plan: ReplayPlan) -> None:
        """Before trace time starts: discover every kind of the trace and create the namespaces its
        objects land in, so the first steps do not pay for it in lateness. Failures here are left to
        the steps, which report them per object."""
        kinds: dict[tuple[str, str], set[str]] = {}
        for step in plan.steps:
            obj = step.payload.obj or {}
            if step.payload.type is EventType.APPLIED and "apiVersion" in obj and "kind" in obj:
                namespace = (obj.get("metadata") or {}).get("namespace") or "default"
                kinds.setdefault((obj["apiVersion"], obj["kind"]), set()).add(str(namespace))
        namespaces: set[str] = set()
        for (api_version, kind), recorded in kinds.items():
            try:
                try:
                    resource = await self._cluster.resource_for(api_version, kind)
                except UnknownKindError:
                    resource = await self._install_recorded_crd(plan, api_version, kind)
                if resource.namespaced:
                    namespaces.update(map_namespace(ns, self._rewrite) for ns in recorded)
            except KubetapeError:
                continue
        results = await asyncio.gather(
            *(self._namespaces.ensure(ns) for ns in sorted(namespaces)), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
