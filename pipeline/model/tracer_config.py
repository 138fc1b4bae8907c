"""The tracer config: which kinds to record and how, SimKube-compatible plus kubetape's filters.

A SimKube tracer config file loads unchanged (``trackedObjects`` keyed ``group/version.Kind`` with
``podSpecTemplatePaths`` — ``*`` matching every array element —, the deprecated singular
``podSpecTemplatePath``, ``trackLifecycle``, ``skipOwned``), with SimKube's normalization: known kinds
get their built-in template paths and reject different ones. Unlike SimKube ≥ 2, a kind that is not
known and gives no path is accepted as a kind without pod templates (ConfigMaps, ServiceAccounts).

kubetape's additions are top-level keys (SimKube ignores unknown top-level keys)::

    namespaces: {allow: ["team-*"], deny: ["kube-system"]}   # shell-style patterns
    labels: {allow: [<LabelSelector>], deny: [<LabelSelector>]}
    excludeDaemonSetOwned: true     # default true, as SimKube's export does
    redact:                          # applied by pipeline.model.sanitize
      - kinds: ["v1.ConfigMap"]     # GVK strings; omitted or "*" = every kind
        paths: ["/data"]            # JSON pointers, "*" for every array element
        action: remove              # or "mask": string leaves become "<redacted>"
    redactEnv: true                  # the default; false keeps container env values in traces
    redactArgs: true                 # the default; false keeps secret-looking flag values of args

Secrets' ``data``/``stringData`` are always dropped, whatever the config says. Container env values
are masked by default: for every tracked kind, under each of its pod template paths, the ``value`` of
every env entry of ``containers``, ``initContainers`` and ``ephemeralContainers`` becomes
``"<redacted>"`` (names, ``valueFrom`` references and the shape stay, so replays still apply). These
rules are derived from the template paths, so a custom resource's templates are covered too; they are
not written back by :meth:`TracerConfig.to_mapping` (``redactEnv`` is). Likewise ``redactArgs`` masks,
in containers' ``args`` and ``command``, the secrets a command line carries (``--password=x``,
``--api-key x``, ``PASSWORD=x``, ``https://u:x@host``, the same inside ``sh -c`` scripts; the rule is
:mod:`.secret_args`, docs/redaction.md): a secret passed on a command line must not reach a trace
either. A bad config raises :class:`~pipeline.model.errors.ConfigError` at load, naming the source
and the offending path (the checks are :mod:`.tracer_config_parse`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.keys import GroupVersionKind, group_of
from pipeline.model.pointer import resolve
from pipeline.model.selectors import LabelSelector

KNOWN_POD_SPEC_TEMPLATE_PATHS: Mapping[GroupVersionKind, tuple[str, ...]] = {
    GroupVersionKind("batch", "v1", "CronJob"): ("/spec/jobTemplate/spec/template",),
    GroupVersionKind("apps", "v1", "DaemonSet"): ("/spec/template",),
    GroupVersionKind("apps", "v1", "Deployment"): ("/spec/template",),
    GroupVersionKind("batch", "v1", "Job"): ("/spec/template",),
    GroupVersionKind("apps", "v1", "ReplicaSet"): ("/spec",),
    GroupVersionKind("apps", "v1", "StatefulSet"): ("/spec/template",),
    GroupVersionKind("", "v1", "Pod"): ("",),
}
"""SimKube's built-in pod template paths (``sk-core/src/constants.rs``)."""

BUILT_IN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "autoscaling",
        "policy",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)
"""Kubernetes' own API groups: their controllers run in every simulated cluster. Not a ``.k8s.io``
suffix rule: custom groups use it too (Spark's operator is ``sparkoperator.k8s.io``)."""

REDACTED = "<redacted>"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
"""Every list of containers in a PodSpec: each may carry env values."""


@dataclass(frozen=True, slots=True)
class TrackedKind:
    """How one kind is recorded."""

    gvk: GroupVersionKind
    pod_spec_template_paths: tuple[str, ...] = ()
    track_lifecycle: bool = False
    skip_owned: bool = False


@dataclass(frozen=True, slots=True)
class RedactionRule:
    """Remove or mask the values at ``paths`` in objects of ``kinds`` (empty = every kind)."""

    paths: tuple[str, ...]
    kinds: tuple[GroupVersionKind, ...] = ()
    action: str = "remove"
    derived: bool = False
    """A rule the config implies (``redactEnv``), not one it lists: never written back."""

    def applies_to(self, gvk: GroupVersionKind) -> bool:
        """Whether this rule covers objects of ``gvk``."""
        return not self.kinds or gvk in self.kinds


@dataclass(frozen=True, slots=True)
class TracerConfig:
    """The validated, normalized tracer config (from :meth:`from_mapping` or :func:`load_tracer_config`)."""

    tracked: tuple[TrackedKind, ...] = ()
    namespace_allow: tuple[str, ...] = ()
    namespace_deny: tuple[str, ...] = ()
    label_allow: tuple[LabelSelector, ...] = ()
    label_deny: tuple[LabelSelector, ...] = ()
    exclude_daemonset_owned: bool = True
    redactions: tuple[RedactionRule, ...] = ()
    """The rules applied: the configured ones, then the env rules ``redact_env`` implies."""
    redact_env: bool = True
    redact_args: bool = True
    source: str = field(default="<built-in>", compare=False)

    def __post_init__(self) -> None:
        # derived here, not in the parser, so that every way of building a config (defaults, segments,
        # tests, dataclasses.replace) masks env values unless it says otherwise
        configured = tuple(r for r in self.redactions if not r.derived)
        derived = env_redactions(self.tracked) if self.redact_env else ()
        derived += args_redactions(self.tracked) if self.redact_args else ()
        object.__setattr__(self, "redactions", configured + derived)

    @classmethod
    def default(cls) -> TracerConfig:
        """Workload controllers with their built-in template paths; lifecycles of Jobs and CronJobs; the
        HorizontalPodAutoscalers (``autoscaling/v2``) that scale them, so a replay can let them decide."""
        kinds = [
            ("apps", "v1", "Deployment", False),
            ("apps", "v1", "StatefulSet", False),
            ("batch", "v1", "Job", True),
            ("batch", "v1", "CronJob", True),
            ("autoscaling", "v2", "HorizontalPodAutoscaler", False),
        ]
        tracked = tuple(
            TrackedKind(gvk, KNOWN_POD_SPEC_TEMPLATE_PATHS.get(gvk, ()), track_lifecycle=lifecycle)
            for group, version, kind, lifecycle in kinds
            for gvk in [GroupVersionKind(group, version, kind)]
        )
        return cls(tracked=tracked)

    @classmethod
    def from_mapping(cls, data: Any, source: str) -> TracerConfig:
        """Validate and normalize a parsed config; ``source`` (a file name) prefixes every error."""
        # imported here, not at the top: the parser builds TracerConfig objects, so it imports this module
        from pipeline.model.tracer_config_parse import _parse_config

        return _parse_config(data, source)

    # ---- lookups -----------------------------------------------------------------------------
    def tracked_kind(self, gvk: GroupVersionKind) -> TrackedKind | None:
        """The entry for ``gvk``, or None if the kind is not tracked."""
        for entry in self.tracked:
            if entry.gvk == gvk:
                return entry
        return None

    def tracked_kind_for(self, api_version: str, kind: str) -> TrackedKind | None:
        """The entry for an object's ``apiVersion``/``kind``, or None."""
        return self.tracked_kind(GroupVersionKind.from_api_version(api_version, kind))

    def version_of(self, group: str, kind: str) -> str | None:
        """The tracked version of ``group``/``kind`` (to rebuild a GVK from an object key), or None."""
        for entry in self.tracked:
            if entry.gvk.group == group and entry.gvk.kind == kind:
                return entry.gvk.version
        return None

    def track_lifecycle_for(self, gvk: GroupVersionKind) -> bool:
        """Whether pods owned by ``gvk`` objects get their lifecycles recorded."""
        entry = self.tracked_kind(gvk)
        return entry is not None and entry.track_lifecycle

    def skip_owned_for(self, gvk: GroupVersionKind) -> bool:
        """Whether ``gvk`` objects with any ownerReference are ignored."""
        entry = self.tracked_kind(gvk)
        return entry is not None and entry.skip_owned

    def recreates_dependents(self, group: str, kind: str) -> bool:
        """Whether an owner of this kind makes its dependents (pods, ReplicaSets, Jobs…) again in a
        simulated cluster, so a recording need not replay them: Kubernetes' own kinds, whose controllers
        run there, and kinds tracked with pod template paths (their operator is expected there, as in
        SimKube). Not a custom resource without pod templates (a SparkApplication: no operator makes its
        pods in the simulation), nor a Pod (Spark's driver pod owns its executors)."""
        if group == "" and kind == "Pod":
            return False
        if group in BUILT_IN_GROUPS:
            return True
        return any(
            t.gvk.group == group and t.gvk.kind == kind and t.pod_spec_template_paths for t in self.tracked
        )

    def pod_templates(self, obj: Mapping[str, Any]) -> list[Any]:
        """The pod templates inside ``obj`` found through its kind's ``podSpecTemplatePaths``."""
        entry = self.tracked_kind_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if entry is None:
            return []
        return [tpl for path in entry.pod_spec_template_paths for tpl in resolve(obj, path)]

    # ---- filters -----------------------------------------------------------------------------
    def is_namespace_allowed(self, namespace: str | None) -> bool:
        """Namespace allow/deny lists; cluster-scoped objects (``None``) are always allowed."""
        if not namespace:
            return True
        if self.namespace_allow and not any(fnmatch.fnmatchcase(namespace, p) for p in self.namespace_allow):
            return False
        return not any(fnmatch.fnmatchcase(namespace, p) for p in self.namespace_deny)

    def is_labels_allowed(self, labels: Mapping[str, str]) -> bool:
        """Label allow (any selector matches, if there are any) and deny (no selector matches) lists."""
        if self.label_allow and not any(sel.matches(labels) for sel in self.label_allow):
            return False
        return not any(sel.matches(labels) for sel in self.label_deny)

    def is_object_allowed(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` passes the namespace, label, DaemonSet-owned and ``skipOwned`` filters.

        ``skipOwned`` leaves out the objects an owner will make again on replay (see
        :meth:`recreates_dependents`); SimKube leaves out every owned object, which loses the pods of
        custom resources without pod templates and of operators, since nothing makes them in a simulation."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        if not self.is_namespace_allowed(meta.get("namespace")):
            return False
        labels = meta.get("labels")
        if not self.is_labels_allowed(labels if isinstance(labels, Mapping) else {}):
            return False
        owners = meta.get("ownerReferences") or []
        if self.exclude_daemonset_owned and any(
            isinstance(o, Mapping) and o.get("kind") == "DaemonSet" for o in owners
        ):
            return False
        gvk = GroupVersionKind.from_api_version(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if not owners or not self.skip_owned_for(gvk):
            return True
        return not any(
            isinstance(o, Mapping)
            and self.recreates_dependents(group_of(str(o.get("apiVersion", ""))), str(o.get("kind")))
            for o in owners
        )

    # ---- serialization -------------------------------------------------------------------------
    def to_simkube_mapping(self) -> dict[str, Any]:
        """SimKube's form (``trackedObjects`` only), as stored in a v2 trace. Kinds without template
        paths are left out: SimKube ≥ 2 refuses them when it normalizes the config."""
        tracked: dict[str, Any] = {}
        for entry in self.tracked:
            if not entry.pod_spec_template_paths:
                continue
            item: dict[str, Any] = {"podSpecTemplatePaths": list(entry.pod_spec_template_paths)}
            if entry.track_lifecycle:
                item["trackLifecycle"] = True
            if entry.skip_owned:
                item["skipOwned"] = True
            tracked[entry.gvk.format()] = item
        return {"trackedObjects": tracked}

    def to_mapping(self) -> dict[str, Any]:
        """The full form, accepted back by :meth:`from_mapping` (used in kubetape segments)."""
        tracked: dict[str, Any] = {}
        for entry in self.tracked:
            item: dict[str, Any] = {}
            if entry.pod_spec_template_paths:
                item["podSpecTemplatePaths"] = list(entry.pod_spec_template_paths)
            if entry.track_lifecycle:
                item["trackLifecycle"] = True
            if entry.skip_owned:
                item["skipOwned"] = True
            tracked[entry.gvk.format()] = item
        out: dict[str, Any] = {"trackedObjects": tracked}
        if self.namespace_allow or self.namespace_deny:
            out["namespaces"] = {"allow": list(self.namespace_allow), "deny": list(self.namespace_deny)}
        if self.label_allow or self.label_deny:
            out["labels"] = {
                "allow": [s.to_mapping() for s in self.label_allow],
                "deny": [s.to_mapping() for s in self.label_deny],
            }
        if not self.exclude_daemonset_owned:
            out["excludeDaemonSetOwned"] = False
        configured = [r for r in self.redactions if not r.derived]
        if configured:
            out["redact"] = [
                {"paths": list(r.paths), "kinds": [k.format() for k in r.kinds], "action": r.action}
                for r in configured
            ]
        if not self.redact_env:
            out["redactEnv"] = False
        if not self.redact_args:
            out["redactArgs"] = False
        return out


def _template_specs(entry: TrackedKind) -> list[str]:
    specs = []
    for template in entry.pod_spec_template_paths:
        if template == "":  # a Pod: the object is its own template
            specs.append("/spec")
            continue
        specs.append(f"{template}/spec")
        if not template.endswith("/template"):
            # SimKube's ReplicaSet path is "/spec" (the ReplicaSetSpec, not its template): cover the
            # template under it as well, so no value depends on which convention a path follows
            specs.append(f"{template}/template/spec")
    return specs


def args_redactions(tracked: tuple[TrackedKind, ...]) -> tuple[RedactionRule, ...]:
    """Rules masking secret-looking flag values in the args and command of every container list."""
    rules = []
    for entry in tracked:
        paths = tuple(
            f"{spec}/{lst}/*/{field_}"
            for spec in _template_specs(entry)
            for lst in CONTAINER_LISTS
            for field_ in ("args", "command")
        )
        if paths:
            rules.append(RedactionRule(paths=paths, kinds=(entry.gvk,), action="secret-flags", derived=True))
    return tuple(rules)


def env_redactions(tracked: tuple[TrackedKind, ...]) -> tuple[RedactionRule, ...]:
    """Mask rules for the env values of every container list under each tracked kind's pod templates."""
    rules = []
    for entry in tracked:
        paths = tuple(
            f"{spec}/{lst}/*/env/*/value" for spec in _template_specs(entry) for lst in CONTAINER_LISTS
        )
        if paths:
            rules.append(RedactionRule(paths=paths, kinds=(entry.gvk,), action="mask", derived=True))
    return tuple(rules)


def load_tracer_config(path: str | Path) -> TracerConfig:
    """Read a YAML (or JSON) tracer config file; raises ConfigError naming the file and the problem."""
    import yaml  # lazy: only this loader needs PyYAML, the model layer stays pure

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"tracer config {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"tracer config {path}: not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise ConfigError(f"tracer config {path}: invalid YAML{where}: {problem}") from None
    return TracerConfig.from_mapping(data, str(path))


__all__ = [
    "BUILT_IN_GROUPS",
    "KNOWN_POD_SPEC_TEMPLATE_PATHS",
    "REDACTED",
    "RedactionRule",
    "TracerConfig",
    "TrackedKind",
    "args_redactions",
    "env_redactions",
    "load_tracer_config",
]
