"""A small declarative language for editing traces, and its application (``kubetape transform``).

A transform file is YAML::

    version: 1
    operations:
      - select: {kind: Deployment, namespace: default, name: web, labels: {app: web}}  # all optional
        at: /spec/template/spec/containers/*/env/*     # where to act; "*" = every list element
        where: {/valueFrom/secretKeyRef/name: db}      # keep only places where these hold
        remove: [""]                                   # delete fields ("" = the place itself)
        set: {/value: "<redacted>"}                    # replace values that exist
        add: {/emptyDir: {}}                           # create or replace; "/list/-" appends
        obfuscate: [/metadata/name]                    # replace strings by a stable digest
      - select: {kind: Namespace}
        drop: true                                     # drop whole objects
      - create: {apiVersion: v1, kind: ConfigMap, metadata: {...}}   # add an object at trace start

``select`` fields take a string or a list of strings (``namespace: ""`` selects cluster-scoped
objects); ``labels`` is a ``matchLabels`` map or a full label selector. Every path is a JSON pointer
(RFC 6901) with the ``*`` extension; those under ``where``, ``remove``, ``set``, ``add`` and
``obfuscate`` are relative to each place ``at`` reaches. A ``where`` condition holds when any value
its pointer reaches equals the given one; ``null`` also holds when the pointer reaches nothing (a
missing field). ``set`` never creates anything; ``add`` creates missing maps on the way, but ``*``
(every element of an existing list) never creates.
Operations run in file order on every object (applied and deleted) of every event; ``create``
objects are added first, then transformed like the others.
Malformed files raise :class:`~pipeline.model.errors.ConfigError` naming the file and the offending
path (``fix.yaml: operations[2].remove[0]: ...``).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from pipeline.model.errors import ConfigError
from pipeline.model.pointer import parents, parse_pointer, resolve
from pipeline.model.sanitize import copy_json
from pipeline.model.selectors import LabelSelector, parse_label_selector

TRANSFORM_VERSION = 1
_SELECT_FIELDS = ("apiVersion", "kind", "namespace", "name")
_OP_FIELDS = {"select", "at", "where", "remove", "set", "add", "obfuscate", "drop", "create"}
_ACTIONS = ("remove", "set", "add", "obfuscate")


class TraceEdit(Protocol):
    """What ``kubetape transform`` applies to each object of a trace: a :class:`Transform` (YAML) or a
    SKEL program (:class:`pipeline.validate.skel.SkelProgram`)."""

    @property
    def source(self) -> str:
        """The file it came from, for messages."""
        ...

    @property
    def creates(self) -> list[dict[str, Any]]:
        """Objects added at the start of the trace."""
        ...

    def edit(self, obj: dict[str, Any], ts: int, start: int) -> tuple[dict[str, Any] | None, bool]:
        """``obj`` of an event at ``ts`` in a trace starting at ``start`` (Unix seconds), edited: (the
        result, None when dropped; whether it changed). ``obj`` itself is never modified."""
        ...


@dataclass(frozen=True, slots=True)
class Selector:
    """Which objects an operation applies to: every given field must match (absent = any)."""

    fields: tuple[tuple[str, frozenset[str]], ...] = ()
    labels: LabelSelector | None = None

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is selected."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        values = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "namespace": meta.get("namespace") or "",
            "name": meta.get("name"),
        }
        if not all(values[name] in allowed for name, allowed in self.fields):
            return False
        labels = meta.get("labels")
        return self.labels is None or self.labels.matches(labels if isinstance(labels, dict) else {})


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation of a transform file (see the module docstring)."""

    select: Selector = field(default_factory=Selector)
    at: str = ""
    where: tuple[tuple[str, Any], ...] = ()
    remove: tuple[str, ...] = ()
    set: tuple[tuple[str, Any], ...] = ()
    add: tuple[tuple[str, Any], ...] = ()
    obfuscate: tuple[str, ...] = ()
    drop: bool = False
    create: dict[str, Any] | None = None


@dataclass(frozen=True)
class Transform:
    """A parsed transform file."""

    operations: tuple[Operation, ...]
    source: str = "<transform>"
    # Positions of the operations selecting by name (per name) and of all others, so an object only
    # visits the operations that can select it: fix files hold one operation per broken object.
    _by_name: dict[str, list[int]] = field(init=False, repr=False, compare=False)
    _general: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, list[int]] = {}
        general: list[int] = []
        for i, op in enumerate(self.operations):
            names = dict(op.select.fields).get("name")
            if op.create is not None:
                continue
            if names is None:
                general.append(i)
            else:
                for name in names:
                    by_name.setdefault(name, []).append(i)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_general", general)

    @property
    def creates(self) -> list[dict[str, Any]]:
        """The objects the transform adds at the start of the trace."""
        return [op.create for op in self.operations if op.create is not None]

    def edit(self, obj: dict[str, Any], ts: int, start: int) -> tuple[dict[str, Any] | None, bool]:
        """:func:`transform_object` (a YAML transform does not depend on time)."""
        return transform_object(self, obj)

    def next_operation(self, after: int, name: Any) -> int | None:
        """The position of the first operation after ``after`` that may select an object named ``name``."""
        candidates = [self._general, self._by_name.get(name, []) if isinstance(name, str) else []]
        found = [c[i] for c in candidates if (i := bisect.bisect_right(c, after)) < len(c)]
        return min(found) if found else None


# ---- parsing -------------------------------------------------------------------------------------
def load_transform(path: Path) -> Transform:
    """Read and parse a transform file; ConfigError says what is wrong and where."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the transform file ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    return parse_transform(data, str(path))


def load_trace_edit(path: Path) -> TraceEdit:
    """A SKEL program for a ``.skel`` file, else a YAML transform file."""
    if path.suffix.lower() == ".skel":
        from pipeline.validate.skel.program import load_skel

        return load_skel(path)
    return load_transform(path)


def parse_transform(data: Any, source: str) -> Transform:
    """Validate a transform already parsed from YAML/JSON; ``source`` prefixes every error."""
    if not isinstance(data, dict):
        raise _fail(source, "", "a transform is a mapping with 'version' and 'operations'")
    unknown = set(data) - {"version", "operations"}
    if unknown:
        raise _fail(source, "", f"unknown field(s) {sorted(unknown)}; expected version, operations")
    if data.get("version") != TRANSFORM_VERSION:
        raise _fail(source, "version", f"must be {TRANSFORM_VERSION}, got {data.get('version')!r}")
    ops = data.get("operations")
    if not isinstance(ops, list):
        raise _fail(source, "operations", "must be a list of operations")
    return Transform(tuple(_parse_op(op, source, f"operations[{i}]") for i, op in enumerate(ops)), source)


def _fail(source: str, where: str, problem: str) -> ConfigError:
    return ConfigError(f"{source}: {where}: {problem}" if where else f"{source}: {problem}")


def _pointer(value: Any, source: str, where: str) -> str:
    if not isinstance(value, str):
        raise _fail(source, where, f"a JSON pointer must be a string, got {value!r}")
    try:
        parse_pointer(value)
    except ValueError as exc:
        raise _fail(source, where, str(exc)) from None
    return value


def _pointer_map(value: Any, source: str, where: str) -> tuple[tuple[str, Any], ...]:
    if not isinstance(value, dict) or not value:
        raise _fail(source, where, "must be a non-empty mapping of JSON pointers to values")
    return tuple((_pointer(k, source, f"{where}[{k!r}]"), v) for k, v in value.items())


def _pointer_list(value: Any, source: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _fail(source, where, "must be a JSON pointer or a non-empty list of them")
    return tuple(_pointer(v, source, f"{where}[{i}]") for i, v in enumerate(value))


def _parse_select(value: Any, source: str, where: str) -> Selector:
    if not isinstance(value, dict):
        raise _fail(source, where, "must be a mapping with apiVersion, kind, namespace, name and/or labels")
    unknown = set(value) - {*_SELECT_FIELDS, "labels"}
    if unknown:
        raise _fail(source, where, f"unknown field(s) {sorted(unknown)}")
    fields = []
    for name in _SELECT_FIELDS:
        if name not in value:
            continue
        allowed = value[name] if isinstance(value[name], list) else [value[name]]
        if not allowed or not all(isinstance(v, str) for v in allowed):
            raise _fail(source, f"{where}.{name}", "must be a string or a non-empty list of strings")
        fields.append((name, frozenset(allowed)))
    labels = None
    if "labels" in value:
        raw = value["labels"]
        if isinstance(raw, dict) and not {"matchLabels", "matchExpressions"} & set(raw):
            raw = {"matchLabels": raw}
        labels = parse_label_selector(raw, f"{source}: {where}.labels")
    return Selector(tuple(fields), labels)


def _parse_op(op: Any, source: str, where: str) -> Operation:
    if not isinstance(op, dict):
        raise _fail(source, where, "an operation must be a mapping")
    unknown = set(op) - _OP_FIELDS
    if unknown:
        raise _fail(source, where, f"unknown field(s) {sorted(unknown)}; expected {sorted(_OP_FIELDS)}")
    if "create" in op:
        if set(op) != {"create"}:
            raise _fail(source, where, "'create' stands alone: it adds an object, it selects nothing")
        return Operation(create=_parse_created(op["create"], source, f"{where}.create"))
    actions = [a for a in (*_ACTIONS, "drop") if a in op]
    if not actions:
        raise _fail(source, where, "needs an action: remove, set, add, obfuscate, drop or create")
    if "drop" in op and (op["drop"] is not True or len(actions) > 1 or "at" in op or "where" in op):
        raise _fail(source, f"{where}.drop", "must be true, with only 'select' beside it")
    select = _parse_select(op["select"], source, f"{where}.select") if "select" in op else Selector()
    return Operation(
        select=select,
        at=_pointer(op.get("at", ""), source, f"{where}.at"),
        where=_pointer_map(op["where"], source, f"{where}.where") if "where" in op else (),
        remove=_pointer_list(op["remove"], source, f"{where}.remove") if "remove" in op else (),
        set=_pointer_map(op["set"], source, f"{where}.set") if "set" in op else (),
        add=_pointer_map(op["add"], source, f"{where}.add") if "add" in op else (),
        obfuscate=_pointer_list(op["obfuscate"], source, f"{where}.obfuscate") if "obfuscate" in op else (),
        drop="drop" in op,
    )


def _parse_created(obj: Any, source: str, where: str) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("apiVersion"), str)
        or not isinstance(obj.get("kind"), str)
        or not isinstance(meta, dict)
        or not isinstance(meta.get("name"), str)
    ):
        raise _fail(source, where, "must be a Kubernetes object with apiVersion, kind and metadata.name")
    return obj


# ---- applying to one object ----------------------------------------------------------------------
def obfuscated(value: str) -> str:
    """A stable, DNS-label-safe stand-in for ``value`` (the same input always gives the same output)."""
    return "x" + hashlib.sha256(value.encode()).hexdigest()[:12]


def _places(obj: dict[str, Any], at: str) -> list[tuple[Any, Any]]:
    """(container, key) of every place ``at`` reaches, list positions as ints; (None, None) stands for
    the object itself."""
    if at == "":
        return [(None, None)]
    return [(node, int(last) if isinstance(node, list) else last) for node, last in parents(obj, at)]


def _remove(node: Any, pointer: str) -> list[tuple[Any, Any]]:
    """(container, key) pairs to delete for ``pointer`` under ``node`` (deleted later, indices last-first)."""
    return [(c, k) for c, k in _places(node, pointer) if c is not None]


def _set_existing(node: Any, pointer: str, value: Any) -> bool:
    changed = False
    for container, key in _places(node, pointer):
        if container is not None:
            container[key] = copy_json(value)
            changed = True
    return changed


def _add(node: Any, segments: tuple[str, ...], value: Any) -> bool:
    head, rest = segments[0], segments[1:]
    if isinstance(node, list):
        if head == "*" and not rest:
            return _replace_all(node, value)
        if head == "*":
            results = [_add(item, rest, value) for item in node]  # every element: no short-circuit
            return any(results)
        if head == "-" and not rest:
            node.append(copy_json(value))
            return True
        if head.isdigit() and int(head) < len(node):
            if not rest:
                node[int(head)] = copy_json(value)
                return True
            return _add(node[int(head)], rest, value)
        return False
    if not isinstance(node, dict) or head == "*":
        return False  # "*" only ranges over list elements; it never creates anything
    if not rest:
        node[head] = copy_json(value)
        return True
    if head not in node or node[head] is None:
        if rest[0] == "*":
            return False
        node[head] = [] if rest[0] == "-" else {}
    return _add(node[head], rest, value)


def _replace_all(items: list[Any], value: Any) -> bool:
    for i in range(len(items)):
        items[i] = copy_json(value)
    return bool(items)


def _obfuscate(node: Any, pointer: str) -> bool:
    changed = False
    for container, key in _places(node, pointer):
        if container is not None and isinstance(container[key], str):
            container[key] = obfuscated(container[key])
            changed = True
    return changed


def _matches_where(node: Any, where: tuple[tuple[str, Any], ...]) -> bool:
    return all(_holds(resolve(node, pointer), value) for pointer, value in where)


def _holds(found: list[Any], value: Any) -> bool:
    # null also matches an absent field, so a repair can fill a field only where it is missing
    return value in found or (value is None and not found)


def apply_operation(op: Operation, obj: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """Apply ``op`` to a copy of ``obj``: (new object or None if dropped, whether it changed)."""
    if op.create is not None or not op.select.matches(obj):
        return obj, False
    if op.drop:
        return None, True
    out: dict[str, Any] = copy_json(obj)
    changed = False
    deletions: list[tuple[Any, Any]] = []
    for container, key in _places(out, op.at):
        node = out if container is None else container[key]
        if not _matches_where(node, op.where):
            continue
        for pointer in op.remove:
            deletions.extend(_remove(node, pointer) if pointer else [(container, key)])
        for pointer, value in op.set:
            changed |= _set_existing(node, pointer, value)
        for pointer, value in op.add:
            changed |= bool(pointer) and _add(node, parse_pointer(pointer), value)
        for pointer in op.obfuscate:
            changed |= _obfuscate(node, pointer)
    # Delete list elements from the highest index down so earlier deletions do not shift later ones.
    unique = {(id(c), k): (c, k) for c, k in deletions}.values()
    for container, key in sorted(unique, key=_deletion_order):
        if container is None:
            return None, True  # removing "" at the object itself drops it
        if (isinstance(container, dict) and key in container) or (
            isinstance(container, list) and isinstance(key, int) and key < len(container)
        ):
            del container[key]
            changed = True
    return out, changed


def _deletion_order(item: tuple[Any, Any]) -> tuple[int, int]:
    container, key = item
    return (id(container), -key if isinstance(key, int) else 0)


def transform_object(transform: Transform, obj: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """Every operation of ``transform``, in order, on ``obj``: (result or None if dropped, changed)."""
    changed = False
    current = obj
    position = transform.next_operation(-1, _name_of(current))
    while position is not None:
        result, op_changed = apply_operation(transform.operations[position], current)
        changed |= op_changed
        if result is None:
            return None, True
        current = result
        position = transform.next_operation(position, _name_of(current))
    return current, changed


def _name_of(obj: dict[str, Any]) -> Any:
    meta = obj.get("metadata")
    return meta.get("name") if isinstance(meta, dict) else None
