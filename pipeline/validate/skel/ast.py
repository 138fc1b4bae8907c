"""The parsed form of a SKEL program (SimKube's trace-editing language; see :mod:`.parse`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Wildcard:
    """``[*]`` in a path: every element of an array."""

    def __repr__(self) -> str:
        return "[*]"


WILDCARD = Wildcard()
Segment = str | int | Wildcard
"""A map key (``.name`` or ``."quoted/key"``), an array index (``[3]``) or ``[*]``. A key of digits
also indexes an array, as in a JSON pointer."""


class Op(enum.Enum):
    EQ = "=="
    NE = "!="
    LE = "<="
    GE = ">="
    LT = "<"
    GT = ">"


@dataclass(frozen=True, slots=True)
class Path:
    """``spec.template.spec.containers[*].image`` or ``$x.name``: an optional variable, then segments."""

    var: str | None
    segments: tuple[Segment, ...]
    text: str


@dataclass(frozen=True, slots=True)
class TimeTest:
    """``@t OP value``: the event's timestamp (Unix seconds) against an absolute timestamp or, when
    ``relative``, the trace's first timestamp plus ``seconds``."""

    op: Op
    seconds: int
    relative: bool


class Check(enum.Enum):
    EXISTS = "exists"
    NOT_EXISTS = "!exists"
    COMPARE = "compare"


@dataclass(frozen=True, slots=True)
class ResourceTest:
    """``exists(path)``, ``!exists(path)`` or ``path OP rhs`` (rhs a value or a path)."""

    check: Check
    path: Path
    op: Op | None = None
    rhs: Path | Literal | None = None


@dataclass(frozen=True, slots=True)
class Literal:
    """A number, a string or a boolean."""

    value: Any


@dataclass(frozen=True, slots=True)
class VarTest:
    """``$x := base | test``: ``$x`` is bound to the places ``base`` reaches for which ``test`` holds."""

    var: str
    base: Path
    test: ResourceTest


Condition = TimeTest | ResourceTest | VarTest


class Action(enum.Enum):
    REMOVE = "remove"
    MODIFY = "modify"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Command:
    """One statement: its selector (``()`` = every object: no selector or ``*``), what it does, and where
    it starts in the file (for messages)."""

    action: Action
    selector: tuple[Condition, ...]
    target: Path | None = None
    value: Path | Literal | None = None
    line: int = 0
    column: int = 0
