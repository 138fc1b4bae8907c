"""``validate --generate-skel``: the repairs of a trace's findings as a SKEL program, for users who keep their
trace edits in SimKube's language.

Each finding gets the first of its repairs (:mod:`pipeline.validate.fixes`) that SKEL can express: where
``--fix`` synthesizes a placeholder Secret, ConfigMap or ServiceAccount (SKEL has no ``insert``), the
program removes the references to it instead, as skctl's programs do. A finding no repair of which SKEL
can express keeps its recommended repair as a comment pointing to the YAML fix.

Each transform operation becomes SKEL statements with the same effect on every object, in the same order:
``select`` becomes field tests (``kind == "Deployment" && metadata.name == "web"``), ``at`` with ``where``
becomes a variable (``$x := spec.template.spec.volumes[*] | $x.secret.secretName == "db"``, one more
variable per further condition), ``remove`` becomes ``remove``, ``add`` becomes ``modify`` (a map of values
one ``modify`` per value, after removing what was there, as ``add`` replaces), ``set`` a ``modify`` of the
places that exist (bound to ``$s``), ``drop`` becomes ``delete``, and a choice of kinds one statement per
kind. A ``where`` null (absent or null) becomes ``!exists`` (absent), which in SKEL holds when no place
bound so far has the field: the same as the operation's per-place test when one place is left, as in
kubetape's repairs (a container picked by its name, unique in a pod). Every statement tests its selector
anew, so an operation whose statements would change what its ``where`` tests is not expressible.

What the trace holds is data, never program text: SKEL strings have no escapes, so a value holding a
double quote cannot be written (its repair is a comment) and other characters are written as they are;
comments show text with line breaks and other control characters escaped
(:func:`pipeline.validate.comments.one_line`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from pipeline.model.pointer import parse_pointer
from pipeline.validate.comments import one_line
from pipeline.validate.findings import Finding, Fix
from pipeline.validate.fixes import fix_transform
from pipeline.validate.skel.parse import MAX_INTEGER, MAX_PATH_SEGMENTS

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_\-]+")
_QUOTED_KEY = re.compile(r"[A-Za-z0-9_.\/\-]+")
_DIGITS = re.compile(r"[0-9]+")


class _Inexpressible(Exception):  # noqa: N818 - a signal, caught right away, never raised to callers
    """An operation SKEL cannot express; the message says what."""


def skel_path(segments: Sequence[str], var: str | None = None) -> str:
    """The SKEL path of JSON pointer ``segments`` (``*`` → ``[*]``), after ``var`` if given."""
    if len(segments) > MAX_PATH_SEGMENTS:
        raise _Inexpressible(f"a path of {len(segments)} parts (SKEL paths have at most {MAX_PATH_SEGMENTS})")
    parts: list[str] = [var] if var else []
    for segment in segments:
        if segment == "*" or _DIGITS.fullmatch(segment):
            if not parts:
                raise _Inexpressible(f"a path cannot start with an index ({segment})")
            if segment != "*" and int(segment) > MAX_INTEGER:
                raise _Inexpressible(f"the index {segment} (SKEL indices are 64-bit)")
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


def skel_value(value: Any) -> str:
    """``value`` as a SKEL literal (raises _Inexpressible). A string is written between double quotes as
    it is: SKEL's lexer ends a string at the next double quote and has no escapes, so a string holding one
    cannot be written at all."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and 0 <= value <= MAX_INTEGER:
        return str(value)
    if isinstance(value, str) and '"' not in value:
        return f'"{value}"'
    if isinstance(value, str):
        raise _Inexpressible(
            f"the string {json.dumps(value)} holds a double quote (SKEL strings have no escapes)"
        )
    raise _Inexpressible(
        f"the value {json.dumps(value)} (SKEL values are strings, whole numbers from 0 to {MAX_INTEGER} "
        "and booleans)"
    )


def _selects(select: dict[str, Any]) -> list[list[str]]:
    """The field tests of ``select``: one list per combination of its choices (``kind: [A, B]`` gives two
    statements, which select disjoint objects, so together they do what the one operation does)."""
    alternatives: list[list[str]] = [[]]
    for field, path in (("apiVersion", "apiVersion"), ("kind", "kind"), ("name", "metadata.name")):
        if field in select:
            values = select[field] if isinstance(select[field], list) else [select[field]]
            alternatives = [[*tests, f"{path} == {skel_value(v)}"] for tests in alternatives for v in values]
    if "namespace" in select:
        values = select["namespace"] if isinstance(select["namespace"], list) else [select["namespace"]]
        alternatives = [
            [*tests, "!exists(metadata.namespace)" if v == "" else f"metadata.namespace == {skel_value(v)}"]
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
        test = f"!exists({path})" if expected is None else f"{path} == {skel_value(expected)}"
        if base is None:  # conditions on the object itself need no variable
            tests.append(test.replace(f"{new_var}.", "", 1))
            continue
        tests.append(f"{new_var} := {var or base} | {test}")
        var = new_var
    return tests, var


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether one pointer is at or under the other (``*`` stands for any index)."""
    return all(x == y or "*" in (x, y) for x, y in zip(a, b, strict=False))


def _leaves(segments: tuple[str, ...], value: Any) -> list[tuple[tuple[str, ...], Any]]:
    """The scalar values a map ``value`` at ``segments`` holds, each with its place."""
    if not isinstance(value, dict):
        return [(segments, value)]
    if not value:
        raise _Inexpressible("writing an empty map (SKEL values are strings, numbers and booleans)")
    return [leaf for key, item in value.items() for leaf in _leaves((*segments, str(key)), item)]


def _writes(
    op: dict[str, Any], at: tuple[str, ...], var: str | None
) -> list[tuple[str, tuple[str, ...], Any]]:
    """(``set``/``add``/``remove``, pointer below ``at``, value) of each statement the writes of ``op``
    need: a map ``add`` becomes a removal of what is there and one write per value it holds."""
    absent = {parse_pointer(p) for p, expected in op.get("where", {}).items() if expected is None}
    out: list[tuple[str, tuple[str, ...], Any]] = []
    for key in ("set", "add"):
        for pointer, value in op.get(key, {}).items():
            segments = parse_pointer(pointer)
            if isinstance(value, list):
                raise _Inexpressible("writing a list (SKEL values are strings, numbers and booleans)")
            if not isinstance(value, dict):
                out.append((key, segments, value))
                continue
            if key == "set" or var is not None or "*" in at:
                raise _Inexpressible("writing a map into places SKEL would not create the map in")
            if not any(segments[: len(a)] == a for a in absent):  # add replaces what is there
                out.append(("remove", segments, None))
            out += [("add", leaf, leaf_value) for leaf, leaf_value in _leaves(segments, value)]
    return out


def _last_the_one_changing_the_condition(
    op: dict[str, Any], changes: list[tuple[str, tuple[str, ...], Any]]
) -> list[tuple[str, tuple[str, ...], Any]]:
    """``changes`` in an order SKEL can run them in: each statement tests the selector anew, so at most
    one may change what ``where`` tests, and it goes last (past changes elsewhere in the object)."""
    tested = [parse_pointer(p) for p in op.get("where", {})]
    touching = [i for i, (_key, at, _v) in enumerate(changes) if any(_overlap(t, at) for t in tested)]
    if len(changes) < 2 or not touching:
        return changes
    if len(touching) > 1 or any(_overlap(changes[touching[0]][1], c[1]) for c in changes[touching[0] + 1 :]):
        raise _Inexpressible("changing what its where tests in several steps")
    last = changes[touching[0]]
    return [c for c in changes if c is not last] + [last]


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
    at = parse_pointer(op.get("at", ""))
    tests, var = _where(at, op.get("where", {}))
    # writes first: a transform operation defers its removals to the end
    changes = _writes(op, at, var) + [("remove", parse_pointer(p), None) for p in op.get("remove", [])]
    changes = _last_the_one_changing_the_condition(op, changes)
    statements = []
    for select_tests in _selects(op.get("select", {})):
        selector = " && ".join(select_tests + tests) or "*"
        if op.get("drop"):
            statements.append(f"delete({selector});")
            continue
        for key, segments, value in changes:
            target = skel_path(segments, var) if var else skel_path(at + segments)
            if key == "set":  # set replaces values that exist, never creates: bind the existing ones
                guard = f"$s := {target} | exists($s)"
                guarded = guard if selector == "*" else f"{selector} && {guard}"
                statements.append(f"modify({guarded}, $s = {skel_value(value)});")
            elif key == "add":
                statements.append(f"modify({selector}, {target} = {skel_value(value)});")
            else:
                statements.append(f"remove({selector}, {target});")
    return statements


def _skel_fix(finding: Finding) -> Fix | None:
    """The first repair of ``finding`` SKEL can express (None: none can)."""
    for fix in finding.fixes:
        if all(expressible(op) for op in fix.operations):
            return fix
    return None


def fix_skel(findings: Sequence[Finding], trace_name: str) -> str:
    """The SKEL program repairing every finding it can (see the module docstring)."""
    lines = [
        f"# Repairs for {one_line(trace_name)}, written by `kubetape validate --generate-skel`.",
        "# Review, then apply:",
        f"#   kubetape transform {one_line(trace_name)} --skel THIS_FILE -o FIXED_TRACE",
        "# (or skctl transform). Repairs SKEL cannot express are comments: use the YAML of --fix for them.",
    ]
    chosen = []
    for f in findings:
        fix = _skel_fix(f)
        repair = f"; repair: {fix.summary}" if fix is not None and f.fixes and fix != f.fixes[0] else ""
        lines.append(one_line(f"# {f.code} event {f.event_index} {f.obj.describe()}: {f.message}{repair}"))
        chosen.append(replace(f, fixes=(fix,)) if fix is not None else f)
    lines += _statements(fix_transform(chosen)["operations"])
    return "\n".join(lines) + "\n"


def _statements(operations: Iterable[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for op in operations:
        try:
            statements = operation_statements(op)
        except _Inexpressible as exc:
            out.append(one_line(f"# not expressible in SKEL ({exc}): {json.dumps(op, sort_keys=True)}"))
            continue
        for statement in statements:
            if one_line(statement) != statement or "#" in statement:
                # a string from the trace spans lines or holds control characters or '#': say so on one line
                out.append(f"# the next statement's strings are written as they are: {one_line(statement)}")
            out.append(statement)
    return out
