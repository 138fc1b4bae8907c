"""``kubetape list``/``describe`` on the stack's real S3 server (s3proxy): a fleet's store filled by the
sink's writer reads back the same per-cluster summary as the same recording in a directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.model.keys import ClusterId
from pipeline.store.store_url import (
    LocalLocation,
    cluster_store_location,
    open_segment_store,
    parse_store_url,
)
from pipeline.store.summary import summarize_fleet
from services.cli import main
from tests.unit.test_store_listing import record_into


def test_an_s3_fleet_store_lists_as_its_directory_twin(
    s3_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s3_root, local_root = parse_store_url(s3_url), LocalLocation(tmp_path / "twin")
    for root in (s3_root, local_root):
        record_into(open_segment_store(root), 200, 180_000)
        record_into(open_segment_store(cluster_store_location(root, ClusterId("eu"))), 40, 60_000)

    on_s3 = [s.to_json() for s in summarize_fleet(s3_url)]
    in_dir = [s.to_json() for s in summarize_fleet(str(local_root.path))]
    assert [c["cluster"] for c in on_s3] == ["default", "eu"]
    for summary in (*on_s3, *in_dir):
        summary.pop("location")
    assert on_s3 == in_dir

    assert main(["list", s3_url, "--json"]) == 0
    assert [c["segments"] for c in json.loads(capsys.readouterr().out)] == [c["segments"] for c in in_dir]
    assert main(["describe", s3_url, "--cluster", "eu"]) == 0
    assert f"cluster eu at {s3_url}/clusters/eu" in capsys.readouterr().out
