"""A parsed SKEL program, applied object by object by :func:`pipeline.validate.apply.apply_transform` and
:func:`pipeline.validate.apply_segment.apply_transform_to_segment` (which recompute hashes and index)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.model.sanitize import copy_json
from pipeline.validate.skel.ast import Action, Command
from pipeline.validate.skel.engine import apply_effect, selected
from pipeline.validate.skel.parse import parse_skel

SKEL_SUFFIX = ".skel"


@dataclass(frozen=True)
class SkelProgram:
    """The statements of a ``.skel`` file; ``source`` names it in messages."""

    commands: tuple[Command, ...]
    source: str = "<skel>"

    @property
    def creates(self) -> list[dict[str, Any]]:
        """SKEL has no ``insert`` (SimKube's grammar leaves it out): a program never adds objects."""
        return []

    def edit(self, obj: dict[str, Any], ts: int, start: int) -> tuple[dict[str, Any] | None, bool]:
        """Every statement, in order, on ``obj`` of an event at ``ts`` in a trace starting at ``start``
        (Unix seconds): (a new object, or ``obj`` itself when unchanged, or None when deleted; changed)."""
        current = obj
        changed = False
        for command in self.commands:
            bindings = selected(current, command.selector, ts, start)
            if bindings is None:
                continue
            if command.action is Action.DELETE:
                return None, True
            if current is obj:
                current = copy_json(obj)  # the input trace is never modified
            changed |= apply_effect(command, current, bindings) > 0
        return current, changed


def parse_program(text: str, source: str = "<skel>") -> SkelProgram:
    """The program in ``text`` (SkelSyntaxError with line and column when it does not parse)."""
    return SkelProgram(parse_skel(text, source), source)


def load_skel(path: Path) -> SkelProgram:
    """Read and parse a ``.skel`` file. Line ends are kept as written: a string may hold a carriage
    return (an object's name, say), which reading in text mode would turn into a newline."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the SKEL file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (SKEL programs are UTF-8 text)") from None
    return parse_program(text, str(path))
