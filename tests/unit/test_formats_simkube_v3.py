"""SimKube trace format v3 (``tracked_objects`` instead of ``index``): reading, writing, and v2 ⇄ v3."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgpack
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.formats.simkube import (
    SimkubeTrace,
    index_from_events,
    read_simkube_trace,
    with_version,
    write_simkube_trace,
)
from pipeline.model.errors import ConfigError
from pipeline.model.hashing import object_spec_hash
from tests.unit.test_formats_simkube import simkube_traces as random_traces

V3_FIXTURES = ["simkube-v3-trace.json", "simkube-v3-validation-trace.json"]
V2_FIXTURES = ["cronjob.sktrace", "bare-pods.sktrace", "simkube-trace.json", "simkube-validation-trace.json"]


def _via_v3(trace: SimkubeTrace) -> SimkubeTrace:
    """``trace`` written as v3, read back, and turned into v2 again."""
    v3 = read_simkube_trace(write_simkube_trace(with_version(trace, 3)), "v3")
    assert v3.version == 3
    return with_version(v3, 2)


@pytest.mark.parametrize("name", V3_FIXTURES)
def test_simkubes_v3_fixtures_are_read(simkube_traces: Path, name: str) -> None:
    trace = read_simkube_trace(simkube_traces / name)
    raw = orjson.loads((simkube_traces / name).read_bytes())
    assert trace.version == 3
    assert trace.read_from_version == 3
    assert trace.tracked_objects() == raw["tracked_objects"]
    assert len(trace.events) == len(raw["events"])
    assert trace.tracer_config().tracked  # the config normalizes as SimKube's does


def test_v3_index_hashes_are_recomputed_from_the_events(simkube_traces: Path) -> None:
    trace = read_simkube_trace(simkube_traces / "simkube-v3-trace.json")
    # the names are tracked_objects' (the deleted nginx-deployment-2 is not tracked), the hashes the events'
    assert trace.index == {
        "apps/v1.Deployment": {"default/nginx-deployment": object_spec_hash(trace.events[0].applied_objs[0])}
    }


def test_v3_is_written_with_tracked_objects_in_simkubes_field_order(simkube_traces: Path) -> None:
    trace = read_simkube_trace(simkube_traces / "cronjob.sktrace")
    raw = msgpack.unpackb(
        write_simkube_trace(with_version(trace, 3)), raw=False, strict_map_key=False, use_list=False
    )
    assert list(raw) == ["version", "config", "events", "tracked_objects", "pod_lifecycles"]
    assert raw["version"] == 3
    assert raw["tracked_objects"] == {"batch/v1.CronJob": {"default/hello-simkube": {}}}


@pytest.mark.parametrize("name", V2_FIXTURES)
def test_v2_to_v3_to_v2_keeps_all_but_hashes_v3_does_not_store(simkube_traces: Path, name: str) -> None:
    original = read_simkube_trace(simkube_traces / name)
    back = _via_v3(original)
    # v3 does not store spec hashes: they come back recomputed from the events; everything else is equal.
    assert dataclasses.replace(back, index=original.index) == original
    assert {g: set(n) for g, n in back.index.items()} == {g: set(n) for g, n in original.index.items()}
    assert back.index == index_from_events(original.events, original.index)


def test_v2_to_v3_to_v2_is_byte_identical_when_the_index_matches_the_events(simkube_traces: Path) -> None:
    data = (simkube_traces / "cronjob.sktrace").read_bytes()
    assert write_simkube_trace(_via_v3(read_simkube_trace(data))) == data


@pytest.mark.parametrize("name", V3_FIXTURES)
def test_v3_to_v2_to_v3_gives_the_same_bytes(simkube_traces: Path, name: str) -> None:
    v3_bytes = write_simkube_trace(read_simkube_trace(simkube_traces / name))
    v2 = read_simkube_trace(write_simkube_trace(with_version(read_simkube_trace(v3_bytes), 2)))
    assert v2.version == 2
    assert write_simkube_trace(with_version(v2, 3)) == v3_bytes


@given(random_traces(), st.data())
def test_random_v2_traces_round_trip_through_v3(trace: SimkubeTrace, data: st.DataObject) -> None:
    # The index as SimKube's tracer and kubetape's exporter write it: each object's last spec hash,
    # plus names the events do not show (their hash cannot survive v3, so it is 0 as v3 reads them).
    extra = data.draw(st.dictionaries(st.sampled_from(["v1.Pod"]), st.sets(st.text(min_size=1), max_size=2)))
    names = {gvk: list(n) for gvk, n in index_from_events(trace.events).items()}
    for gvk, more in extra.items():
        names.setdefault(gvk, []).extend(n for n in more if n not in names[gvk])
    trace = dataclasses.replace(trace, index=index_from_events(trace.events, names))
    assert _via_v3(trace) == trace


def test_an_unknown_version_to_write_is_refused_naming_the_versions() -> None:
    trace = SimkubeTrace(2, {"trackedObjects": {}}, [], {}, {})
    with pytest.raises(ConfigError, match=r"version 4 cannot be written; kubetape writes versions 2 and 3"):
        with_version(trace, 4)
