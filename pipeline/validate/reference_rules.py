"""Rules for references to objects that *are* in the trace but do not hold what pods read from them,
and for image pull Secrets that are not in the trace.

A ConfigMap's keys are its ``data`` and ``binaryData`` keys. A Secret's keys are only known when the
trace carries its ``data``/``stringData``: kubetape's watcher never records Secret data, so for its
traces a Secret's keys are unknown and never reported missing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pipeline.validate import fixes
from pipeline.validate.findings import Finding, ObjectRef, Rule, Severity
from pipeline.validate.podspec import references

ObjectId = tuple[str, str, str]
"""(kind, namespace, name) of a core object."""

CONFIGMAP_KEY_MISSING = Rule(
    "KE0012",
    "configmap_key_missing",
    Severity.ERROR,
    "pod template reads a key its ConfigMap does not hold",
    "A configMapKeyRef, or a configMap volume's items, name a key the ConfigMap (which is in the trace) "
    "does not have in data or binaryData. Pods then fail with CreateContainerConfigError or a failed "
    "volume mount, unless the reference is optional. Fix: add placeholder values for the keys to the "
    "ConfigMap, or mark the references optional.",
)
SECRET_KEY_MISSING = Rule(
    "KE0013",
    "secret_key_missing",
    Severity.ERROR,
    "pod template reads a key its Secret does not hold",
    "A secretKeyRef, or a secret volume's items, name a key the Secret (which is in the trace, with its "
    "data) does not have. Pods then fail with CreateContainerConfigError or a failed volume mount, "
    "unless the reference is optional. Secrets recorded by kubetape carry no data, so their keys are "
    "unknown and this rule stays silent for them. Fix: add placeholder values for the keys to the "
    "Secret, or mark the references optional.",
)
IMAGE_PULL_SECRET_MISSING = Rule(
    "KW0014",
    "image_pull_secret_missing",
    Severity.WARNING,
    "pod template names an image pull Secret the trace does not contain",
    "The kubelet pulls without a missing imagePullSecrets entry (event FailedToRetrieveImagePullSecret), "
    "so a private image then fails with ImagePullBackOff in a real cluster; KWOK pulls nothing, so a "
    "simulated replay is unaffected. Fix: synthesize a placeholder pull Secret without credentials, or "
    "remove the entry.",
)

REFERENCE_RULES = (CONFIGMAP_KEY_MISSING, SECRET_KEY_MISSING, IMAGE_PULL_SECRET_MISSING)
_KEY_RULE = {"ConfigMap": CONFIGMAP_KEY_MISSING, "Secret": SECRET_KEY_MISSING}


def data_keys(obj: Mapping[str, Any]) -> frozenset[str] | None:
    """The keys a ConfigMap or Secret holds; None when unknown (a Secret recorded without its data)."""
    fields = ("data", "binaryData") if obj.get("kind") == "ConfigMap" else ("data", "stringData")
    maps = [obj[f] for f in fields if isinstance(obj.get(f), dict)]
    if not maps and obj.get("kind") == "Secret":
        return None
    return frozenset(str(key) for m in maps for key in m)


def check_keys(
    index: int,
    ts: int,
    ref: ObjectRef,
    *,
    pod_spec: str,
    spec: Any,
    known_keys: Mapping[ObjectId, frozenset[str] | None],
) -> Iterator[Finding]:
    """KE0012/KE0013: keys read from ConfigMaps/Secrets of the trace that they do not hold.

    ``known_keys`` holds the objects that exist at this event (absent ones are E0002–E0005's business).
    """
    namespace = ref.namespace or "default"
    missing: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for r in references(spec):
        held = known_keys.get((r.kind, namespace, r.name))
        if r.kind not in _KEY_RULE or held is None:
            continue
        for key, path in zip(r.keys, r.key_paths, strict=True):
            if key not in held:
                paths, keys = missing.setdefault((r.kind, r.name), ([], []))
                paths.append(pod_spec + path)
                keys.append(key)
    for (kind, name), (paths, keys) in missing.items():
        target = ObjectRef("v1", kind, namespace, name)
        unique = sorted(set(keys))
        yield Finding(
            _KEY_RULE[kind],
            index,
            ts,
            ref,
            tuple(paths),
            f"{kind} {namespace}/{name} has no key {', '.join(unique)}",
            (
                fixes.add_missing_keys(target, unique),
                fixes.mark_key_references_optional(ref, pod_spec, kind, name),
            ),
        )


def check_image_pull_secrets(
    index: int, ts: int, ref: ObjectRef, *, pod_spec: str, spec: Any, existing: set[ObjectId]
) -> Iterator[Finding]:
    """W0014: imagePullSecrets entries naming Secrets that do not exist at this event."""
    entries = spec.get("imagePullSecrets") if isinstance(spec, dict) else None
    namespace = ref.namespace or "default"
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or ("Secret", namespace, name) in existing:
            continue
        yield Finding(
            IMAGE_PULL_SECRET_MISSING,
            index,
            ts,
            ref,
            (f"{pod_spec}/imagePullSecrets/{i}/name",),
            f"image pull Secret {namespace}/{name} is not in the trace",
            (
                fixes.placeholder_pull_secret(namespace, name),
                fixes.drop_image_pull_secret(ref, pod_spec, name),
            ),
        )
