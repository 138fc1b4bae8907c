"""Rewriting recorded objects for the simulated cluster: pure functions on plain dicts.

What changes, and why (SimKube's ``build_virtual_obj`` does the same, see ``reference/simkube.md`` §4):

* namespaces are mapped (``<prefix>-<namespace>`` by default) so a replay never touches real namespaces
  and two replays can share a cluster;
* server-managed metadata (uid, resourceVersion, timestamps, managedFields…) and ``status`` are dropped:
  the apiserver rejects or ignores them;
* the original ``ownerReferences`` name objects that do not exist in the simulation; they are replaced
  by one reference to the replay's cluster-scoped root, so deleting the root deletes everything;
* pod templates are pinned to the virtual (KWOK) nodes with a nodeSelector and a toleration, lose
  ``nodeName`` (the scheduler places them) and container ``ports`` (duplicate ports make apply fail);
* pod templates are annotated with the recorded owner's key (:data:`RECORDED_OWNER_ANNOTATION`) so the
  replay's pods can be compared with the recorded lifecycles per owner;
* pods with a recorded end get :data:`LIFETIME_ANNOTATION`, which the stack's KWOK stage turns into
  completion after that (already time-scaled) duration;
* pod templates get the replay's lifecycle delays (``RewriteSettings.pod_annotations``, see
  :mod:`pipeline.replay.delays`), already time-scaled, and lose recorded ones;
* CronJobs whose Jobs the trace recorded (``RewriteSettings.suspended_cronjobs``) are replayed
  suspended: those Jobs are replayed at their recorded (scaled) times, and the simulated CronJob
  controller would start more on the wall clock's schedule, at the wrong times and on top of them. A
  CronJob whose Jobs were not recorded (SimKube's default tracer config) keeps firing on the wall clock,
  as in SimKube, or nothing of it would run.

Objects are never modified in place: every function returns a new dict.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.model.errors import FormatError, RewriteError
from pipeline.model.keys import GroupVersionKind, key_of
from pipeline.model.node_labels import HOSTNAME_LABEL
from pipeline.model.pointer import resolve
from pipeline.model.sanitize import copy_json
from pipeline.model.tracer_config import KNOWN_POD_SPEC_TEMPLATE_PATHS, TracerConfig
from pipeline.replay.delays import DELAY_ANNOTATIONS

# Same value as pipeline.stack.kwok.LIFETIME_ANNOTATION (the stack installs the KWOK stage reading it);
# repeated here because the replay layer must not import the stack layer.
LIFETIME_ANNOTATION = "kubetape.dev/lifetime"
REPLAY_LABEL = "kubetape.dev/replay"
"""Label on everything a replay creates (value: the replay name), so it can be listed and counted."""
ORIGINAL_NAMESPACE_ANNOTATION = "kubetape.dev/original-namespace"
PAUSE_ANNOTATION = "kubetape.dev/paused"
"""On the replay's root: ``"true"`` stops the trace clock until it is removed (how the Simulation controller
pauses a replay running in another pod, where no signal reaches it)."""
RECORDED_OWNER_ANNOTATION = "kubetape.dev/recorded-owner"
"""On pod templates: the recorded object key of the object owning the template, so that the replay's
pods can be counted per recorded owner beside the recorded lifecycles."""
RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"
"""Where metrics-server (>= 0.7) scrapes a node: KWOK's path for it (the same as pipeline.stack.kwok's,
which the replay layer must not import). On every node the replay makes, so a cluster serving the
Metrics API over KWOK's emulated kubelet metrics measures the replay's pods."""
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""KWOK manages nodes annotated ``kwok.x-k8s.io/node: fake`` (kwokctl's default node selector)."""

_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "ownerReferences",
    "generateName",
)
MAX_NAMESPACE_LENGTH = 63


@dataclass(frozen=True, slots=True)
class RootRef:
    """The cluster-scoped object owning everything a replay creates."""

    api_version: str
    kind: str
    name: str
    uid: str

    def owner_reference(self) -> dict[str, Any]:
        # blockOwnerDeletion lets a foreground delete of the root wait until every dependent is gone
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True, slots=True)
class RewriteSettings:
    """How objects are rewritten; the defaults pin pods to the KWOK node skeleton (label ``type: kwok``)."""

    replay_name: str
    namespace_prefix: str = "kubetape"
    """Mapped namespace = ``<prefix>-<namespace>``; empty keeps namespaces as recorded."""
    namespace_map: Mapping[str, str] = field(default_factory=dict)
    """Explicit mappings that take precedence over the prefix."""
    node_selector: Mapping[str, str] = field(default_factory=lambda: {"type": "kwok"})
    tolerations: tuple[Mapping[str, Any], ...] = (
        {"key": KWOK_NODE_ANNOTATION, "operator": "Exists", "effect": "NoSchedule"},
    )
    config: TracerConfig | None = None
    """The trace's tracer config: where pod templates are (built-in paths are used for unknown kinds)."""
    suspended_cronjobs: frozenset[str] = frozenset()
    """Object keys of the CronJobs to replay suspended (their Jobs are in the trace)."""
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    """Lifecycle delay annotations for every pod template, already scaled
    (:func:`pipeline.replay.delays.delay_annotations`); recorded ones not among them are removed."""


def map_namespace(namespace: str, settings: RewriteSettings) -> str:
    """The simulated namespace for a recorded one; raises RewriteError if the result is not a valid name."""
    mapped = settings.namespace_map.get(namespace)
    if mapped is None:
        mapped = f"{settings.namespace_prefix}-{namespace}" if settings.namespace_prefix else namespace
    if len(mapped) > MAX_NAMESPACE_LENGTH:
        raise RewriteError(
            f"namespace {namespace!r} maps to {mapped!r}, longer than {MAX_NAMESPACE_LENGTH} characters; "
            f"use a shorter --namespace-prefix"
        )
    return mapped


def namespace_is_replays(mapped: str, settings: RewriteSettings) -> bool:
    """Whether the mapped namespace is one only this replay uses (made by the prefix, so the root owns
    it and its deletion takes its objects along), rather than a namespace kept or mapped by name."""
    return bool(settings.namespace_prefix) and mapped not in settings.namespace_map.values()


def namespace_object(name: str, settings: RewriteSettings, root: RootRef) -> dict[str, Any]:
    """A mapped namespace, owned by the root so it disappears with the replay."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {REPLAY_LABEL: settings.replay_name},
            "ownerReferences": [root.owner_reference()],
        },
    }


def pod_templates(obj: Mapping[str, Any], config: TracerConfig | None) -> list[dict[str, Any]]:
    """The pod templates (dicts with ``metadata`` and ``spec``) inside ``obj``, bare pods included."""
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    paths: tuple[str, ...] = ()
    entry = config.tracked_kind_for(api_version, kind) if config is not None else None
    if entry is not None and entry.pod_spec_template_paths:
        paths = entry.pod_spec_template_paths
    else:
        paths = KNOWN_POD_SPEC_TEMPLATE_PATHS.get(GroupVersionKind.from_api_version(api_version, kind), ())
    found: list[dict[str, Any]] = []
    for path in paths:
        for node in resolve(obj, path):
            template = _as_template(node)
            if template is not None and all(template is not seen for seen in found):
                found.append(template)
    return found


def _as_template(node: Any) -> dict[str, Any] | None:
    # a template holds spec.containers; SimKube's ReplicaSet path points at the spec holding "template"
    if not isinstance(node, dict):
        return None
    spec = node.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
        return node
    return _as_template(node.get("template"))


def format_lifetime(duration_ms: float) -> str:
    """A Go duration string (KWOK parses it with ``time.ParseDuration``), millisecond precision."""
    return f"{max(duration_ms, 1.0) / 1000.0:.3f}s"


def rewrite_object(
    obj: Mapping[str, Any],
    settings: RewriteSettings,
    root: RootRef,
    *,
    namespaced: bool,
    lifetime_ms: float | None = None,
) -> dict[str, Any]:
    """The simulated version of a recorded object (see the module docstring).

    ``namespaced`` comes from discovery (the trace does not say). ``lifetime_ms`` (already scaled by the
    replay speed) is set as the pods' lifetime; None lets them run until deleted. An object in a
    namespace the replay creates itself (see :func:`namespace_is_replays`) is not given the root's owner
    reference: deleting the namespace deletes it, and the garbage collector's bookkeeping of one owner
    reference per object costs the apiserver about a quarter of its write throughput.
    """
    out: dict[str, Any] = copy_json(dict(obj))
    meta = out.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise RewriteError(f"{obj.get('kind')!r} object has no metadata.name; it cannot be applied")
    out.pop("status", None)
    for name in _SERVER_METADATA:
        meta.pop(name, None)
    if namespaced:
        original = meta.get("namespace") or "default"
        meta["namespace"] = map_namespace(str(original), settings)
    else:
        meta.pop("namespace", None)
    meta["labels"] = {**(meta.get("labels") or {}), REPLAY_LABEL: settings.replay_name}
    if not namespaced or not namespace_is_replays(str(meta.get("namespace")), settings):
        meta["ownerReferences"] = [root.owner_reference()]
    for template in pod_templates(out, settings.config):
        _pin_template(template, obj, settings, lifetime_ms)
    if obj.get("kind") == "CronJob" and settings.suspended_cronjobs and isinstance(out.get("spec"), dict):
        with contextlib.suppress(FormatError):
            if str(key_of(obj)) in settings.suspended_cronjobs:
                out["spec"]["suspend"] = True
    return out


def _pin_template(
    template: dict[str, Any],
    original: Mapping[str, Any],
    settings: RewriteSettings,
    lifetime_ms: float | None,
) -> None:
    tmeta = template.get("metadata")
    if not isinstance(tmeta, dict):
        tmeta = template["metadata"] = {}
    tmeta.pop("creationTimestamp", None)
    annotations = dict(tmeta.get("annotations") or {})
    original_ns = (original.get("metadata") or {}).get("namespace")
    if original_ns:
        annotations[ORIGINAL_NAMESPACE_ANNOTATION] = original_ns
    with contextlib.suppress(FormatError):  # an object without a key was refused before this point
        annotations[RECORDED_OWNER_ANNOTATION] = str(key_of(original))
    if lifetime_ms is not None:
        annotations[LIFETIME_ANNOTATION] = format_lifetime(lifetime_ms)
    else:
        annotations.pop(LIFETIME_ANNOTATION, None)
    for key in DELAY_ANNOTATIONS:
        annotations.pop(key, None)
    annotations.update(settings.pod_annotations)
    tmeta["annotations"] = annotations
    # pods carry the replay label so the replayer can count them (extra template labels never break
    # a controller's selector, which must be a subset of them)
    tmeta["labels"] = {**(tmeta.get("labels") or {}), REPLAY_LABEL: settings.replay_name}
    spec = template["spec"]
    spec.pop("nodeName", None)
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **settings.node_selector}
    tolerations = list(spec.get("tolerations") or [])
    for toleration in settings.tolerations:
        if dict(toleration) not in tolerations:
            tolerations.append(dict(toleration))
    spec["tolerations"] = tolerations
    for group in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(group) or []:
            if isinstance(container, dict):
                container.pop("ports", None)


def deletion_target(
    obj: Mapping[str, Any], settings: RewriteSettings, *, namespaced: bool
) -> tuple[str | None, str]:
    """(mapped namespace or None, name) of the simulated object a recorded delete refers to."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise RewriteError(f"deleted {obj.get('kind')!r} object has no metadata.name")
    if not namespaced:
        return None, name
    return map_namespace(str(meta.get("namespace") or "default"), settings), name


def resource_metrics_path(node_name: str) -> str:
    """The path KWOK's ``metrics-resource`` Metric serves ``node_name``'s kubelet metrics at."""
    return f"/metrics/nodes/{node_name}/metrics/resource"


def virtual_nodes(
    skeleton: Mapping[str, Any], count: int, settings: RewriteSettings, root: RootRef
) -> list[dict[str, Any]]:
    """``count`` KWOK nodes from a Node skeleton, named ``<replay>-<skeleton name>-<i>``, owned by the root.

    Status (capacity, allocatable) is kept: a node is created with it, as a kubelet registers.
    The skeleton's labels should include the replay's node selector, else pods will not land on them.
    """
    if skeleton.get("kind") != "Node":
        raise RewriteError(f"node skeleton holds a {skeleton.get('kind')!r}, expected kind: Node")
    if count < 1:
        raise RewriteError(f"virtual node count must be at least 1, got {count}")
    base = str((skeleton.get("metadata") or {}).get("name") or "node")
    nodes = []
    for index in range(count):
        node: dict[str, Any] = copy_json(dict(skeleton))
        meta = node.setdefault("metadata", {})
        for name in _SERVER_METADATA:
            meta.pop(name, None)
        name = f"{settings.replay_name}-{base}-{index}"
        meta["name"] = name
        meta["labels"] = {
            **(meta.get("labels") or {}),
            **settings.node_selector,
            HOSTNAME_LABEL: name,
            REPLAY_LABEL: settings.replay_name,
        }
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            KWOK_NODE_ANNOTATION: "fake",
            RESOURCE_METRICS_PATH_ANNOTATION: resource_metrics_path(name),
        }
        meta["ownerReferences"] = [root.owner_reference()]
        nodes.append(node)
    return nodes


def recorded_node(obj: Mapping[str, Any], settings: RewriteSettings, root: RootRef) -> dict[str, Any]:
    """A recorded Node turned into a KWOK node: same name, capacity and labels, managed by KWOK."""
    node = virtual_nodes(obj, 1, settings, root)[0]
    node["metadata"]["name"] = obj["metadata"]["name"]
    node["metadata"]["annotations"][RESOURCE_METRICS_PATH_ANNOTATION] = resource_metrics_path(
        obj["metadata"]["name"]
    )
    node["metadata"]["labels"]["kubernetes.io/hostname"] = obj["metadata"]["name"]
    node.get("spec", {}).pop("providerID", None)
    return node


def autoscaler_node_pool(pool: Mapping[str, Any], settings: RewriteSettings, root: RootRef) -> dict[str, Any]:
    """A Karpenter NodePool for this replay: named ``<replay>-<name>`` (replays side by side keep
    their pools apart), owned by the root, and stamping the replay's node selector on the nodes it
    launches, as :func:`virtual_nodes` does, since replayed pods are pinned to it."""
    body: dict[str, Any] = copy_json(dict(pool))
    meta = body.setdefault("metadata", {})
    for name in _SERVER_METADATA:
        meta.pop(name, None)
    meta["name"] = f"{settings.replay_name}-{meta.get('name') or 'pool'}"
    meta["labels"] = {**(meta.get("labels") or {}), REPLAY_LABEL: settings.replay_name}
    meta["ownerReferences"] = [root.owner_reference()]
    template = body.setdefault("spec", {}).setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    # the replay label too, so whoever lists the replay's nodes by it (a sweep's observer) sees these
    template_meta["labels"] = {
        **(template_meta.get("labels") or {}),
        **settings.node_selector,
        REPLAY_LABEL: settings.replay_name,
    }
    return body
