"""Workload identity for the S3 store (IRSA, GKE Workload Identity): with a web-identity token file and
a role and no static key, kubetape hands obstore no keys of its own, so obstore's credential chain trades
the token for keys with STS AssumeRoleWithWebIdentity. STS is an AWS service the stack's S3 server
(s3proxy) does not provide, and obstore only calls it over HTTPS, so the exchange itself is not run
here: these tests pin the configuration kubetape hands over and that the store asks STS before S3."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.model.errors import TransientError
from pipeline.store.s3_connection import connection_config, uses_web_identity
from pipeline.store.store_url import S3Location, open_segment_store

_LOCATION = S3Location("kubetape", "prod")


@pytest.fixture
def shared_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ~/.aws/credentials with static keys, as a base image may carry, and no key in the env."""
    path = tmp_path / "credentials"
    path.write_text("[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(path))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def web_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.payload.signature")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/kubetape-sink")


def test_without_a_token_the_shared_credentials_file_supplies_the_keys(shared_keys: Path) -> None:
    assert not uses_web_identity()
    config, _ = connection_config(_LOCATION)
    assert config.get("access_key_id") == "FILEKEY"


@pytest.mark.usefixtures("web_identity")
def test_a_web_identity_token_is_not_shadowed_by_the_shared_credentials_file(shared_keys: Path) -> None:
    assert uses_web_identity()
    config, _ = connection_config(_LOCATION)
    assert {"access_key_id", "secret_access_key", "token"}.isdisjoint(config)


@pytest.mark.usefixtures("web_identity")
def test_static_keys_in_the_environment_still_win(shared_keys: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
    assert not uses_web_identity()


@pytest.fixture
def s3_requests() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server standing in for the S3 endpoint; it records every request line."""
    seen: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(f"GET {self.path}")
            self.send_response(403)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.usefixtures("web_identity", "shared_keys")
def test_the_store_asks_sts_for_keys_before_it_calls_s3(
    s3_requests: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, seen = s3_requests
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    # An STS endpoint that refuses at once: the exchange fails before any S3 request is signed.
    monkeypatch.setenv("AWS_STS_ENDPOINT", "https://127.0.0.1:9")
    store = open_segment_store(f"s3://{_LOCATION.bucket}/{_LOCATION.prefix}", retry_s=0.5)
    with pytest.raises(TransientError, match="STS") as raised:
        store.list()
    assert "POST" in str(raised.value), f"expected the STS exchange (a POST) to fail first: {raised.value}"
    assert seen == [], f"S3 was called before credentials were obtained: {seen}"
