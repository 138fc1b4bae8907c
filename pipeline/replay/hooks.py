"""Commands run around a replay at SimKube's four hook points.

``preStart`` runs before the run is prepared (before the trace is read and the autoscaler restarted),
``preRun`` once connected to the simulated cluster, just before the first event, ``postRun`` once the
replay (and its cleanup) has ended, ``postStop`` after the session is closed, before the report is
written. Each hook is a subprocess with a timeout; its stdout and stderr go to one log file in the run
directory, numbered in the order the hooks ran. A hook does not inherit kubetape's environment, which
holds the Kafka and S3 credentials: it gets :data:`INHERITED` from it, the run's ``KUBETAPE_*`` context
and the names the user lists (``--hook-pass-env``), nothing else. A failing pre hook stops the run
(unless it is marked ``ignoreFailure``); a failing post hook is recorded in the report and the run's own
result stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.model.errors import ConfigError
from pipeline.model.hooks import HOOK_POINTS, PRE_POINTS, Hook, parse_hooks_config

DEFAULT_TIMEOUT_S = 300.0
INHERITED = ("PATH", "HOME", "LANG", "TZ", "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
"""What a hook takes from kubetape's environment unasked: a shell's basics, and how kubectl finds the
simulated cluster when the run was given no ``--kubeconfig`` (the default kubeconfig, or in a pod the
service account's API server address). ``--kubeconfig`` sets ``KUBECONFIG`` to its file instead."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class HookError(ConfigError):
    """A pre hook failed: the run does not start."""


@dataclass(frozen=True, slots=True)
class Hooks:
    """A run's hooks, in the order given; ``run_dir`` gets their logs; ``timeout_s`` bounds each one;
    ``pass_env`` names the variables of kubetape's environment every hook gets besides :data:`INHERITED`."""

    hooks: tuple[Hook, ...] = ()
    run_dir: Path | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    pass_env: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ConfigError(f"--hook-timeout must be positive, got {self.timeout_s:g}")
        for name in self.pass_env:
            if not _ENV_NAME.fullmatch(name):
                raise ConfigError(
                    f"--hook-pass-env {name!r} is not a variable name; give one name, e.g. AWS_PROFILE"
                )

    def at(self, point: str) -> list[Hook]:
        return [h for h in self.hooks if h.point == point]


@dataclass(frozen=True, slots=True)
class HookResult:
    hook: Hook
    exit_code: int | None
    """None: killed at the timeout (or could not be started)."""
    log: Path
    problem: str | None = None

    @property
    def failed(self) -> bool:
        return self.problem is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "point": self.hook.point,
            "command": list(self.hook.argv),
            "exit_code": self.exit_code,
            "log": str(self.log),
            "ok": not self.failed,
            "problem": self.problem,
        }


def read_hooks_file(path: Path) -> tuple[Hook, ...]:
    """A SimKube hooks file (YAML)."""
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--hooks {path}: {exc}") from None
    return parse_hooks_config(config, f"--hooks {path}")


class HookRunner:
    """Runs a :class:`Hooks` at each point, numbering the logs across the run; keeps every result."""

    def __init__(self, hooks: Hooks, env: Mapping[str, str]) -> None:
        self._hooks = hooks
        self._env = dict(env)
        self.results: list[HookResult] = []

    @property
    def run_dir(self) -> Path:
        return self._hooks.run_dir or Path.cwd()

    def _inherited(self) -> dict[str, str]:
        """The part of kubetape's environment a hook gets: :data:`INHERITED` and the names listed."""
        names = (*INHERITED, *self._hooks.pass_env)
        return {name: os.environ[name] for name in names if name in os.environ}

    async def run(self, point: str) -> list[HookResult]:
        """Run ``point``'s hooks in order. At a pre point, the first failure not ignored raises
        :class:`HookError` with the hook's name and exit code (the rest of the point's hooks do not run)."""
        assert point in HOOK_POINTS, point
        done: list[HookResult] = []
        for hook in self._hooks.at(point):
            result = await self._run_one(hook)
            self.results.append(result)
            done.append(result)
            if result.failed and point in PRE_POINTS and not hook.ignore_failure:
                raise HookError(f"{hook.name} {result.problem} (its output: {result.log}); the run stops")
        return done

    async def _run_one(self, hook: Hook) -> HookResult:
        run_dir = self.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(hook.argv[0]).name)[:40]
        log = run_dir / f"hook-{len(self.results) + 1:02d}-{hook.point}-{slug}.log"
        env = {**self._inherited(), **self._env}
        env |= {"KUBETAPE_HOOK_POINT": hook.point, "KUBETAPE_RUN_DIR": str(run_dir)}
        with log.open("wb") as out:
            try:
                process = await asyncio.create_subprocess_exec(
                    *hook.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    env=env,
                    cwd=run_dir,
                    start_new_session=True,  # the timeout ends the hook's children too
                )
            except OSError as exc:
                return HookResult(hook, None, log, f"could not start: {exc}")
            try:
                code = await asyncio.wait_for(process.wait(), self._hooks.timeout_s)
            except TimeoutError:
                _kill_group(process.pid)
                await process.wait()
                return HookResult(
                    hook, None, log, f"timed out after {self._hooks.timeout_s:g} s and was killed"
                )
            except asyncio.CancelledError:
                _kill_group(process.pid)
                raise
        if code != 0:
            return HookResult(hook, code, log, f"failed with exit code {code}")
        return HookResult(hook, code, log)


def _kill_group(pid: int) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_environment(
    *, speed: float, replay_name: str, kubeconfig: Path | None, context: str | None, source: str
) -> dict[str, str]:
    """What a hook learns about its run (``KUBETAPE_RUN_DIR``, ``KUBETAPE_HOOK_POINT`` added per hook)."""
    env = {
        "KUBETAPE_SPEED": f"{speed:g}",
        "KUBETAPE_REPLAY_NAME": replay_name,
        "KUBETAPE_SOURCE": source,
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig.resolve())
        env["KUBETAPE_KUBECONFIG"] = str(kubeconfig.resolve())
    if context is not None:
        env["KUBETAPE_CONTEXT"] = context
    return env


def hooks_from(flags: Sequence[Hook], files: Sequence[Path]) -> tuple[Hook, ...]:
    """The hooks files' hooks first, then the ``--hook`` flags', each in the order given."""
    out: list[Hook] = []
    for path in files:
        out += read_hooks_file(path)
    return (*out, *flags)
