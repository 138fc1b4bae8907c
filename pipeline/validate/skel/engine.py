"""Running SKEL statements on one trace object, with SimKube's semantics (``sk-skel/src/engine.rs``).

Every statement of a program is applied, in order, to each object of each event (the trace is traversed
once). A statement's selector holds when all its conditions hold, evaluated left to right:

* ``@t OP v``: the event's timestamp against ``v`` (absolute Unix seconds, or the trace start plus a
  relative ``10s``/``5m``/``2h``);
* ``path OP rhs``: some value the path reaches compares true with some value of ``rhs`` (a value, or
  another path); a place the path does not reach never matches, so ``name != "a"`` skips objects without
  a name. ``<``, ``>``, ``<=``, ``>=`` compare numbers with numbers and strings with strings only;
* ``exists(path)`` / ``!exists(path)``: the path reaches something / nothing;
* ``$x := base | test``: ``$x`` is bound to each place ``base`` reaches for which ``test`` (about ``$x``)
  holds, and the condition holds when one does. With ``!exists``, the condition holds when no place
  has the field, and ``$x`` is then bound to every place ``base`` reaches.

``remove`` deletes every place its target reaches (array elements from the last one, so indices stay
right); ``modify`` writes its value at every place the target names, creating the last key (and missing
maps on the way for a path without ``[*]`` or variables); a value from a path must be a single value
(else :class:`SkelRuntimeError`); ``delete`` drops the object from the event.
"""

from __future__ import annotations

from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.sanitize import copy_json
from pipeline.validate.skel.ast import (
    WILDCARD,
    Action,
    Check,
    Command,
    Condition,
    Literal,
    Op,
    Path,
    ResourceTest,
    Segment,
    TimeTest,
    VarTest,
)

Place = tuple[str | int, ...]
"""A concrete location in an object: map keys and array indices."""
Found = list[tuple[Place, Any]]
Bindings = dict[str, Found]


class SkelRuntimeError(ConfigError):
    """A statement cannot be applied to an object (e.g. assigning from a variable with several values)."""


# ---- paths --------------------------------------------------------------------------------------
def _index(segment: Segment) -> int | None:
    """The array index a segment names: ``[3]``, or a key of digits as in a JSON pointer."""
    if isinstance(segment, int):
        return segment
    return int(segment) if isinstance(segment, str) and segment.isdigit() else None


def _children(place: Place, node: Any, segment: Segment) -> Found:
    if isinstance(node, dict):
        key = str(segment) if not isinstance(segment, type(WILDCARD)) else None
        return [((*place, key), node[key])] if key is not None and key in node else []
    if isinstance(node, list):
        if segment is WILDCARD:
            return [((*place, i), item) for i, item in enumerate(node)]
        index = _index(segment)
        if index is not None and index < len(node):
            return [((*place, index), node[index])]
    return []


def _roots(obj: Any, path: Path, bindings: Bindings) -> Found:
    return list(bindings.get(path.var, [])) if path.var else [((), obj)]


def expand(obj: Any, path: Path, bindings: Bindings, segments: tuple[Segment, ...] | None = None) -> Found:
    """Every (place, value) ``path`` reaches in ``obj`` (from its variable's places when it has one)."""
    found = _roots(obj, path, bindings)
    for segment in path.segments if segments is None else segments:
        found = [child for place, node in found for child in _children(place, node, segment)]
    return found


def _get(obj: Any, place: Place) -> tuple[bool, Any]:
    node = obj
    for key in place:
        if isinstance(node, dict) and isinstance(key, str) and key in node:
            node = node[key]
            continue
        if not (isinstance(node, list) and isinstance(key, int) and key < len(node)):
            return False, None
        node = node[key]
    return True, node


# ---- conditions ---------------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def compare(left: Any, op: Op, right: Any) -> bool:
    """``left OP right`` as SKEL compares JSON values (``true`` is not ``1``; ordering within a type)."""
    if op in (Op.EQ, Op.NE):
        same = left == right and (isinstance(left, bool) == isinstance(right, bool))
        return same if op is Op.EQ else not same
    if not ((_is_number(left) and _is_number(right)) or (isinstance(left, str) and isinstance(right, str))):
        return False
    if op is Op.LT:
        return bool(left < right)
    if op is Op.LE:
        return bool(left <= right)
    if op is Op.GT:
        return bool(left > right)
    return bool(left >= right)


def rhs_values(obj: Any, rhs: Path | Literal | None, bindings: Bindings) -> list[Any]:
    if isinstance(rhs, Literal):
        return [rhs.value]
    if rhs is None:
        return []
    return [value for _place, value in expand(obj, rhs, bindings)]


def _test_holds(obj: Any, test: ResourceTest, bindings: Bindings) -> bool:
    found = expand(obj, test.path, bindings)
    if test.check is Check.EXISTS:
        return bool(found)
    if test.check is Check.NOT_EXISTS:
        return not found
    assert test.op is not None  # the parser sets it for comparisons
    rights = rhs_values(obj, test.rhs, bindings)
    return any(compare(left, test.op, right) for _place, left in found for right in rights)


def _var_holds(obj: Any, test: VarTest, bindings: Bindings) -> bool:
    candidates = expand(obj, test.base, bindings)
    if test.test.check is Check.NOT_EXISTS:
        # SimKube tests the absence over every candidate at once: it holds when none has the field.
        holds = all(_test_holds(obj, test.test, {**bindings, test.var: [c]}) for c in candidates)
        if holds:
            bindings[test.var] = candidates
        return holds
    matched = [c for c in candidates if _test_holds(obj, test.test, {**bindings, test.var: [c]})]
    if matched:
        bindings[test.var] = matched
    return bool(matched)


def _time_holds(test: TimeTest, ts: int, start: int) -> bool:
    return compare(ts, test.op, start + test.seconds if test.relative else test.seconds)


def selected(
    obj: Any, selector: tuple[Condition, ...], ts: int, start: int, bindings: Bindings | None = None
) -> Bindings | None:
    """The variables bound if every condition holds for ``obj`` at ``ts``, else None."""
    bound: Bindings = {} if bindings is None else bindings
    for condition in selector:
        if isinstance(condition, TimeTest):
            holds = _time_holds(condition, ts, start)
        elif isinstance(condition, VarTest):
            holds = _var_holds(obj, condition, bound)
        else:
            holds = _test_holds(obj, condition, bound)
        if not holds:
            return None
    return bound


# ---- effects ------------------------------------------------------------------------------------
def _sort_key(place: Place) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, k) if isinstance(k, int) else (1, k) for k in place)


def remove_places(obj: Any, places: list[Place]) -> int:
    """Delete every place (last array elements first); how many were deleted."""
    removed = 0
    for place in sorted(set(places), key=_sort_key, reverse=True):
        if not place:
            continue
        exists, parent = _get(obj, place[:-1])
        removed += exists and _delete(parent, place[-1])
    return removed


_ABSENT = object()


def _delete(parent: Any, key: str | int) -> bool:
    if isinstance(parent, dict):
        return isinstance(key, str) and parent.pop(key, _ABSENT) is not _ABSENT
    if isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        del parent[key]
        return True
    return False


def _assign(parent: Any, key: Segment, value: Any) -> int:
    if isinstance(parent, dict) and not isinstance(key, type(WILDCARD)):
        parent[str(key)] = copy_json(value)
        return 1
    if isinstance(parent, list):
        if key is WILDCARD:
            for i in range(len(parent)):
                parent[i] = copy_json(value)
            return len(parent)
        index = _index(key)
        if index is not None and index < len(parent):
            parent[index] = copy_json(value)
            return 1
        if index is not None and index == len(parent):
            parent.append(copy_json(value))
            return 1
    return 0


def _create_parents(obj: Any, segments: tuple[Segment, ...]) -> Any:
    node = obj
    for segment in segments:
        if isinstance(node, dict) and isinstance(segment, str):
            if not isinstance(node.get(segment), dict | list):
                node[segment] = {}
            node = node[segment]
        else:
            found = _children((), node, segment)
            if not found:
                return None
            node = found[0][1]
    return node


def modify_places(obj: Any, target: Path, value: Any, bindings: Bindings) -> int:
    """Write ``value`` wherever ``target`` names; how many places were written."""
    if not target.segments:  # "$x = value": the bound places themselves
        written = 0
        for place, _old in bindings.get(target.var or "", []):
            exists, parent = _get(obj, place[:-1])
            if exists and place:
                written += _assign(parent, place[-1], value)
        return written
    parents_path, last = target.segments[:-1], target.segments[-1]
    if target.var is None and WILDCARD not in parents_path:
        parent = _create_parents(obj, parents_path)
        return 0 if parent is None else _assign(parent, last, value)
    written = 0
    for place, _node in expand(obj, target, bindings, parents_path):
        exists, parent = _get(obj, place)  # re-read: earlier writes may have replaced the node
        if exists:
            written += _assign(parent, last, value)
    return written


def apply_effect(command: Command, obj: dict[str, Any], bindings: Bindings) -> int:
    """The remove or modify of ``command`` on ``obj`` (changed in place), its selector having bound
    ``bindings``; how many places changed. ``delete`` is the caller's: it drops the whole object."""
    assert command.target is not None  # remove and modify always have one
    if command.action is Action.REMOVE:
        return remove_places(obj, [place for place, _v in expand(obj, command.target, bindings)])
    values = rhs_values(obj, command.value, bindings)
    if isinstance(command.value, Path) and len(values) != 1:
        if not values:
            return 0  # nothing to copy from: the object is left as it is
        raise SkelRuntimeError(
            f"line {command.line}: {command.value.text} has {len(values)} values in "
            f"{_describe(obj)}; an assignment needs exactly one"
        )
    return modify_places(obj, command.target, values[0], bindings)


def _describe(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
    return f"{obj.get('kind', 'object')} {ns}{meta.get('name', '?')}"
