"""Sanitizing objects before they enter a trace, as SimKube's tracer does, plus kubetape's redaction.

:func:`sanitize` returns a new object (the input is never mutated) with:

* ``metadata``: ``creationTimestamp``, ``deletionTimestamp``, ``deletionGracePeriodSeconds``,
  ``generation``, ``managedFields``, ``resourceVersion``, ``uid`` removed; the annotations
  ``kubectl.kubernetes.io/last-applied-configuration`` and ``deployment.kubernetes.io/revision`` removed;
  ``annotations`` present (``{}`` if absent, as in SimKube's traces). ``ownerReferences`` are kept: owner
  chains need them.
* ``spec.nodeName`` removed from Pods (the simulated cluster schedules them anew).
* Secrets: ``data`` and ``stringData`` removed, always, whatever the config says.
* the config's redaction rules applied (remove, or mask every string leaf as ``"<redacted>"``; secrets
  on containers' command lines: :mod:`.secret_args`).

``status`` is kept, as SimKube does (the replayer strips it).
"""

from __future__ import annotations

from typing import Any

from pipeline.model.keys import GroupVersionKind
from pipeline.model.pointer import parents
from pipeline.model.secret_args import mask_secret_args
from pipeline.model.tracer_config import REDACTED, TracerConfig

METADATA_FIELDS_REMOVED = (
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "resourceVersion",
    "uid",
)
ANNOTATIONS_REMOVED = (
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
)
SECRET_FIELDS_REMOVED = ("data", "stringData")


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON-like value (dicts and lists copied, scalars shared)."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return REDACTED if isinstance(value, str) else value


def _redact(obj: dict[str, Any], gvk: GroupVersionKind, config: TracerConfig) -> None:
    for rule in config.redactions:
        if not rule.applies_to(gvk):
            continue
        for path in rule.paths:
            # reversed so that removing list items by index does not shift the ones still to visit
            for container, last in reversed(parents(obj, path)):
                if rule.action == "secret-flags":
                    if isinstance(container, dict):
                        container[last] = mask_secret_args(container[last])
                    continue
                if isinstance(container, dict):
                    if rule.action == "remove":
                        del container[last]
                    else:
                        container[last] = _mask(container[last])
                elif rule.action == "remove":
                    del container[int(last)]
                else:
                    container[int(last)] = _mask(container[int(last)])


def sanitize(
    obj: dict[str, Any],
    config: TracerConfig | None = None,
    *,
    api_version: str | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    """A sanitized copy of ``obj`` (see the module docstring).

    ``api_version``/``kind`` fill in the type of objects that lack it (list results omit TypeMeta).
    ``config`` supplies redaction rules; ``None`` applies only the built-in rules.
    """
    out: dict[str, Any] = copy_json(obj)
    if api_version is not None:
        out["apiVersion"] = api_version
    if kind is not None:
        out["kind"] = kind
    meta = out.get("metadata")
    if not isinstance(meta, dict):
        meta = out["metadata"] = {}
    for name in METADATA_FIELDS_REMOVED:
        meta.pop(name, None)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for name in ANNOTATIONS_REMOVED:
            annotations.pop(name, None)
    else:
        meta["annotations"] = {}
    api, knd = str(out.get("apiVersion", "")), str(out.get("kind", ""))
    if knd == "Pod" and api == "v1" and isinstance(out.get("spec"), dict):
        out["spec"].pop("nodeName", None)
    if knd == "Secret" and api == "v1":
        for name in SECRET_FIELDS_REMOVED:
            out.pop(name, None)
    if config is not None and config.redactions:
        _redact(out, GroupVersionKind.from_api_version(api, knd), config)
    return out


def deletion_stub(obj: dict[str, Any]) -> dict[str, Any]:
    """SimKube's deleted-object form: only ``apiVersion``, ``kind`` and ``metadata`` name/namespace."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    stub_meta = {k: meta[k] for k in ("name", "namespace") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": stub_meta}
