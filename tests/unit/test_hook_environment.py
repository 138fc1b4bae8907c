"""A hook is a real process with a minimal environment: the shell's basics, the run's KUBETAPE_* context
and KUBECONFIG, and the variables the user names with --hook-pass-env; never kubetape's Kafka or S3
credentials, which live in kubetape's own environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.model.errors import ConfigError
from pipeline.model.hooks import Hook
from pipeline.replay.hooks import HookRunner, Hooks, run_environment
from services.cli import build_parser
from services.commands.replay import spec_from_args

SECRETS = {
    "KUBETAPE_KAFKA_SASL_PASSWORD": "kafka-pa55-Q1",
    "AWS_SECRET_ACCESS_KEY": "s3-secret-Q2",
    "KUBETAPE_KAFKA_SASL_USERNAME": "watcher-Q3",
}


async def _env_of_hook(tmp_path: Path, pass_env: tuple[str, ...]) -> dict[str, str]:
    script = tmp_path / "print-env.sh"
    script.write_text('#!/bin/sh\nenv > "$KUBETAPE_RUN_DIR/env.txt"\n')
    script.chmod(0o755)
    kubeconfig = tmp_path / "sim.kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    hooks = Hooks((Hook("preRun", (str(script),)),), tmp_path / "run", 60.0, pass_env)
    context = run_environment(
        speed=10.0, replay_name="demo", kubeconfig=kubeconfig, context="kwok-sim", source="trace t"
    )
    (result,) = await HookRunner(hooks, context).run("preRun")
    assert not result.failed, result.log.read_text()
    lines = (tmp_path / "run" / "env.txt").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


async def test_a_hook_gets_no_credential_but_the_run_context_and_the_listed_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOOK_REGION", "eu-west-1")
    monkeypatch.setenv("UNLISTED_SETTING", "x")
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("KUBECONFIG", "/home/user/.kube/production")  # the run's --kubeconfig wins

    env = await _env_of_hook(tmp_path, ("HOOK_REGION", "KUBETAPE_KAFKA_SASL_USERNAME"))

    shown = "\n".join(f"{k}={v}" for k, v in env.items())
    assert SECRETS["KUBETAPE_KAFKA_SASL_PASSWORD"] not in shown
    assert SECRETS["AWS_SECRET_ACCESS_KEY"] not in shown
    assert "UNLISTED_SETTING" not in env
    assert env["HOOK_REGION"] == "eu-west-1"  # listed
    assert env["KUBETAPE_KAFKA_SASL_USERNAME"] == "watcher-Q3"  # listed, so given
    assert env["KUBECONFIG"] == str((tmp_path / "sim.kubeconfig").resolve())
    assert env["KUBETAPE_CONTEXT"] == "kwok-sim"
    assert env["KUBETAPE_HOOK_POINT"] == "preRun"
    assert env["KUBETAPE_REPLAY_NAME"] == "demo"
    assert env["TZ"] == "UTC"
    assert "PATH" in env


async def test_without_kubeconfig_a_hook_keeps_the_default_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/home/user/.kube/sim")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    script = tmp_path / "print-env.sh"
    script.write_text('#!/bin/sh\necho "$KUBECONFIG $KUBERNETES_SERVICE_HOST" > "$KUBETAPE_RUN_DIR/out"\n')
    script.chmod(0o755)
    hooks = Hooks((Hook("postRun", (str(script),)),), tmp_path / "run", 60.0)
    context = run_environment(speed=1.0, replay_name="r", kubeconfig=None, context=None, source="s")
    await HookRunner(hooks, context).run("postRun")
    assert (tmp_path / "run" / "out").read_text().split() == ["/home/user/.kube/sim", "10.0.0.1"]


def test_the_replay_command_reads_hook_pass_env() -> None:
    args = build_parser().parse_args(
        ["replay", "--trace=t", "--hook=preRun=true", "--hook-pass-env", "A", "--hook-pass-env=B_2"]
    )
    assert spec_from_args(args).hooks.pass_env == ("A", "B_2")


def test_a_bad_pass_env_name_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--hook-pass-env 'A=B' is not a variable name"):
        Hooks(pass_env=("A=B",))
