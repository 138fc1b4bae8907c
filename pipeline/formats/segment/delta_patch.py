"""Patches of one decoded value against another (:func:`diff`, :func:`apply_patch`): how a delta table's
``obj`` and ``ext`` columns store a version as the change from its base.

Apart from :mod:`.delta` because they are a format of their own, on plain msgpack values, that know
nothing of rows, columns or events: the encoder makes patches, :mod:`.delta_decode` applies them, and
the C row encoder (``_deltarows.c``) computes the same patches by the same rules.
"""

from __future__ import annotations

from typing import Any

from pipeline.model.errors import FormatError

_REPLACE, _MAP_PATCH, _LIST_PATCH = 0, 1, 2
MAX_PATCH_DEPTH = 64
"""Patches nest at most this deep (Kubernetes objects are far shallower): a crafted patch cannot exhaust
the stack."""


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same type at the top (``1 == True == 1.0`` in Python, not in msgpack); deeper
    differences of type alone are caught by the encoder's check of every rebuilt row."""
    return a is b or (type(a) is type(b) and a == b)


def diff(base: Any, new: Any) -> list[Any]:
    """A patch that turns ``base`` into ``new``: ``[0, value]`` replaces; ``[1, {key: patch}, [deleted
    keys]]`` patches a map (kept keys in the base's order, then added keys in ``new``'s order: any other
    order is a replacement); ``[2, {index: patch}]`` patches a list of the same length."""
    if type(base) is dict and type(new) is dict:
        changed: dict[Any, Any] = {}
        added: list[Any] = []
        for k, v in new.items():
            if k in base:
                if not _same(base[k], v):
                    changed[k] = diff(base[k], v)
            else:
                changed[k] = [_REPLACE, v]
                added.append(k)
        deleted = [k for k in base if k not in new]
        kept = [k for k in base if k in new] if deleted else list(base)
        if kept + added != list(new):
            return [_REPLACE, new]
        return [_MAP_PATCH, changed, deleted]
    if type(base) is list and type(new) is list and len(base) == len(new):
        items = {i: diff(a, b) for i, (a, b) in enumerate(zip(base, new, strict=True)) if not _same(a, b)}
        if 2 * len(items) > len(new) + 1:  # a list of one changed item is still patched
            return [_REPLACE, new]
        return [_LIST_PATCH, items]
    return [_REPLACE, new]


def apply_patch(base: Any, patch: Any, where: str, depth: int = 0) -> Any:
    """``base`` changed by ``patch`` (see :func:`diff`); the base is not modified (unchanged parts are
    shared). FormatError naming ``where`` if the patch is malformed or does not fit the base."""
    if depth > MAX_PATCH_DEPTH:
        raise FormatError(f"{where}: patch nested deeper than {MAX_PATCH_DEPTH} levels")
    if type(patch) is not list or not patch or type(patch[0]) is not int:
        raise FormatError(f"{where}: malformed patch {str(patch)[:80]!r}")
    tag = patch[0]
    if tag == _REPLACE and len(patch) == 2:
        return patch[1]
    if tag == _MAP_PATCH and len(patch) == 3 and type(patch[1]) is dict and type(patch[2]) is list:
        if type(base) is not dict:
            raise FormatError(f"{where}: a map patch does not apply to a base {type(base).__name__}")
        changed, deleted = patch[1], patch[2]
        gone = set()
        for k in deleted:
            if type(k) is not str or k not in base:  # decoded map keys of objects are text
                raise FormatError(f"{where}: the patch deletes key {str(k)[:80]!r}, which the base lacks")
            gone.add(k)
        out = {}
        for k, v in base.items():
            if k not in gone:
                out[k] = apply_patch(v, changed[k], where, depth + 1) if k in changed else v
        for k, p in changed.items():
            if k in gone:
                raise FormatError(f"{where}: the patch both deletes and changes key {str(k)[:80]!r}")
            if k not in base:
                if type(p) is not list or len(p) != 2 or p[0] != _REPLACE:
                    raise FormatError(f"{where}: the patch changes key {str(k)[:80]!r}, which the base lacks")
                out[k] = p[1]
        return out
    if tag == _LIST_PATCH and len(patch) == 2 and type(patch[1]) is dict:
        if type(base) is not list:
            raise FormatError(f"{where}: a list patch does not apply to a base {type(base).__name__}")
        items = list(base)
        for i, p in patch[1].items():
            if type(i) is not int or not 0 <= i < len(items):
                raise FormatError(f"{where}: the patch changes item {str(i)[:20]} of a list of {len(items)}")
            items[i] = apply_patch(items[i], p, where, depth + 1)
        return items
    raise FormatError(f"{where}: malformed patch (tag {tag!r})")
