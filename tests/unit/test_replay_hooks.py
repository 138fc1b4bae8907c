"""Hooks at SimKube's four points: run as real subprocesses, in order, with the run's environment, their
output in the run directory; a failing pre hook stops the run by name, a failing post hook is reported.

The replay itself is replaced by a session returning an empty report (the one seam: hooks wrap
:meth:`ReplayRun.session`); everything else is the real :meth:`ReplayRun.run`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.controller.spec import SimulationSpecError, parse_spec
from pipeline.model.errors import ConfigError
from pipeline.model.hooks import Hook, parse_hook_flag, parse_hooks_config
from pipeline.replay.hooks import HookError, Hooks, read_hooks_file
from pipeline.replay.report.report import ReplayReport
from pipeline.replay.run import ReplayRun, ReplaySpec, ReportOutput, TargetCluster, TraceFile
from pipeline.replay.settings import ReplaySettings
from services.cli import build_parser
from services.commands.replay import spec_from_args
from tests.fakes.replay_job import job_args

RECORD = (
    'echo "$KUBETAPE_HOOK_POINT $KUBETAPE_SPEED $KUBETAPE_REPLAY_NAME $KUBECONFIG"'
    ' >> "$KUBETAPE_RUN_DIR/order"'
)


def sh(point: str, script: str, *, ignore_failure: bool = False) -> Hook:
    return Hook(point, ("sh", "-c", script), ignore_failure)


@dataclass
class _Session:
    calls: list[str]

    async def run(self, **_: Any) -> ReplayReport:
        self.calls.append("replay")
        return ReplayReport("r", "trace", 10.0)


class _RunWithoutCluster(ReplayRun):
    """ReplayRun with the replay (prepare, connect, replay) replaced by an empty one."""

    calls: list[str]

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Any]:
        self.calls = [*getattr(self, "calls", []), "connect"]
        try:
            yield _Session(self.calls)
        finally:
            self.calls.append("disconnect")


def _spec(tmp_path: Path, *hooks: Hook, timeout_s: float = 60.0) -> ReplaySpec:
    return ReplaySpec(
        TraceFile(str(tmp_path / "missing.sktrace")),
        ReplaySettings(speed=10.0, replay_name="demo"),
        TargetCluster(kubeconfig=tmp_path / "kubeconfig"),
        report=ReportOutput(json_path=tmp_path / "report.json"),
        hooks=Hooks(hooks, tmp_path / "run", timeout_s),
    )


def _order(tmp_path: Path) -> list[str]:
    return (tmp_path / "run" / "order").read_text().splitlines()


async def test_hooks_run_at_the_four_points_in_order_with_the_runs_environment(tmp_path: Path) -> None:
    points = ["postStop", "preRun", "preStart", "postRun", "preStart"]  # given out of order
    run = _RunWithoutCluster(_spec(tmp_path, *(sh(p, RECORD) for p in points)))

    report = await run.run()

    kubeconfig = (tmp_path / "kubeconfig").resolve()
    assert _order(tmp_path) == [
        f"{p} 10 demo {kubeconfig}" for p in ["preStart", "preStart", "preRun", "postRun", "postStop"]
    ]
    assert run.calls == ["connect", "replay", "disconnect"]
    written = json.loads((tmp_path / "report.json").read_text())
    assert [h["point"] for h in written["hooks"]] == ["preStart", "preStart", "preRun", "postRun", "postStop"]
    assert all(h["ok"] and h["exit_code"] == 0 for h in report.hooks)
    logs = sorted(p.name for p in (tmp_path / "run").glob("hook-*.log"))
    assert logs == [
        "hook-01-preStart-sh.log",
        "hook-02-preStart-sh.log",
        "hook-03-preRun-sh.log",
        "hook-04-postRun-sh.log",
        "hook-05-postStop-sh.log",
    ]


async def test_a_hooks_stdout_and_stderr_go_to_its_log(tmp_path: Path) -> None:
    run = _RunWithoutCluster(_spec(tmp_path, sh("preRun", "echo out; echo err >&2")))
    await run.run()
    assert (tmp_path / "run" / "hook-01-preRun-sh.log").read_text().split() == ["out", "err"]


async def test_a_failing_pre_start_hook_stops_the_run_before_the_trace_is_read(tmp_path: Path) -> None:
    # the real ReplayRun: its trace does not exist, so getting past the hook would fail differently
    spec = _spec(tmp_path, sh("preStart", "exit 7"), sh("preStart", RECORD), sh("postStop", RECORD))
    with pytest.raises(HookError, match=r"preStart hook `sh -c 'exit 7'` failed with exit code 7"):
        await ReplayRun(spec).run()
    assert not (tmp_path / "run" / "order").exists()


async def test_a_failing_pre_run_hook_stops_the_replay_and_post_stop_still_runs(tmp_path: Path) -> None:
    run = _RunWithoutCluster(
        _spec(tmp_path, sh("preRun", "exit 3"), sh("postRun", RECORD), sh("postStop", RECORD))
    )
    with pytest.raises(HookError, match=r"preRun hook .* exit code 3") as failed:
        await run.run()
    assert "hook-01-preRun-sh.log" in str(failed.value)
    assert run.calls == ["connect", "disconnect"]
    assert [line.split()[0] for line in _order(tmp_path)] == ["postStop"]


async def test_a_pre_hook_ignoring_failure_lets_the_run_go_on_and_is_reported(tmp_path: Path) -> None:
    run = _RunWithoutCluster(_spec(tmp_path, sh("preRun", "exit 4", ignore_failure=True)))
    report = await run.run()
    assert run.calls == ["connect", "replay", "disconnect"]
    assert report.hooks[0]["exit_code"] == 4
    assert not report.hooks[0]["ok"]


async def test_a_failing_post_hook_is_reported_and_the_runs_result_stands(tmp_path: Path) -> None:
    run = _RunWithoutCluster(_spec(tmp_path, sh("postRun", "exit 5"), sh("postStop", RECORD)))
    report = await run.run()
    assert run.calls == ["connect", "replay", "disconnect"]
    assert [line.split()[0] for line in _order(tmp_path)] == ["postStop"]
    assert report.hooks[0]["problem"] == "failed with exit code 5"
    assert "HOOK FAILED postRun sh -c exit 5: failed with exit code 5" in report.summary()
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["hooks"][0]["ok"] is False


async def test_a_hook_past_its_timeout_is_killed_and_fails_by_name(tmp_path: Path) -> None:
    run = _RunWithoutCluster(_spec(tmp_path, sh("preStart", "sleep 600"), timeout_s=0.2))
    with pytest.raises(HookError, match=r"preStart hook .*sleep 600.* timed out after 0.2 s"):
        await run.run()


async def test_a_command_that_does_not_exist_fails_by_name(tmp_path: Path) -> None:
    run = _RunWithoutCluster(_spec(tmp_path, Hook("preStart", ("no-such-kubetape-hook",))))
    with pytest.raises(HookError, match=r"preStart hook `no-such-kubetape-hook` could not start"):
        await run.run()


# ---- where hooks come from -----------------------------------------------------------------------
SIMKUBE_HOOKS = """
preStartHooks:
  - cmd: kubectl
    args: [create, namespace, monitoring-hd]
    ignoreFailure: true
postStopHooks:
  - cmd: kubectl
    args: [delete, namespace, monitoring-hd]
"""


def test_a_simkube_hooks_file_reads_as_written(tmp_path: Path) -> None:
    path = tmp_path / "hooks.yml"
    path.write_text(SIMKUBE_HOOKS)
    assert read_hooks_file(path) == (
        Hook("preStart", ("kubectl", "create", "namespace", "monitoring-hd"), ignore_failure=True),
        Hook("postStop", ("kubectl", "delete", "namespace", "monitoring-hd")),
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"preBootHooks": []}, r"where: unknown key\(s\) preBootHooks"),
        ({"preRunHooks": [{"args": ["x"]}]}, r"where\.preRunHooks\[0\]: needs cmd"),
        ({"preRunHooks": [{"cmd": "x", "sendSim": True}]}, r"preRunHooks\[0\]\.sendSim: .*KUBETAPE_"),
        (
            {"postRunHooks": [{"cmd": "x", "ignoreFailure": "yes"}]},
            r"ignoreFailure: 'yes' must be true or false",
        ),
    ],
)
def test_a_bad_hooks_config_names_the_entry(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_hooks_config(config, "where")


@pytest.mark.parametrize(
    ("text", "message"),
    [("preRun", "POINT=COMMAND"), ("preBoot=ls", "not one of preStart"), ("preRun=", "needs a")],
)
def test_a_bad_hook_flag_says_what_to_write(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_hook_flag(text)


def test_replay_flags_give_hooks_files_first_then_flags_with_logs_beside_the_report(
    tmp_path: Path,
) -> None:
    hooks_file = tmp_path / "hooks.yml"
    hooks_file.write_text(SIMKUBE_HOOKS)
    args = build_parser().parse_args(
        [
            "replay",
            "--trace=t",
            "--hook=preRun=sh -c 'echo a b'",
            "--hook-ignoring-failure=postRun=true",
            f"--hooks={hooks_file}",
            f"--report-json={tmp_path / 'out' / 'report.json'}",
        ]
    )
    hooks = spec_from_args(args).hooks
    assert [(h.point, h.argv, h.ignore_failure) for h in hooks.hooks] == [
        ("preStart", ("kubectl", "create", "namespace", "monitoring-hd"), True),
        ("postStop", ("kubectl", "delete", "namespace", "monitoring-hd"), False),
        ("preRun", ("sh", "-c", "echo a b"), False),
        ("postRun", ("true",), True),
    ]
    assert hooks.run_dir == tmp_path / "out"


def test_a_simulations_hooks_reach_its_replay_job_unchanged() -> None:
    spec = parse_spec(
        {
            "spec": {
                "source": {"traceURL": "/t"},
                "hooks": {
                    "preRunHooks": [{"cmd": "sh", "args": ["-c", "echo 'it''s' \"$X\""]}],
                    "postRunHooks": [{"cmd": "kubectl", "args": ["delete", "nodes", "-l", "type=virtual"]}],
                    "preStartHooks": [{"cmd": "true", "ignoreFailure": True}],
                },
            }
        }
    )
    args = job_args("demo", 1, spec)
    assert spec_from_args(args).hooks.hooks == spec.hooks
    assert [h.point for h in spec.hooks] == ["preStart", "preRun", "postRun"]
    assert args.run_dir == Path("/tmp/kubetape-run")


def test_a_simulations_bad_hook_is_a_spec_error_naming_the_field() -> None:
    with pytest.raises(SimulationSpecError, match=r"spec\.hooks\.postStopHooks\[0\]: needs cmd"):
        parse_spec({"spec": {"source": {"traceURL": "/t"}, "hooks": {"postStopHooks": [{}]}}})
