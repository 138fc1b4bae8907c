"""JSON pointers (RFC 6901) with SimKube's ``*`` extension: a ``*`` segment matches every array element.

Used for ``podSpecTemplatePaths`` (``/spec/tasks/*/template``) and for redaction paths. ``""`` points at
the whole document. Functions here never raise on a path that does not match: they find nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

WILDCARD = "*"


def parse_pointer(pointer: str) -> tuple[str, ...]:
    """The unescaped segments of ``pointer``; raises ValueError unless it is ``""`` or starts with ``/``."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer {pointer!r} must be empty or start with '/'")
    return tuple(seg.replace("~1", "/").replace("~0", "~") for seg in pointer[1:].split("/"))


def _child(node: Any, segment: str) -> Iterator[Any]:
    if isinstance(node, dict):
        if segment in node:
            yield node[segment]
    elif isinstance(node, list):
        if segment == WILDCARD:
            yield from node
        elif segment.isdigit() and int(segment) < len(node):
            yield node[int(segment)]


def resolve(doc: Any, pointer: str) -> list[Any]:
    """Every value ``pointer`` reaches in ``doc`` (several with ``*``, none if the path is absent)."""
    nodes = [doc]
    for segment in parse_pointer(pointer):
        nodes = [child for node in nodes for child in _child(node, segment)]
    return nodes


def parents(doc: Any, pointer: str) -> list[tuple[Any, str]]:
    """Each (container, last segment) pair whose ``container[last]`` ``pointer`` reaches; [] for ``""``."""
    segments = parse_pointer(pointer)
    if not segments:
        return []
    nodes = [doc]
    for segment in segments[:-1]:
        nodes = [child for node in nodes for child in _child(node, segment)]
    last = segments[-1]
    found: list[tuple[Any, str]] = []
    for node in nodes:
        if isinstance(node, dict) and last in node:
            found.append((node, last))
        elif isinstance(node, list):
            if last == WILDCARD:
                found.extend((node, str(i)) for i in range(len(node)))
            elif last.isdigit() and int(last) < len(node):
                found.append((node, last))
    return found
