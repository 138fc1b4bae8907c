"""Where pod specs live inside trace objects, and what other objects a pod spec needs by name.

References are read by resource *name* (``configMapKeyRef.name``, ``secretRef.name``, ...); the ``key``
of a ``configMapKeyRef``/``secretKeyRef`` is a key inside that object, collected so a placeholder can
carry it. (SimKube's validator looks the key up as if it were the object's name.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.keys import GroupVersionKind
from pipeline.model.pointer import parse_pointer
from pipeline.model.tracer_config import KNOWN_POD_SPEC_TEMPLATE_PATHS, TracerConfig

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
ENV_FROM_SOURCES = ("configMapRef", "secretRef")
"""The sources an envFrom entry can name; the apiserver accepts exactly one per entry."""


@dataclass(frozen=True, slots=True)
class Reference:
    """A pod spec needs the object ``kind``/``name`` (in the pod's namespace) at ``path``.

    ``path`` is relative to the pod spec; ``keys`` are the data keys the pod reads from it, each named
    at the pointer of the same position in ``key_paths`` (also relative to the pod spec).
    """

    kind: str
    name: str
    path: str
    keys: tuple[str, ...] = ()
    key_paths: tuple[str, ...] = ()


def escape(segment: str) -> str:
    """One JSON pointer segment, escaped (RFC 6901)."""
    return segment.replace("~", "~0").replace("/", "~1")


def concrete_pointers(doc: Any, pointer: str) -> list[str]:
    """The concrete pointers (``*`` expanded to indices) that ``pointer`` reaches in ``doc``."""
    found = [("", doc)]
    for segment in parse_pointer(pointer):
        nxt: list[tuple[str, Any]] = []
        for prefix, node in found:
            if isinstance(node, dict) and segment in node:
                nxt.append((f"{prefix}/{escape(segment)}", node[segment]))
            elif isinstance(node, list) and segment == "*":
                nxt.extend((f"{prefix}/{i}", item) for i, item in enumerate(node))
            elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
                nxt.append((f"{prefix}/{segment}", node[int(segment)]))
        found = nxt
    return [prefix for prefix, _node in found]


class PodSpecLocator:
    """Finds the pod specs inside objects, using the trace's podSpecTemplatePaths (or SimKube's defaults)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._paths: dict[tuple[str, str], tuple[str, ...]] = {
            (gvk.group, gvk.kind): paths for gvk, paths in KNOWN_POD_SPEC_TEMPLATE_PATHS.items()
        }
        try:
            parsed = TracerConfig.from_mapping(config, "trace config")
        except (ConfigError, FormatError):
            return  # a trace whose config SimKube would refuse is still worth validating
        for tracked in parsed.tracked:
            self._paths[(tracked.gvk.group, tracked.gvk.kind)] = tracked.pod_spec_template_paths

    def pod_spec_pointers(self, obj: dict[str, Any]) -> list[str]:
        """Concrete pointers to every pod spec (``.../spec`` of each template) in ``obj``."""
        try:
            gvk = GroupVersionKind.from_api_version(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        except FormatError:
            return []
        paths = self._paths.get((gvk.group, gvk.kind), ())
        found: list[str] = []
        for path in paths:
            for template in concrete_pointers(obj, path):
                found.extend(p for p in concrete_pointers(obj, f"{template}/spec") if p not in found)
        return found


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _optional(ref: Any) -> bool:
    return isinstance(ref, dict) and ref.get("optional") is True


def _item_keys(source: dict[str, Any], at: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``keys`` and ``key_paths`` of a Reference: the keys a volume's ``items`` project."""
    items = source.get("items")
    found = [
        (key, f"{at}/items/{i}/key")
        for i, item in _entries(items)
        if isinstance(item, dict) and (key := _str(item.get("key")))
    ]
    return tuple(k for k, _ in found), tuple(p for _, p in found)


def references(pod_spec: Any) -> Iterator[Reference]:
    """Every non-optional ServiceAccount, ConfigMap, Secret and PVC reference of ``pod_spec``."""
    if not isinstance(pod_spec, dict):
        return
    for field in ("serviceAccountName", "serviceAccount"):
        if name := _str(pod_spec.get(field)):
            yield Reference("ServiceAccount", name, f"/{field}")
    for list_name in CONTAINER_LISTS:
        containers = pod_spec.get(list_name)
        for ci, container in _entries(containers):
            if isinstance(container, dict):
                yield from _container_references(container, f"/{list_name}/{ci}")
    volumes = pod_spec.get("volumes")
    for vi, volume in _entries(volumes):
        if isinstance(volume, dict):
            yield from _volume_references(volume, f"/volumes/{vi}")


def _container_references(container: dict[str, Any], at: str) -> Iterator[Reference]:
    env = container.get("env")
    value_froms = ((ei, var.get("valueFrom") if isinstance(var, dict) else None) for ei, var in _entries(env))
    for ei, field, kind, name, ref in _named_refs(
        value_froms, (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret"))
    ):
        key = _str(ref.get("key"))
        ref_at = f"{at}/env/{ei}/valueFrom/{field}"
        keys, key_paths = ((key,), (f"{ref_at}/key",)) if key else ((), ())
        yield Reference(kind, name, f"{ref_at}/name", keys, key_paths)
    env_from = _entries(container.get("envFrom"))
    for ei, field, kind, name, _ in _named_refs(
        env_from, (("configMapRef", "ConfigMap"), ("secretRef", "Secret"))
    ):
        yield Reference(kind, name, f"{at}/envFrom/{ei}/{field}/name")


def _entries(value: Any) -> Iterator[tuple[int, Any]]:
    """(index, entry) of a list field; nothing when the field is absent or not a list."""
    return enumerate(value if isinstance(value, list) else [])


def _named_refs(
    holders: Iterator[tuple[int, Any]], fields: tuple[tuple[str, str], ...]
) -> Iterator[tuple[int, str, str, str, dict[str, Any]]]:
    """(index, field, kind, name, reference) of each required reference that names an object, held in
    one of ``fields`` (field, kind of object) of the dict holders."""
    for index, holder in holders:
        if not isinstance(holder, dict):
            continue
        for field, kind in fields:
            ref = holder.get(field)
            if isinstance(ref, dict) and not _optional(ref) and (name := _str(ref.get("name"))):
                yield index, field, kind, name, ref


def _volume_references(volume: dict[str, Any], at: str) -> Iterator[Reference]:
    cm = volume.get("configMap")
    if isinstance(cm, dict) and not _optional(cm) and (name := _str(cm.get("name"))):
        yield Reference("ConfigMap", name, f"{at}/configMap/name", *_item_keys(cm, f"{at}/configMap"))
    secret = volume.get("secret")
    if isinstance(secret, dict) and not _optional(secret) and (name := _str(secret.get("secretName"))):
        yield Reference("Secret", name, f"{at}/secret/secretName", *_item_keys(secret, f"{at}/secret"))
    pvc = volume.get("persistentVolumeClaim")
    if isinstance(pvc, dict) and (name := _str(pvc.get("claimName"))):
        yield Reference("PersistentVolumeClaim", name, f"{at}/persistentVolumeClaim/claimName")
    projected = volume.get("projected")
    sources = projected.get("sources") if isinstance(projected, dict) else None
    for si, field, kind, name, ref in _named_refs(
        _entries(sources), (("configMap", "ConfigMap"), ("secret", "Secret"))
    ):
        source_at = f"{at}/projected/sources/{si}/{field}"
        yield Reference(kind, name, f"{source_at}/name", *_item_keys(ref, source_at))
