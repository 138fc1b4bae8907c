"""Under the default tracer config, no secret on a container's command line reaches a trace, in any of the
shapes users write it (docs/redaction.md), and arguments that only look alike are kept as they are."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.model.sanitize import sanitize
from pipeline.model.tracer_config import REDACTED, TracerConfig

S = "Hunter2xQ"  # the secret in every case below

LEAKS: list[tuple[str, list[str]]] = [
    # the documented rule's own shapes
    ("--password=", [f"--password={S}"]),
    ("--api-key v", ["--api-key", S]),
    ("--client_secret v", ["--client_secret", S]),
    ("--db-token=", [f"--db-token={S}"]),
    ("-password=", [f"-password={S}"]),
    ("--accessKey=", [f"--accessKey={S}"]),
    ("--privatekey=", [f"--privatekey={S}"]),
    ("--signingKey v", ["--signingKey", S]),
    ("--PASSWORD v", ["--PASSWORD", S]),
    ("--dbPassword=", [f"--dbPassword={S}"]),
    ("--APIKey v", ["--APIKey", S]),
    ("value starting with -", ["--password", f"-{S}"]),
    ("value starting with --=", [f"--password=--{S}"]),
    ("value with spaces", ["--password", f"{S} two"]),
    ("sh -c", ["sh", "-c", f"exec app --password={S} --port 80"]),
    ("bash -c", ["bash", "-c", f"app --api-key {S}"]),
    ("sh -c quoted", ["sh", "-c", f'exec app --password "{S} x" && echo done']),
    ("sh -c single-quoted", ["sh", "-c", f"app --token='{S}'; true"]),
    ("sh -c env", ["sh", "-c", f"DB_PASSWORD={S} exec app"]),
    ("sh -c nested", ["sh", "-c", f"bash -c 'app --secret={S}'"]),
    ("sh -c url", ["sh", "-c", f"psql postgres://app:{S}@db:5432/app"]),
    ("command/args split", ["exec app --password=" + S]),
    # common shapes outside the old rule
    ("--pass", ["--pass", S]),
    ("--db-pass=", [f"--db-pass={S}"]),
    ("--pwd=", [f"--pwd={S}"]),
    ("--credentials", ["--credentials", S]),
    ("--creds=", [f"--creds={S}"]),
    ("--passphrase", ["--passphrase", S]),
    ("url", [f"https://user:{S}@host/path"]),
    ("url in a flag", [f"--db-url=postgres://u:{S}@db/app"]),
    ("-p v", ["-p", S]),
    ("-p=v", [f"-p={S}"]),
    ("PASSWORD=v", [f"PASSWORD={S}"]),
    ("env assignment", ["env", f"AWS_SECRET_ACCESS_KEY={S}", "app"]),
    ("--set x.password=v", ["--set", f"db.password={S}"]),
]

KEPT: list[list[str]] = [
    ["--port", "80"],
    ["--pod-name", "x"],
    ["-v", "2"],
    ["--keyframe-every", "10", "--monkey=1", "--hotkey", "k"],
    ["--token", "--port", "80", "run"],  # a flag without its value masks nothing
    ["--max-tokens", "100", "--tokenizer", "bert", "--passive", "--bypass-cache"],
    ["--keyspace", "ks"],
    ["-p", "5432"],
    ["tar", "-p", "-x", "-f", "a.tar", "--password", "-v"],
    ["-p", "8080:80/tcp"],
    ["sh", "-c", "mkdir -p /var/data && exec app --port 80"],
    ["--password=$(DB_PASSWORD)", "--token", "$TOKEN", "--api-key=${API_KEY}"],
    ["https://host:443/path?mail=a@b", "http://user@host/"],
    ["PORT=80", "LOG_LEVEL=debug", "--set", "image.tag=1"],
    ["sh", "-c", 'echo "$HOME" | tee /tmp/x; exit 0'],
]


def _deployment(args: list[str], command: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "app:1", "args": args}
    if command is not None:
        container["command"] = command
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return result


@pytest.mark.parametrize(("shape", "argv"), LEAKS, ids=[c[0] for c in LEAKS])
def test_a_secret_is_masked_in_args_and_command(shape: str, argv: list[str]) -> None:
    command = ["/bin/sh", "-c"] if shape == "command/args split" else list(argv)
    out = _container(sanitize(_deployment(argv, command), TracerConfig.default()))
    for field in ("args", "command"):
        shown = " ".join(out[field])
        assert S not in shown, f"{field}: {out[field]}"
        assert S.lower() not in shown.lower()
    assert any(REDACTED in a for a in out["args"]), out["args"]


@pytest.mark.parametrize("argv", KEPT, ids=[" ".join(a) for a in KEPT])
def test_arguments_that_are_no_secret_are_kept(argv: list[str]) -> None:
    out = _container(sanitize(_deployment(list(argv), list(argv)), TracerConfig.default()))
    assert out["args"] == argv
    assert out["command"] == argv


def test_a_masked_script_keeps_everything_but_the_secret() -> None:
    script = f'set -e; exec app --password="{S}" --port 80 | tee log && echo ok'
    out = _container(sanitize(_deployment(["sh", "-c", script]), TracerConfig.default()))
    assert out["args"][2] == f"set -e; exec app --password={REDACTED} --port 80 | tee log && echo ok"


def test_redact_args_false_keeps_every_shape() -> None:
    config = TracerConfig.from_mapping({"redactArgs": False}, "test")
    for _, argv in LEAKS:
        assert _container(sanitize(_deployment(list(argv)), config))["args"] == argv
