"""``validate --generate-skel``: the recommended repairs (:func:`pipeline.validate.fixes.fix_transform`) as a
SKEL program, for users who keep their trace edits in SimKube's language.

Each transform operation becomes SKEL statements with the same effect on every object, in the same order:
``select`` becomes field tests (``kind == "Deployment" && metadata.name == "web"``), ``at`` with ``where``
becomes a variable (``$x := spec.template.spec.volumes[*] | $x.secret.secretName == "db"``, one more
variable per further condition), ``remove`` becomes ``remove``, ``add`` of a scalar becomes ``modify``,
``set`` a ``modify`` of the places that exist (bound to ``$s``), ``drop`` becomes ``delete``, and a choice
of kinds one statement per kind. A ``where`` null (absent or null) becomes ``!exists`` (absent), which in
SKEL holds when no place bound so far has the field: the same as the operation's per-place test when one
place is left, as in kubetape's repairs (a container picked by its name, unique in a pod). What SKEL
cannot say is left as a comment naming the repair and pointing to the YAML fix: creating objects (SKEL
has no ``insert``), values that are maps or lists, appending to a list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.model.pointer import parse_pointer
from pipeline.validate.findings import Finding
from pipeline.validate.fixes import fix_transform

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_\-]+")
_QUOTED_KEY = re.compile(r"[A-Za-z0-9_.\/\-]+")
_DIGITS = re.compile(r"[0-9]+")


class _Inexpressible(Exception):  # noqa: N818 - a signal, caught right away, never raised to callers
    """An operation SKEL cannot express; the message says what."""


def skel_path(segments: Sequence[str], var: str | None = None) -> str:
    """The SKEL path of JSON pointer ``segments`` (``*`` → ``[*]``), after ``var`` if given."""
    parts: list[str] = [var] if var else []
    for segment in segments:
        if segment == "*" or _DIGITS.fullmatch(segment):
            if not parts:
                raise _Inexpressible(f"a path cannot start with an index ({segment})")
            parts[-1] += f"[{segment}]"
        elif _PLAIN_KEY.fullmatch(segment):
            parts.append(segment)
        elif _QUOTED_KEY.fullmatch(segment):
            parts.append(f'"{segment}"')
        else:
            raise _Inexpressible(f"the key {segment!r} holds characters SKEL paths cannot")
    if not parts:
        raise _Inexpressible("an operation on the whole object")
    return ".".join(parts)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value >= 0:
        return str(value)
    if isinstance(value, str) and '"' not in value:
        return f'"{value}"'
    raise _Inexpressible(
        f"the value {json.dumps(value)} (SKEL values are strings, whole numbers and booleans)"
    )


def _selects(select: dict[str, Any]) -> list[list[str]]:
    """The field tests of ``select``: one list per combination of its choices (``kind: [A, B]`` gives two
    statements, which select disjoint objects, so together they do what the one operation does)."""
    alternatives: list[list[str]] = [[]]
    for field, path in (("apiVersion", "apiVersion"), ("kind", "kind"), ("name", "metadata.name")):
        if field in select:
            values = select[field] if isinstance(select[field], list) else [select[field]]
            alternatives = [[*tests, f"{path} == {_value(v)}"] for tests in alternatives for v in values]
    if "namespace" in select:
        values = select["namespace"] if isinstance(select["namespace"], list) else [select["namespace"]]
        alternatives = [
            [*tests, "!exists(metadata.namespace)" if v == "" else f"metadata.namespace == {_value(v)}"]
            for tests in alternatives
            for v in values
        ]
    if "labels" in select:
        raise _Inexpressible("a label selector (SKEL tests fields one by one)")
    return alternatives


def _where(at: tuple[str, ...], where: dict[str, Any]) -> tuple[list[str], str | None]:
    """Conditions narrowing ``at`` by ``where``, and the variable naming the places that remain."""
    if not where:
        return [], None
    tests = []
    var, base = None, skel_path(at) if at else None
    for i, (pointer, expected) in enumerate(where.items()):
        new_var = f"$w{i}" if i else "$x"
        path = skel_path(parse_pointer(pointer), new_var)
        test = f"!exists({path})" if expected is None else f"{path} == {_value(expected)}"
        if base is None:  # conditions on the object itself need no variable
            tests.append(test.replace(f"{new_var}.", "", 1))
            continue
        tests.append(f"{new_var} := {var or base} | {test}")
        var = new_var
    return tests, var


def expressible(op: dict[str, Any]) -> bool:
    """Whether SKEL can do what the transform operation ``op`` does."""
    try:
        operation_statements(op)
    except _Inexpressible:
        return False
    return True


def operation_statements(op: dict[str, Any]) -> list[str]:
    """The SKEL statements doing what the transform operation ``op`` does (raises _Inexpressible)."""
    if "create" in op:
        raise _Inexpressible("creating an object (SKEL has no insert)")
    if "obfuscate" in op:
        raise _Inexpressible("obfuscation")
    if any(k.endswith("/-") for k in op.get("add", {})):
        raise _Inexpressible("appending to a list")
    writes = [(key, p, v) for key in ("set", "add") for p, v in op.get(key, {}).items()]
    if writes and op.get("remove") and op.get("where"):
        # each SKEL statement tests its selector again: a removal could undo the condition of a write
        raise _Inexpressible("removing and writing under one condition")
    at = parse_pointer(op.get("at", ""))
    tests, var = _where(at, op.get("where", {}))
    statements = []
    for select_tests in _selects(op.get("select", {})):
        selector = " && ".join(select_tests + tests) or "*"
        if op.get("drop"):
            statements.append(f"delete({selector});")
            continue
        # writes first: a transform operation defers its removals to the end
        for key, pointer, value in writes:
            segments = parse_pointer(pointer)
            target = skel_path(segments, var) if var else skel_path(at + segments)
            if key == "set":  # set replaces values that exist, never creates: bind the existing ones
                guard = f"$s := {target} | exists($s)"
                guarded = guard if selector == "*" else f"{selector} && {guard}"
                statements.append(f"modify({guarded}, $s = {_value(value)});")
            else:
                statements.append(f"modify({selector}, {target} = {_value(value)});")
        for pointer in op.get("remove", []):
            segments = parse_pointer(pointer)
            target = skel_path(segments, var) if var else skel_path(at + segments)
            statements.append(f"remove({selector}, {target});")
    return statements


def fix_skel(findings: Sequence[Finding], trace_name: str) -> str:
    """The SKEL program applying the recommended repair of every finding (see the module docstring)."""
    lines = [
        f"# Repairs for {trace_name}, written by `kubetape validate --generate-skel`. Review, then apply:",
        f"#   kubetape transform {trace_name} --skel THIS_FILE -o FIXED_TRACE",
        "# (or skctl transform). Repairs SKEL cannot express are comments: use the YAML of --fix for them.",
    ]
    lines += [f"# {f.code} event {f.event_index} {f.obj.describe()}: {f.message}" for f in findings]
    lines += _statements(fix_transform(findings)["operations"])
    return "\n".join(lines) + "\n"


def _statements(operations: Iterable[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for op in operations:
        try:
            out += operation_statements(op)
        except _Inexpressible as exc:
            out.append(f"# not expressible in SKEL ({exc}): {json.dumps(op, sort_keys=True)}")
    return out
