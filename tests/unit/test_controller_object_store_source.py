"""A Simulation replaying a range of an object store segment store (``spec.source.segments.url``)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.controller.objects import replayer_job
from pipeline.controller.settings import ControllerSettings
from pipeline.controller.spec import SegmentsSource, SimulationSpecError, parse_spec
from tests.fakes.replay_job import job_document


def _sim(segments: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "prod-s3", "uid": "u-1"},
        "spec": {"source": {"segments": {"from": "-30m", "to": "now", **segments}}},
    }


def test_an_s3_segment_source_replays_from_the_url_with_the_secrets_credentials() -> None:
    sim = _sim({"url": "s3://traces/kubetape/prod/", "credentialsSecret": "kubetape-s3"})
    spec = parse_spec(sim)
    assert spec.source == SegmentsSource(
        None, None, "-30m", "now", "s3://traces/kubetape/prod", "kubetape-s3"
    )
    assert job_document("prod-s3", 0, spec)["segments"] == "s3://traces/kubetape/prod"
    job = replayer_job(sim, 0, spec, ControllerSettings(identity="c"))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "kubetape-s3"}}]
    assert not any(v["name"] == "segments" for v in job["spec"]["template"]["spec"]["volumes"])


@pytest.mark.parametrize(
    ("segments", "message"),
    [
        ({"url": "s3://traces/x", "claimName": "pvc"}, "give url or claimName/path, not both"),
        ({"url": "/var/lib/segments"}, "not an object store URL; use path"),
        ({"url": "s3://Traces/x"}, r"segments\.url: .* no valid bucket name"),
        ({"path": "/data", "credentialsSecret": "s"}, "only used with url"),
        ({}, r"or url \(s3://bucket/prefix\)"),
    ],
)
def test_a_bad_object_store_source_is_refused_with_the_field(segments: dict[str, Any], message: str) -> None:
    with pytest.raises(SimulationSpecError, match=message):
        parse_spec(_sim(segments))
