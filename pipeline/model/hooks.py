"""Hooks as SimKube names them: commands at four points of a simulation's run, read from ``--hook``
flags, a hooks file or a Simulation's ``spec.hooks``. Run by :mod:`pipeline.replay.hooks`; here so the
controller reads a Simulation's hooks with the same rules."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.model.errors import ConfigError

HOOK_POINTS = ("preStart", "preRun", "postRun", "postStop")
"""SimKube's hook points, in the order a run reaches them."""
PRE_POINTS = frozenset({"preStart", "preRun"})


@dataclass(frozen=True, slots=True)
class Hook:
    """One command: ``argv`` run without a shell (``sh -c '...'`` for one)."""

    point: str
    argv: tuple[str, ...]
    ignore_failure: bool = False

    def __post_init__(self) -> None:
        if self.point not in HOOK_POINTS:
            raise ConfigError(f"hook point {self.point!r} is not one of {', '.join(HOOK_POINTS)}")
        if not self.argv or not self.argv[0]:
            raise ConfigError(f"a {self.point} hook needs a command")

    @property
    def name(self) -> str:
        return f"{self.point} hook `{shlex.join(self.argv)}`"


def parse_hook_flag(text: str, *, ignore_failure: bool = False) -> Hook:
    """``--hook POINT=COMMAND``: COMMAND split as a shell would split it (no shell runs it)."""
    point, sep, command = text.partition("=")
    if not sep:
        raise ConfigError(f"--hook {text!r}: expected POINT=COMMAND, POINT one of {', '.join(HOOK_POINTS)}")
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:
        raise ConfigError(f"--hook {text!r}: {exc}") from None
    return Hook(point.strip(), argv, ignore_failure)


def parse_hooks_config(config: Any, where: str) -> tuple[Hook, ...]:
    """SimKube's hooks config (``preStartHooks``, ``preRunHooks``, ``postRunHooks``, ``postStopHooks``,
    each a list of ``{cmd, args, ignoreFailure}``), as a hooks file or a Simulation's ``spec.hooks``."""
    if config is None:
        return ()
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"{where}: must be a mapping of preStartHooks, preRunHooks, postRunHooks, postStopHooks"
        )
    known = {f"{p}Hooks": p for p in HOOK_POINTS}
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(map(str, unknown))}; expected {', '.join(known)}"
        )
    hooks: list[Hook] = []
    for key, point in known.items():
        entries = config.get(key) or []
        if not isinstance(entries, list):
            raise ConfigError(f"{where}.{key}: must be a list of {{cmd, args}}")
        for i, entry in enumerate(entries):
            hooks.append(_hook_entry(entry, point, f"{where}.{key}[{i}]"))
    return tuple(hooks)


def _hook_entry(entry: Any, point: str, where: str) -> Hook:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("cmd"), str) or not entry["cmd"]:
        raise ConfigError(f"{where}: needs cmd (a command name), e.g. {{cmd: kubectl, args: [get, nodes]}}")
    args = entry.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
        raise ConfigError(f"{where}.args: must be a list of strings")
    if entry.get("sendSim"):
        raise ConfigError(
            f"{where}.sendSim: kubetape does not pipe the Simulation to a hook's stdin; "
            "read KUBETAPE_* from its environment instead (see docs/replay.md)"
        )
    ignore = entry.get("ignoreFailure", False)
    if not isinstance(ignore, bool):
        raise ConfigError(f"{where}.ignoreFailure: {ignore!r} must be true or false")
    return Hook(point, (entry["cmd"], *(str(a) for a in args)), ignore)
