"""The validation rules, and :func:`validate_trace`, which runs them over a trace or a time range.

Rules see each event's applied objects in order, against the state the trace has built so far: an
object exists from the event applying it (objects applied in the same event count) until an event
deletes it. Namespaces always hold a ``default`` ServiceAccount and the ``kube-root-ca.crt``
ConfigMap, and ``optional`` references never stop a pod, so neither is reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.formats.simkube import SimkubeTrace
from pipeline.model.errors import ConfigError
from pipeline.model.keys import group_of
from pipeline.model.node_labels import HOSTNAME_LABEL
from pipeline.model.pointer import resolve
from pipeline.validate import fixes
from pipeline.validate.apiserver_rules import APISERVER_RULES, check_pod_spec, check_selector
from pipeline.validate.codes import FORMER_CODES, former_code_note
from pipeline.validate.findings import Finding, Fix, ObjectRef, Rule, Severity
from pipeline.validate.kinds import CLUSTER_SCOPED, NAMESPACED
from pipeline.validate.podspec import PodSpecLocator, concrete_pointers, escape, references
from pipeline.validate.reference_rules import (
    REFERENCE_RULES,
    ObjectId,
    check_image_pull_secrets,
    check_keys,
    data_keys,
)

_E, _W = Severity.ERROR, Severity.WARNING
STATUS_POPULATED = Rule(
    "W0000",
    "status_field_populated",
    _W,
    "object has a populated status",
    "The replayer drops status before applying, and the simulated cluster computes its own. A status in "
    "the trace is noise at best and misleading at worst. Fix: remove /status.",
)
SERVICE_ACCOUNT_MISSING = Rule(
    "E0001",
    "service_account_missing",
    _E,
    "pod template names a ServiceAccount the trace does not contain",
    "Pods naming a ServiceAccount that does not exist are rejected by the ServiceAccount admission "
    "plugin, so the replay never starts them. Fix: synthesize a placeholder ServiceAccount, or remove "
    "serviceAccountName/serviceAccount so the pods use the namespace's default account.",
)
ENVVAR_SECRET_MISSING = Rule(
    "E0002",
    "envvar_secret_missing",
    _E,
    "container environment uses a Secret the trace does not contain",
    "A pod whose env (secretKeyRef) or envFrom (secretRef) needs a Secret that does not exist stays in "
    "CreateContainerConfigError. References are checked by Secret name (the secretKeyRef key names an "
    "entry inside the Secret). SimKube's rule of the same code. Fix: synthesize a placeholder Secret "
    "holding the keys the pod reads, or remove the env entries.",
)
ENVVAR_CONFIGMAP_MISSING = Rule(
    "E0003",
    "envvar_configmap_missing",
    _E,
    "container environment uses a ConfigMap the trace does not contain",
    "A pod whose env (configMapKeyRef) or envFrom (configMapRef) needs a ConfigMap that does not exist "
    "never starts. References are checked by ConfigMap name. SimKube's rule of the same code. Fix: "
    "synthesize a placeholder ConfigMap holding the keys the pod reads, or remove the env entries.",
)
VOLUME_SECRET_MISSING = Rule(
    "E0004",
    "volume_secret_missing",
    _E,
    "pod template mounts a Secret the trace does not contain",
    "A pod whose secret volume (or a projected volume's secret source) needs a Secret that does not "
    "exist stays in ContainerCreating. SimKube's rule of the same code (which checks secret volumes "
    "only). Fix: synthesize a placeholder Secret holding the keys the volume projects, or remove the "
    "volume (or source) and the mounts of the volume.",
)
VOLUME_CONFIGMAP_MISSING = Rule(
    "E0005",
    "volume_configmap_missing",
    _E,
    "pod template mounts a ConfigMap the trace does not contain",
    "A pod whose configMap volume (or a projected volume's configMap source) needs a ConfigMap that "
    "does not exist stays in ContainerCreating. SimKube's rule of the same code (which checks "
    "configMap volumes only). Fix: synthesize a placeholder ConfigMap holding the keys the volume "
    "projects, or remove the volume (or source) and the mounts of the volume.",
)
PVC_MISSING = Rule(
    "KE0004",
    "pvc_missing",
    _E,
    "pod template mounts a PersistentVolumeClaim the trace does not contain",
    "A pod mounting a claim that does not exist stays Pending. A placeholder claim would not help "
    "either: nothing provisions volumes in the simulated cluster. Fix: back the volume with an "
    "emptyDir, or remove the volume and its mounts.",
)
CLUSTER_SCOPED_OBJECT = Rule(
    "KE0005",
    "cluster_scoped_object",
    _E,
    "cluster-scoped object the replayer cannot place",
    "A replay maps every object into its own namespaces; cluster-scoped objects (Nodes, Namespaces, "
    "ClusterRoles, PersistentVolumes, CRDs, ...) would be created cluster-wide, colliding with the "
    "simulated cluster's own and outliving the replay. Fix: drop the object from the trace.",
)
UNKNOWN_KIND = Rule(
    "KW0006",
    "unknown_kind",
    _W,
    "object of a kind that is neither built in nor defined by a CRD in the trace",
    "The replayer can only apply kinds the simulated cluster serves. Unless its CustomResourceDefinition "
    "is installed there beforehand, every apply of this object fails. Fix: install the CRD in the "
    "simulated cluster, or drop the object from the trace.",
)
NAMESPACE_OUTSIDE_TRACE = Rule(
    "KW0007",
    "namespace_outside_trace",
    _W,
    "object refers to a namespace that no object of the trace lives in",
    "Pod (anti-)affinity terms and role binding subjects can name other namespaces. A replay only "
    "creates the namespaces of the objects it replays, so such references select nothing or bind "
    "nothing. Fix: remove the reference (or add the namespace's objects to the trace).",
)
POD_PINNED_TO_NODE = Rule(
    "KE0008",
    "pod_pinned_to_node",
    _E,
    "pod template pins pods to a node by name",
    "nodeName, a kubernetes.io/hostname nodeSelector or a node affinity on metadata.name/hostname name "
    "a node of the recorded cluster; the simulated cluster has other nodes, so the pods stay Pending "
    "(kubetape's replayer drops nodeName itself, but not the selector or the affinity). Fix: remove "
    "the pinning and let the scheduler place the pods.",
)

RULES: dict[str, Rule] = {
    r.code: r
    for r in (
        STATUS_POPULATED,
        SERVICE_ACCOUNT_MISSING,
        ENVVAR_SECRET_MISSING,
        ENVVAR_CONFIGMAP_MISSING,
        VOLUME_SECRET_MISSING,
        VOLUME_CONFIGMAP_MISSING,
        PVC_MISSING,
        CLUSTER_SCOPED_OBJECT,
        UNKNOWN_KIND,
        NAMESPACE_OUTSIDE_TRACE,
        POD_PINNED_TO_NODE,
        *APISERVER_RULES,
        *REFERENCE_RULES,
    )
}
"""Every rule, by code."""

_MISSING_RULE = {
    ("ServiceAccount", False): SERVICE_ACCOUNT_MISSING,
    ("Secret", False): ENVVAR_SECRET_MISSING,
    ("ConfigMap", False): ENVVAR_CONFIGMAP_MISSING,
    ("Secret", True): VOLUME_SECRET_MISSING,
    ("ConfigMap", True): VOLUME_CONFIGMAP_MISSING,
    ("PersistentVolumeClaim", True): PVC_MISSING,
}
"""The rule for a missing (kind, referenced from a volume): SimKube tells environment references from
volumes."""
_TRACKED_KINDS = {kind for kind, _volume in _MISSING_RULE}
_KIND_OF = {rule.code: kind for (kind, _volume), rule in _MISSING_RULE.items()}
_IMPLICIT = {("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")}


def rule(code: str) -> Rule:
    """The rule with ``code`` (case-insensitive; a former code gives the rule that had it when no rule
    has it now); ConfigError listing the known codes otherwise."""
    return lookup(code)[0]


def lookup(code: str) -> tuple[Rule, str | None]:
    """The rule :func:`rule` finds for ``code``, and a note when ``code`` is a former code of
    kubetape's (:mod:`pipeline.validate.codes`): deprecated, or meaning SimKube's rule now."""
    wanted = code.upper()
    found = RULES.get(wanted)
    if wanted in FORMER_CODES:
        former = RULES[FORMER_CODES[wanted]]
        note = former_code_note(wanted, former.name, found.name if found else None)
        return found or former, note
    if found is None:
        raise ConfigError(f"unknown rule code {code!r}; known codes: {', '.join(RULES)}")
    return found, None


@dataclass
class _State:
    """What exists at the current event, plus trace-wide facts."""

    locator: PodSpecLocator
    namespaces: set[str]
    crd_kinds: set[tuple[str, str]]
    existing: set[ObjectId] = field(default_factory=set)
    keys: dict[ObjectId, frozenset[str] | None] = field(default_factory=dict)
    """The data keys of the ConfigMaps and Secrets in ``existing`` (None: unknown)."""
    reported: set[tuple[str, ObjectRef, tuple[str, ...], str]] = field(default_factory=set)
    """Missing-reference findings already reported (their repeats skip building fixes)."""

    def update(self, obj: dict[str, Any], present: bool) -> None:
        kind, meta = obj.get("kind"), obj.get("metadata")
        if (
            kind in _TRACKED_KINDS
            and group_of(str(obj.get("apiVersion", ""))) == ""
            and isinstance(meta, dict)
        ):
            key = (str(kind), str(meta.get("namespace") or "default"), str(meta.get("name", "")))
            if present:
                self.existing.add(key)
                if kind in ("ConfigMap", "Secret"):
                    self.keys[key] = data_keys(obj)
            else:
                self.existing.discard(key)
                self.keys.pop(key, None)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _namespaces_and_crds(trace: SimkubeTrace) -> tuple[set[str], set[tuple[str, str]]]:
    namespaces, crds = set(), set()
    for event in trace.events:
        for obj in event.applied_objs:
            meta = _mapping(obj.get("metadata"))
            if meta.get("namespace"):
                namespaces.add(str(meta["namespace"]))
            if obj.get("kind") == "Namespace" and meta.get("name"):
                namespaces.add(str(meta["name"]))
            if obj.get("kind") == "CustomResourceDefinition":
                spec = _mapping(obj.get("spec"))
                names = _mapping(spec.get("names"))
                crds.add((str(spec.get("group", "")), str(names.get("kind", ""))))
    return namespaces, crds


def validate_trace(trace: SimkubeTrace, *, start: int | None = None, end: int | None = None) -> list[Finding]:
    """Every finding for events with ``start <= ts < end`` (Unix seconds; None = unbounded).

    Events before ``start`` still build the state later events are checked against.
    """
    namespaces, crds = _namespaces_and_crds(trace)
    state = _State(PodSpecLocator(trace.config), namespaces, crds)
    findings: list[Finding] = []
    for index, event in enumerate(trace.events):
        for obj in event.applied_objs:
            state.update(obj, present=True)
        if (start is None or event.ts >= start) and (end is None or event.ts < end):
            for obj in event.applied_objs:
                findings.extend(_check_object(state, index, event.ts, obj))
        for obj in event.deleted_objs:
            state.update(obj, present=False)
    return _merge_repeats(findings)


def _merge_repeats(findings: list[Finding]) -> list[Finding]:
    """One finding per (rule, object, paths, message): an object updated in many events is reported
    once, at its first event, with the later events listed."""
    first: dict[tuple[str, ObjectRef, tuple[str, ...], str], int] = {}
    merged: list[Finding] = []
    for f in findings:
        key = (f.code, f.obj, f.paths, f.message)
        if key not in first:
            first[key] = len(merged)
            merged.append(f)
        else:
            earlier = merged[first[key]]
            merged[first[key]] = replace(earlier, repeated_at=(*earlier.repeated_at, f.event_index))
    return merged


def _check_object(state: _State, index: int, ts: int, obj: dict[str, Any]) -> Iterator[Finding]:
    ref = ObjectRef.of(obj)
    status = obj.get("status")
    if status not in (None, {}):
        fix = fixes.remove_fields(ref, ["/status"], "remove /status")
        yield Finding(STATUS_POPULATED, index, ts, ref, ("/status",), "status is populated", (fix,))
    scope = (group_of(ref.api_version), ref.kind)
    if scope in CLUSTER_SCOPED:
        message = f"{ref.kind} is cluster-scoped; the replayer cannot place it in a replay namespace"
        yield Finding(CLUSTER_SCOPED_OBJECT, index, ts, ref, ("",), message, (fixes.drop_object(ref),))
    elif scope not in NAMESPACED and scope not in state.crd_kinds:
        message = f"{ref.api_version} {ref.kind} is not a built-in kind and the trace has no CRD for it"
        yield Finding(UNKNOWN_KIND, index, ts, ref, ("",), message, (fixes.drop_object(ref),))
    for pod_spec in state.locator.pod_spec_pointers(obj):
        spec = resolve(obj, pod_spec)[0]
        yield from _missing_references(state, index, ts, ref, pod_spec=pod_spec, spec=spec)
        yield from _pinned(index, ts, ref, pod_spec, spec)
        yield from _affinity_namespaces(state, index, ts, ref, pod_spec=pod_spec, spec=spec)
        yield from check_pod_spec(index, ts, ref, pod_spec, spec)
        yield from check_keys(index, ts, ref, pod_spec=pod_spec, spec=spec, known_keys=state.keys)
        yield from check_image_pull_secrets(
            index, ts, ref, pod_spec=pod_spec, spec=spec, existing=state.existing
        )
    yield from check_selector(index, ts, ref, obj)
    if ref.kind in ("RoleBinding", "ClusterRoleBinding"):
        yield from _subject_namespaces(state, index, ts, ref, obj)


def _missing_references(
    state: _State, index: int, ts: int, ref: ObjectRef, *, pod_spec: str, spec: Any
) -> Iterator[Finding]:
    namespace = ref.namespace or "default"
    missing: dict[tuple[Rule, str], tuple[list[str], list[str]]] = {}
    for r in references(spec):
        if (r.kind, r.name) in _IMPLICIT or (r.kind, namespace, r.name) in state.existing:
            continue
        missing_rule = _MISSING_RULE[(r.kind, r.path.startswith("/volumes/"))]
        paths, keys = missing.setdefault((missing_rule, r.name), ([], []))
        paths.append(pod_spec + r.path)
        keys.extend(r.keys)
    volumes = spec.get("volumes") if isinstance(spec, dict) else None
    for (missing_rule, name), (paths, keys) in missing.items():
        kind = _KIND_OF[missing_rule.code]
        message = f"{kind} {namespace}/{name} is not in the trace"
        key = (missing_rule.code, ref, tuple(paths), message)
        if key in state.reported:  # a repeat: merged into the first report, which has the fixes
            yield Finding(missing_rule, index, ts, ref, tuple(paths), message)
            continue
        state.reported.add(key)
        volume_names = [
            str(v.get("name"))
            for i, v in enumerate(volumes if isinstance(volumes, list) else [])
            if isinstance(v, dict) and any(p.startswith(f"{pod_spec}/volumes/{i}/") for p in paths)
        ]
        if kind == "ServiceAccount":
            options = (
                fixes.placeholder(kind, namespace, name, ()),
                fixes.drop_service_account(ref, pod_spec),
            )
        elif kind == "PersistentVolumeClaim":
            options = (
                fixes.pvc_to_empty_dir(ref, pod_spec, name),
                fixes.drop_volume_references(ref, pod_spec, kind, name, volume_names),
            )
        elif missing_rule in (VOLUME_SECRET_MISSING, VOLUME_CONFIGMAP_MISSING):
            options = (
                fixes.placeholder(kind, namespace, name, keys),
                fixes.drop_volume_references(ref, pod_spec, kind, name, volume_names),
            )
        else:
            options = (
                fixes.placeholder(kind, namespace, name, keys),
                fixes.drop_env_references(ref, pod_spec, kind, name),
            )
        yield Finding(missing_rule, index, ts, ref, tuple(paths), message, options)


def _pinned(index: int, ts: int, ref: ObjectRef, pod_spec: str, spec: Any) -> Iterator[Finding]:
    if not isinstance(spec, dict):
        return
    paths, nodes = [], []
    if isinstance(spec.get("nodeName"), str) and spec["nodeName"]:
        paths.append(f"{pod_spec}/nodeName")
        nodes.append(spec["nodeName"])
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and HOSTNAME_LABEL in selector:
        paths.append(f"{pod_spec}/nodeSelector/{escape(HOSTNAME_LABEL)}")
        nodes.append(str(selector[HOSTNAME_LABEL]))
    required = "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    for term in resolve(spec, f"{required}/nodeSelectorTerms/*"):
        requirements = [*resolve(term, "/matchFields/*"), *resolve(term, "/matchExpressions/*")]
        if any(
            isinstance(r, dict) and r.get("key") in ("metadata.name", HOSTNAME_LABEL) for r in requirements
        ):
            paths.append(pod_spec + required)
            nodes.append("(node affinity)")
            break
    if paths:
        message = f"pods are pinned to node(s) {', '.join(nodes)} of the recorded cluster"
        fix = fixes.remove_fields(ref, paths, "remove the node pinning")
        yield Finding(POD_PINNED_TO_NODE, index, ts, ref, tuple(paths), message, (fix,))


def _affinity_namespaces(
    state: _State, index: int, ts: int, ref: ObjectRef, *, pod_spec: str, spec: Any
) -> Iterator[Finding]:
    paths, outside = [], set()
    for affinity in ("podAffinity", "podAntiAffinity"):
        base = f"/affinity/{affinity}"
        for pattern in (
            f"{base}/requiredDuringSchedulingIgnoredDuringExecution/*/namespaces",
            f"{base}/preferredDuringSchedulingIgnoredDuringExecution/*/podAffinityTerm/namespaces",
        ):
            for pointer in concrete_pointers(spec, pattern):
                names = resolve(spec, pointer)[0]
                unknown = (
                    {n for n in names if isinstance(n, str)} - state.namespaces
                    if isinstance(names, list)
                    else set()
                )
                if unknown:
                    paths.append(pod_spec + pointer)
                    outside |= unknown
    if paths:
        message = f"affinity terms name namespace(s) {', '.join(sorted(outside))}, which are not in the trace"
        fix = fixes.remove_fields(
            ref, paths, "remove the namespaces lists (terms then match the pod's own namespace)"
        )
        yield Finding(NAMESPACE_OUTSIDE_TRACE, index, ts, ref, tuple(paths), message, (fix,))


def _subject_namespaces(
    state: _State, index: int, ts: int, ref: ObjectRef, obj: dict[str, Any]
) -> Iterator[Finding]:
    subjects = obj.get("subjects")
    outside = sorted(
        {
            str(s["namespace"])
            for s in (subjects if isinstance(subjects, list) else [])
            if isinstance(s, dict) and s.get("namespace") and s["namespace"] not in state.namespaces
        }
    )
    for namespace in outside:
        message = f"subjects in namespace {namespace}, which is not in the trace"
        fix = Fix(
            f"remove the subjects in namespace {namespace}",
            (
                {
                    "select": ref.selector(),
                    "at": "/subjects/*",
                    "where": {"/namespace": namespace},
                    "remove": [""],
                },
            ),
        )
        yield Finding(NAMESPACE_OUTSIDE_TRACE, index, ts, ref, ("/subjects",), message, (fix,))
