"""One parser for every segment store argument: paths, file:// and s3:// URLs, with clear refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.model.errors import ConfigError
from pipeline.stack.state import StackInfo
from pipeline.store.store_url import LocalLocation, S3Location, open_segment_store, parse_store_url


def test_store_urls_parse_to_one_location_each(tmp_path: Path) -> None:
    assert str(parse_store_url("s3://bucket-1/a/b/")) == "s3://bucket-1/a/b"
    assert str(parse_store_url("s3://bucket-1")) == "s3://bucket-1"
    assert parse_store_url(f"file://{tmp_path}") == parse_store_url(str(tmp_path))
    for bad, why in [
        ("s3://B/x", "no valid bucket name"),
        ("s3:///x", "no valid bucket name"),
        ("gs://bucket/x", "unsupported scheme 'gs'"),
        ("file://host/x", "not a local file URL"),
        ("s3://bucket/x?endpoint=y", "take no query"),
        ("", "empty"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_store_url(bad)
    with pytest.raises(ConfigError, match="does not exist; check --segment-store"):
        open_segment_store(tmp_path / "absent", must_exist=True)
    assert parse_store_url("s3://bucket-1/a%20b/c") == S3Location("bucket-1", "a b/c")
    assert parse_store_url("~/segs") == LocalLocation(Path("~/segs").expanduser())


def test_stack_env_points_s3_clients_at_the_local_server(tmp_path: Path) -> None:
    info = StackInfo(tmp_path, "127.0.0.1:9092", {}, tmp_path / "bin", "http://127.0.0.1:4567")
    lines = info.env_lines()
    assert "export AWS_ENDPOINT_URL=http://127.0.0.1:4567" in lines
    assert any(line.startswith("export AWS_ACCESS_KEY_ID=") for line in lines)
    assert "export KUBETAPE_S3_STORE=s3://kubetape/segments" in lines
    without = StackInfo(tmp_path, "127.0.0.1:9092", {}, tmp_path / "bin").env_lines()
    assert not any("AWS_" in line for line in without)
