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
from pipeline.validate.findings import Finding, Fix, ObjectRef
from pipeline.validate.podspec import CONTAINER_LISTS
from pipeline.validate.transform import TRANSFORM_VERSION

PLACEHOLDER_ANNOTATION = "kubetape.dev/placeholder"
"""Set on objects a fix synthesizes, so they are easy to find (and to drop) later."""
PLACEHOLDER_VALUE = "placeholder"

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


def drop_references(obj: ObjectRef, pod_spec: str, kind: str, name: str, volume_names: Iterable[str]) -> Fix:
    """Remove every reference of the pod spec to ``kind`` ``name`` (volumes with their mounts)."""
    select = obj.selector()
    ops: list[dict[str, Any]] = []
    if kind == "PersistentVolumeClaim":
        volume_where = {"/persistentVolumeClaim/claimName": name}
    else:
        field, name_field = ("configMap", "name") if kind == "ConfigMap" else ("secret", "secretName")
        key_ref, env_ref = (
            ("configMapKeyRef", "configMapRef") if kind == "ConfigMap" else ("secretKeyRef", "secretRef")
        )
        volume_where = {f"/{field}/{name_field}": name}
        for containers in CONTAINER_LISTS:
            at = f"{pod_spec}/{containers}/*"
            ops.append(_remove_where(select, f"{at}/env/*", {f"/valueFrom/{key_ref}/name": name}))
            ops.append(_remove_where(select, f"{at}/envFrom/*", {f"/{env_ref}/name": name}))
        ops.append(
            _remove_where(select, f"{pod_spec}/volumes/*/projected/sources/*", {f"/{field}/name": name})
        )
    # Mounts name volumes, not objects: remove the mounts of the volumes that use the object.
    for volume in sorted(set(volume_names)):
        for containers in CONTAINER_LISTS:
            ops.append(_remove_where(select, f"{pod_spec}/{containers}/*/volumeMounts/*", {"/name": volume}))
    ops.append(_remove_where(select, f"{pod_spec}/volumes/*", volume_where))
    return Fix(f"remove the references to {kind} {name} (and the mounts of volumes using it)", tuple(ops))


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


def _remove_where(select: dict[str, str], at: str, where: dict[str, str]) -> dict[str, Any]:
    return {"select": select, "at": at, "where": where, "remove": [""]}


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
        f"# Repairs for {trace_name}, written by `kubetape validate --fix`. Review, then apply with",
        f"#   kubetape transform {trace_name} THIS_FILE -o FIXED_TRACE",
        "# Each finding's recommended repair is below; alternatives are listed as comments.",
    ]
    for f in findings:
        lines.append(f"# {f.code} event {f.event_index} {f.obj.describe()}: {f.message}")
        for alt in f.fixes[1:]:
            lines.append(f"#     alternative: {alt.summary}")
    body = yaml.dump(
        fix_transform(findings), Dumper=_PlainDumper, sort_keys=False, default_flow_style=False, width=110
    )
    return "\n".join(lines) + "\n" + body
