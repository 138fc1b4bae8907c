"""Secrets passed on a container's command line (``--password=…``) are masked in the trace, as env values
are, unless the tracer config says ``redactArgs: false``."""

from __future__ import annotations

from typing import Any

from pipeline.model.sanitize import sanitize
from pipeline.model.tracer_config import REDACTED, TracerConfig


def _deployment(args: list[str], command: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "app:1", "args": args}
    if command is not None:
        container["command"] = command
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"template": {"spec": {"containers": [container], "initContainers": [dict(container)]}}},
    }


def _args(obj: dict[str, Any], where: str = "containers", field: str = "args") -> list[str]:
    result: list[str] = obj["spec"]["template"]["spec"][where][0][field]
    return result


def test_secret_looking_flags_are_masked_in_args_and_command_of_every_container_list() -> None:
    argv = ["--password=hunter2", "--api-key", "abc", "--db-token=t", "--client_secret", "s", "--verbose"]
    out = sanitize(_deployment(argv, ["/bin/app", "--secret-key=k"]), TracerConfig.default())
    expected = [
        f"--password={REDACTED}", "--api-key", REDACTED, f"--db-token={REDACTED}",
        "--client_secret", REDACTED, "--verbose",
    ]  # fmt: skip
    assert _args(out) == expected
    assert _args(out, "initContainers") == expected
    assert _args(out, field="command") == ["/bin/app", f"--secret-key={REDACTED}"]


def test_flags_that_only_look_alike_and_positional_values_stay() -> None:
    argv = ["--keyframe-every", "10", "--monkey=1", "--token", "--port", "80", "run"]
    out = sanitize(_deployment(argv), TracerConfig.default())
    # a flag without its value (the next one is a flag) masks nothing
    assert _args(out) == ["--keyframe-every", "10", "--monkey=1", "--token", "--port", "80", "run"]


def test_redact_args_false_keeps_the_command_line() -> None:
    config = TracerConfig.from_mapping({"redactArgs": False}, "test")
    assert not config.redact_args
    assert config.to_mapping()["redactArgs"] is False
    argv = ["--password=hunter2"]
    assert _args(sanitize(_deployment(argv), config)) == argv
