"""Repairs offered for findings, as transform operations, and the fix file ``validate --fix`` writes.

Every repair selects the object by apiVersion/kind/namespace/name, so it applies to every version of the
object in the trace, and matches list elements by content (``where``), not by index, so it stays right
when an object's lists change between versions.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

from pipeline.model.sanitize import copy_json
from pipeline.validate.comments import one_line
from pipeline.validate.findings import Finding, Fix, ObjectRef
from pipeline.validate.podspec import CONTAINER_LISTS, ENV_FROM_SOURCES, escape
from pipeline.validate.transform import TRANSFORM_VERSION

PLACEHOLDER_ANNOTATION = "kubetape.dev/placeholder"
"""Set on objects a fix synthesizes, so they are easy to find (and to drop) later."""
PLACEHOLDER_VALUE = "placeholder"
PLACEHOLDER_IMAGE = "registry.k8s.io/pause:3.10"
"""The image a repair gives containers that have none (KWOK never pulls it; a real cluster can)."""

DOCKER_CONFIG_KEY = ".dockerconfigjson"
"""The key a ``kubernetes.io/dockerconfigjson`` Secret must hold (the apiserver checks it)."""

_PLACEHOLDER_API_VERSION = {"ServiceAccount": "v1", "ConfigMap": "v1", "Secret": "v1"}


def remove_fields(obj: ObjectRef, paths: Iterable[str], summary: str) -> Fix:
    """Strip fields (``paths`` are absolute pointers in the object)."""
    return Fix(summary, ({"select": obj.selector(), "remove": sorted(set(paths))},))


def drop_object(obj: ObjectRef) -> Fix:
    """Drop the object from the whole trace."""
    return Fix(f"drop {obj.describe()} from the trace", ({"select": obj.selector(), "drop": True},))


def placeholder(kind: str, namespace: str, name: str, keys: Sequence[str]) -> Fix:
    """Synthesize an empty ``kind`` at the start of the trace, holding the ``keys`` pods read from it."""
    obj: dict[str, Any] = {
        "apiVersion": _PLACEHOLDER_API_VERSION[kind],
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {PLACEHOLDER_ANNOTATION: "true"},
        },
    }
    unique_keys = sorted(set(keys))
    if kind == "ConfigMap":
        obj["data"] = dict.fromkeys(unique_keys, PLACEHOLDER_VALUE)
    elif kind == "Secret":
        encoded = base64.b64encode(PLACEHOLDER_VALUE.encode()).decode()
        obj["type"] = "Opaque"
        obj["data"] = dict.fromkeys(unique_keys, encoded)
    return Fix(f"synthesize a placeholder {kind} {namespace}/{name}", ({"create": obj},))


def drop_service_account(obj: ObjectRef, pod_spec: str) -> Fix:
    """Let pods run as the namespace's default ServiceAccount."""
    paths = [f"{pod_spec}/serviceAccountName", f"{pod_spec}/serviceAccount"]
    return remove_fields(obj, paths, "remove serviceAccountName/serviceAccount (use the default account)")


def _reference_fields(kind: str) -> tuple[str, str, str, str]:
    """(volume field, its name field, env key reference, envFrom reference) for ConfigMaps or Secrets."""
    if kind == "ConfigMap":
        return "configMap", "name", "configMapKeyRef", "configMapRef"
    return "secret", "secretName", "secretKeyRef", "secretRef"


def drop_env_references(obj: ObjectRef, pod_spec: str, kind: str, name: str) -> Fix:
    """Remove the env and envFrom entries of every container that read ConfigMap/Secret ``name``."""
    select = obj.selector()
    _field, _name_field, key_ref, env_ref = _reference_fields(kind)
    ops: list[dict[str, Any]] = []
    for containers in CONTAINER_LISTS:
        at = f"{pod_spec}/{containers}/*"
        ops.append(_remove_where(select, f"{at}/env/*", {f"/valueFrom/{key_ref}/name": name}))
        ops.append(_remove_where(select, f"{at}/envFrom/*", {f"/{env_ref}/name": name}))
    return Fix(f"remove the env entries reading {kind} {name}", tuple(ops))


def drop_volume_references(
    obj: ObjectRef, pod_spec: str, kind: str, name: str, volume_names: Iterable[str]
) -> Fix:
    """Remove the volumes (and projected sources) using ConfigMap/Secret/PVC ``name``, with the mounts
    of those volumes."""
    select = obj.selector()
    ops: list[dict[str, Any]] = []
    if kind == "PersistentVolumeClaim":
        volume_where = {"/persistentVolumeClaim/claimName": name}
    else:
        field, name_field, _key_ref, _env_ref = _reference_fields(kind)
        volume_where = {f"/{field}/{name_field}": name}
        ops.append(
            _remove_where(select, f"{pod_spec}/volumes/*/projected/sources/*", {f"/{field}/name": name})
        )
    # Mounts name volumes, not objects: remove the mounts of the volumes that use the object.
    for volume in sorted(set(volume_names)):
        for containers in CONTAINER_LISTS:
            ops.append(_remove_where(select, f"{pod_spec}/{containers}/*/volumeMounts/*", {"/name": volume}))
    ops.append(_remove_where(select, f"{pod_spec}/volumes/*", volume_where))
    return Fix(f"remove the volumes using {kind} {name} and their mounts", tuple(ops))


def pvc_to_empty_dir(obj: ObjectRef, pod_spec: str, name: str) -> Fix:
    """Keep the volume but back it with an emptyDir instead of the missing claim."""
    op = {
        "select": obj.selector(),
        "at": f"{pod_spec}/volumes/*",
        "where": {"/persistentVolumeClaim/claimName": name},
        "remove": ["/persistentVolumeClaim"],
        "add": {"/emptyDir": {}},
    }
    return Fix(f"back the volumes using claim {name} with an emptyDir", (op,))


def _remove_where(select: dict[str, str], at: str, where: dict[str, Any]) -> dict[str, Any]:
    return {"select": select, "at": at, "where": where, "remove": [""]}


def split_env_from(obj: ObjectRef, containers: str, container: str, entry: dict[str, Any]) -> Fix:
    """Turn one envFrom entry with several sources into one entry per source (same prefix).

    ``containers`` points at the container list. The first source stays in place; the others are
    appended to the container's envFrom (order only matters between sources sharing a key, and the
    apiserver never accepted the combined entry, so no recorded order exists to keep).
    """
    select = obj.selector()
    sources = [field for field in ENV_FROM_SOURCES if field in entry]
    prefix = {"prefix": entry["prefix"]} if "prefix" in entry else {}
    ops: list[dict[str, Any]] = [
        {
            "select": select,
            "at": f"{containers}/*",
            "where": {"/name": container, "/envFrom/*": entry},
            "add": {"/envFrom/-": {**prefix, field: entry[field]}},
        }
        for field in sources[1:]
    ]
    ops.append(
        {
            "select": select,
            "at": f"{containers}/*/envFrom/*",
            "where": {f"/{field}": entry[field] for field in sources},
            "remove": [f"/{field}" for field in sources[1:]],
        }
    )
    return Fix(f"split the envFrom entry of container {container} into one entry per source", tuple(ops))


def placeholder_image(obj: ObjectRef, containers: str, container: str, observed: str | None) -> Fix:
    """Give a container without an image the placeholder image (only where it still has none)."""
    op = {
        "select": obj.selector(),
        "at": f"{containers}/*",
        "where": {"/name": container, "/image": observed},
        "add": {"/image": PLACEHOLDER_IMAGE},
    }
    return Fix(f"give container {container} the placeholder image {PLACEHOLDER_IMAGE}", (op,))


def align_selector(
    obj: ObjectRef, observed: Any, add_labels: dict[str, str], new_selector: dict[str, str] | None
) -> Fix:
    """Make a workload's selector match its pod template (``/spec/selector``, ``/spec/template``).

    Adds ``add_labels`` to the template (extra template labels never break a selector) and, with
    ``new_selector``, replaces the selector by those matchLabels. Only versions of the object whose
    selector is still ``observed`` are touched.
    """
    adds: dict[str, Any] = {
        f"/spec/template/metadata/labels/{escape(k)}": v for k, v in sorted(add_labels.items())
    }
    parts = []
    if add_labels:
        parts.append(f"add {_labels_text(add_labels)} to the pod template labels")
    if new_selector is not None:
        adds["/spec/selector"] = {"matchLabels": dict(sorted(new_selector.items()))}
        parts.append(f"set the selector to {_labels_text(new_selector)}")
    op = {"select": obj.selector(), "where": {"/spec/selector": observed}, "add": adds}
    return Fix(" and ".join(parts), (op,))


def _labels_text(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def add_missing_keys(target: ObjectRef, keys: Sequence[str]) -> Fix:
    """Add placeholder values for ``keys`` to the ConfigMap/Secret ``target`` (only where missing)."""
    value = PLACEHOLDER_VALUE
    if target.kind == "Secret":
        value = base64.b64encode(PLACEHOLDER_VALUE.encode()).decode()
    other = "stringData" if target.kind == "Secret" else "binaryData"
    ops = tuple(
        {
            "select": target.selector(),
            "where": {f"/data/{escape(key)}": None, f"/{other}/{escape(key)}": None},
            "add": {f"/data/{escape(key)}": value},
        }
        for key in sorted(set(keys))
    )
    return Fix(f"add placeholder values for {', '.join(sorted(set(keys)))} to {target.describe()}", ops)


def mark_key_references_optional(obj: ObjectRef, pod_spec: str, kind: str, name: str) -> Fix:
    """Mark every reference of the pod spec to ``kind`` ``name`` optional (missing keys are skipped)."""
    select = obj.selector()
    field, name_field = ("configMap", "name") if kind == "ConfigMap" else ("secret", "secretName")
    key_ref = "configMapKeyRef" if kind == "ConfigMap" else "secretKeyRef"
    ops = [
        {
            "select": select,
            "at": f"{pod_spec}/{containers}/*/env/*/valueFrom/{key_ref}",
            "where": {"/name": name},
            "add": {"/optional": True},
        }
        for containers in CONTAINER_LISTS
    ]
    ops.append(
        {
            "select": select,
            "at": f"{pod_spec}/volumes/*/{field}",
            "where": {f"/{name_field}": name},
            "add": {"/optional": True},
        }
    )
    ops.append(
        {
            "select": select,
            "at": f"{pod_spec}/volumes/*/projected/sources/*/{field}",
            "where": {"/name": name},
            "add": {"/optional": True},
        }
    )
    return Fix(f"mark the references to {kind} {name} optional", tuple(ops))


def placeholder_pull_secret(namespace: str, name: str) -> Fix:
    """Synthesize an image pull Secret with no credentials (anonymous pulls still work)."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "annotations": {PLACEHOLDER_ANNOTATION: "true"}},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {DOCKER_CONFIG_KEY: base64.b64encode(b'{"auths":{}}').decode()},
    }
    return Fix(f"synthesize a placeholder image pull Secret {namespace}/{name}", ({"create": obj},))


def drop_image_pull_secret(obj: ObjectRef, pod_spec: str, name: str) -> Fix:
    """Remove the imagePullSecrets entry naming ``name``."""
    op = _remove_where(obj.selector(), f"{pod_spec}/imagePullSecrets/*", {"/name": name})
    return Fix(f"remove {name} from imagePullSecrets", (op,))


class _PlainDumper(yaml.SafeDumper):
    """No anchors/aliases: a fix file is for people to read, and shared selectors would get them."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def fix_transform(findings: Iterable[Finding]) -> dict[str, Any]:
    """The transform applying the recommended (first) fix of every finding, duplicates removed."""
    operations: list[dict[str, Any]] = []
    placeholders: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
    for finding in findings:
        for op in finding.fixes[0].operations if finding.fixes else ():
            if "create" in op:
                # Several pods may need the same placeholder, reading different keys: create it once.
                obj, meta = op["create"], op["create"]["metadata"]
                key = (obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
                if key in placeholders:
                    placeholders[key].setdefault("data", {}).update(obj.get("data") or {})
                    continue
                placeholders[key] = copy_json(obj)
                operations.append({"create": placeholders[key]})
            elif op not in operations:
                operations.append(op)
    return {"version": TRANSFORM_VERSION, "operations": operations}


def render_fix_file(findings: Sequence[Finding], trace_name: str) -> str:
    """The YAML of :func:`fix_transform`, with the findings and the other fixes on offer as comments."""
    lines = [
        f"# Repairs for {one_line(trace_name)}, written by `kubetape validate --fix`.",
        "# Review, then apply with",
        f"#   kubetape transform {one_line(trace_name)} THIS_FILE -o FIXED_TRACE",
        "# Each finding's recommended repair is below; alternatives are listed as comments.",
    ]
    for f in findings:
        lines.append(one_line(f"# {f.code} event {f.event_index} {f.obj.describe()}: {f.message}"))
        for alt in f.fixes[1:]:
            lines.append(one_line(f"#     alternative: {alt.summary}"))
    body = yaml.dump(
        fix_transform(findings), Dumper=_PlainDumper, sort_keys=False, default_flow_style=False, width=110
    )
    return "\n".join(lines) + "\n" + body
