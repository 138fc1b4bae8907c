"""Rules for objects the apiserver refuses outright, so a replay never creates them or their pods.

These are shapes a live cluster never holds (its apiserver validated them), but hand-written or
edited traces do, such as SimKube's own validation fixture. Each rule names the field the apiserver
would complain about, so the finding reads like the 422 the replay would otherwise get.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.keys import group_of
from pipeline.model.selectors import parse_label_selector
from pipeline.validate import fixes
from pipeline.validate.findings import Finding, Fix, ObjectRef, Rule, Severity
from pipeline.validate.podspec import ENV_FROM_SOURCES

ENV_FROM_MULTIPLE_SOURCES = Rule(
    "KE0009",
    "env_from_multiple_sources",
    Severity.ERROR,
    "an envFrom entry names more than one source",
    "Each envFrom entry takes exactly one of configMapRef or secretRef; the apiserver rejects an entry "
    "naming both ('may not have more than one field specified at a time'), so the workload (or its "
    "pods) is never created. Fix: split the entry into one entry per source, keeping its prefix.",
)
SELECTOR_MISMATCH = Rule(
    "KE0010",
    "selector_mismatch",
    Severity.ERROR,
    "workload selector is missing or does not match its pod template labels",
    "Deployments, ReplicaSets, StatefulSets and DaemonSets need a non-empty spec.selector that matches "
    "spec.template.metadata.labels; the apiserver rejects them otherwise ('selector does not match "
    "template labels'), so the replay creates neither the workload nor its pods. Fix: add the labels "
    "the selector asks for to the pod template (or set the selector to the template labels when it is "
    "missing), or replace the selector by the template labels.",
)
CONTAINER_IMAGE_MISSING = Rule(
    "KE0011",
    "container_image_missing",
    Severity.ERROR,
    "container has no image",
    "The apiserver refuses a pod, or a workload whose pod template has a container without an image "
    "('spec.template.spec.containers[0].image: Required value'), so the replay creates neither the "
    "workload nor its pods. Fix: give the container a placeholder image "
    f"({fixes.PLACEHOLDER_IMAGE}; KWOK never pulls it).",
)

APISERVER_RULES = (ENV_FROM_MULTIPLE_SOURCES, SELECTOR_MISMATCH, CONTAINER_IMAGE_MISSING)

_SELECTOR_REQUIRED = {("apps", kind) for kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet")}
"""Kinds whose selector the apiserver requires and checks against ``/spec/template``."""
_IMAGE_REQUIRED_LISTS = ("initContainers", "containers")
"""Ephemeral containers are added to running pods, never part of a template."""


def check_pod_spec(index: int, ts: int, ref: ObjectRef, pod_spec: str, spec: Any) -> Iterator[Finding]:
    """KE0009 and KE0011 for one pod spec (``pod_spec`` is its pointer in the object)."""
    if not isinstance(spec, dict):
        return
    for list_name in _IMAGE_REQUIRED_LISTS:
        containers = spec.get(list_name)
        at = f"{pod_spec}/{list_name}"
        for ci, container in enumerate(containers if isinstance(containers, list) else []):
            if not isinstance(container, dict):
                continue
            name = str(container.get("name", ""))
            yield from _env_from_entries(index, ts, ref, at=at, ci=ci, container=container)
            image = container.get("image")
            if not (isinstance(image, str) and image.strip()):
                observed = image if isinstance(image, str) else None
                yield Finding(
                    CONTAINER_IMAGE_MISSING,
                    index,
                    ts,
                    ref,
                    (f"{at}/{ci}/image",),
                    f"container {name} has no image",
                    (fixes.placeholder_image(ref, at, name, observed),),
                )


def _env_from_entries(
    index: int, ts: int, ref: ObjectRef, *, at: str, ci: int, container: dict[str, Any]
) -> Iterator[Finding]:
    entries = container.get("envFrom")
    name = str(container.get("name", ""))
    for ei, entry in enumerate(entries if isinstance(entries, list) else []):
        sources = [field for field in ENV_FROM_SOURCES if isinstance(entry, dict) and field in entry]
        if len(sources) < 2:
            continue
        assert isinstance(entry, dict)  # sources is empty otherwise
        described = " and ".join(f"{field} {_source_name(entry[field])}" for field in sources)
        yield Finding(
            ENV_FROM_MULTIPLE_SOURCES,
            index,
            ts,
            ref,
            tuple(f"{at}/{ci}/envFrom/{ei}/{field}" for field in sources),
            f"envFrom entry {ei} of container {name} names {described}",
            (fixes.split_env_from(ref, at, name, entry),),
        )


def _source_name(source: Any) -> str:
    return str(source.get("name", "?")) if isinstance(source, dict) else "?"


def check_selector(index: int, ts: int, ref: ObjectRef, obj: dict[str, Any]) -> Iterator[Finding]:
    """KE0010 for the workload kinds whose selector the apiserver checks."""
    if (group_of(ref.api_version), ref.kind) not in _SELECTOR_REQUIRED:
        return
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    template = spec.get("template")
    template_meta = template.get("metadata") if isinstance(template, dict) else None
    raw_labels = template_meta.get("labels") if isinstance(template_meta, dict) else None
    labels = {str(k): str(v) for k, v in raw_labels.items()} if isinstance(raw_labels, dict) else {}
    selector = spec.get("selector")
    found = _selector_problem(ref, selector, labels)
    if found is not None:
        problem, options = found
        paths = ("/spec/selector", "/spec/template/metadata/labels")
        yield Finding(SELECTOR_MISMATCH, index, ts, ref, paths, problem, options)


def _selector_problem(
    ref: ObjectRef, selector: Any, labels: dict[str, str]
) -> tuple[str, tuple[Fix, ...]] | None:
    """What is wrong with the selector (None if nothing) and the repairs, recommended first."""
    # Selecting the template's own labels (or, without any, an app=<name> label given to it too).
    own = labels or {"app": ref.name}
    select_own = fixes.align_selector(ref, selector, {} if labels else own, own)
    if selector is None or selector == {}:
        return "spec.selector is missing (the apiserver requires one)", (select_own,)
    try:
        parsed = parse_label_selector(selector, "spec.selector")
    except ConfigError as exc:
        return f"{exc}", (select_own,)
    if parsed.matches(labels):
        return None
    wanted = dict(parsed.match_labels)
    problem = f"spec.selector does not match the pod template labels {_text(labels)}"
    if all(r.matches({**labels, **wanted}) for r in parsed.match_expressions):
        return problem, (fixes.align_selector(ref, selector, wanted, None), select_own)
    return f"{problem} (its matchExpressions exclude them)", (select_own,)


def _text(labels: dict[str, str]) -> str:
    return "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"
