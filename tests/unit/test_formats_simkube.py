"""SimKube trace reader and writer, against SimKube's own example traces."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.formats.assemble import simkube_to_trace
from pipeline.formats.simkube import (
    SimkubeEvent,
    SimkubeLifecycle,
    SimkubeTrace,
    read_simkube_trace,
    simkube_compatibility_problems,
    write_simkube_trace,
)
from pipeline.model.errors import FormatError, KubetapeError, UnknownVersionError
from tests.unit.test_model_events import NAMES, U64, k8s_objects

SKTRACES = ["cronjob.sktrace", "bare-pods.sktrace"]
JSON_TRACES = ["simkube-trace.json", "simkube-validation-trace.json"]


def _raw(path: Path) -> Any:
    def hook(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
        return {tuple(k) if isinstance(k, list) else k: v for k, v in pairs}

    return msgpack.unpackb(path.read_bytes(), strict_map_key=False, object_pairs_hook=hook)


@pytest.mark.parametrize("name", SKTRACES)
def test_rewriting_a_simkube_trace_gives_the_same_bytes(simkube_traces: Path, name: str) -> None:
    data = (simkube_traces / name).read_bytes()
    trace = read_simkube_trace(data, name)
    assert write_simkube_trace(trace) == data
    assert read_simkube_trace(write_simkube_trace(trace)) == trace


@pytest.mark.parametrize("name", JSON_TRACES)
def test_json_v2_traces_are_read_and_written_as_msgpack(simkube_traces: Path, name: str) -> None:
    trace = read_simkube_trace(simkube_traces / name)
    assert trace.version == 2
    assert read_simkube_trace(write_simkube_trace(trace)) == trace


def test_cronjob_trace_content(simkube_traces: Path) -> None:
    trace = read_simkube_trace(simkube_traces / "cronjob.sktrace")
    assert [e.ts for e in trace.events] == [1743286823, 1743286823, 1743287028]
    assert trace.events[0] == SimkubeEvent(1743286823)  # the window-start placeholder
    assert trace.pod_lifecycles == {
        ("batch/v1.CronJob", "default/hello-simkube"): {
            10855072724872030168: [
                SimkubeLifecycle(1743286861, 1743286891),
                SimkubeLifecycle(1743286921, 1743286951),
                SimkubeLifecycle(1743286981, 1743287011),
            ]
        }
    }


def test_bare_pods_trace_preserves_tuple_keys_and_u64_hashes(simkube_traces: Path) -> None:
    trace = read_simkube_trace(simkube_traces / "bare-pods.sktrace")
    owners = sorted(trace.pod_lifecycles)
    assert owners[0] == ("v1.Pod", "testing/bare-pod-1781282449")
    assert {h for by_hash in trace.pod_lifecycles.values() for h in by_hash} == {2151974655102796215}
    assert len(trace.index["v1.Pod"]) == 16
    assert trace.pod_lifecycles[("v1.Pod", "testing/bare-pod-1781282630")] == {
        2151974655102796215: [SimkubeLifecycle(1781282631, None)]
    }


def test_what_kubetape_writes_decodes_by_simkubes_rules(simkube_traces: Path) -> None:
    """SimKube decodes with rmp_serde into its Trace struct: named map fields, u16 version 2, list keys."""
    trace = read_simkube_trace(simkube_traces / "bare-pods.sktrace")
    raw = msgpack.unpackb(write_simkube_trace(trace), raw=False, strict_map_key=False, use_list=False)
    assert list(raw) == ["version", "config", "events", "index", "pod_lifecycles"]
    assert raw["version"] == 2
    owner_key = next(iter(raw["pod_lifecycles"]))
    assert owner_key == ("v1.Pod", owner_key[1])  # a 2-element array, as serde writes a tuple
    assert simkube_compatibility_problems(trace) == []


def test_version_1_trace_is_upgraded_when_kinds_can_be_found(simkube_traces: Path) -> None:
    v2 = _raw(simkube_traces / "cronjob.sktrace")
    v1 = [
        v2["config"],
        v2["events"],
        {"default/hello-simkube": 17156035354639895998},
        {"default/hello-simkube": {10855072724872030168: [{"Finished": [1743286861, 1743286891]}]}},
    ]
    trace = read_simkube_trace(msgpack.packb(v1), "old.sktrace")
    assert trace.read_from_version == 1
    assert trace.index == {"batch/v1.CronJob": {"default/hello-simkube": 17156035354639895998}}
    assert list(trace.pod_lifecycles) == [("batch/v1.CronJob", "default/hello-simkube")]


def test_version_1_trace_with_unknown_kinds_is_rejected_clearly(simkube_traces: Path) -> None:
    v2 = _raw(simkube_traces / "cronjob.sktrace")
    v1 = [v2["config"], v2["events"], {"default/gone": 1}, {}]
    with pytest.raises(
        FormatError, match=r"old.sktrace \(SimKube v1 trace\): cannot tell the kind of index entry"
    ):
        read_simkube_trace(msgpack.packb(v1), "old.sktrace")


def test_unknown_version_is_rejected(simkube_traces: Path) -> None:
    raw = _raw(simkube_traces / "cronjob.sktrace")
    raw["version"] = 4
    with pytest.raises(
        UnknownVersionError,
        match=r"v4\.sktrace: SimKube trace format version 4 is not supported "
        r"\(kubetape reads versions 1, 2 and 3\)",
    ):
        read_simkube_trace(msgpack.packb(raw), "v4.sktrace")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("index"), "missing field"),
        (lambda r: r.__setitem__("version", "2"), "'version' must be a u16"),
        (lambda r: r["events"][1].__setitem__("ts", "late"), r"events\[1\]: ts must be"),
        (lambda r: r["events"][1]["applied_objs"][0].pop("metadata"), "no metadata.name"),
        (lambda r: r["index"]["batch/v1.CronJob"].__setitem__("default/x", -1), "u64 hash"),
        (lambda r: r["config"]["trackedObjects"].__setitem__("batch/v1.CronJob", {"bogus": 1}), "bogus"),
        (
            lambda r: r["pod_lifecycles"].__setitem__(
                ("batch/v1.CronJob", "default/x"), {1: [{"Started": 1}]}
            ),
            "expected {Running: start}",
        ),
        (
            lambda r: r["events"][1]["applied_objs"][0].__setitem__("blob", b"\x00"),
            "bytes, which is not JSON",
        ),
    ],
)
def test_malformed_traces_name_the_problem(simkube_traces: Path, mutate: Any, message: str) -> None:
    raw = _raw(simkube_traces / "cronjob.sktrace")
    mutate(raw)
    with pytest.raises(FormatError, match=message):
        read_simkube_trace(msgpack.packb(raw, use_bin_type=True), "bad.sktrace")


@pytest.mark.parametrize("key", [1.5, 2, True, None, b"apps/v1.Deployment", (1, 2)])
def test_an_index_key_that_is_not_a_string_is_a_format_error_naming_it(
    simkube_traces: Path, key: Any
) -> None:
    """A float key reprs as ``1.5``, which parses as the GVK ``v1.5``: it must still be refused."""
    raw = _raw(simkube_traces / "cronjob.sktrace")
    raw["index"][key] = {"default/x": 1}
    with pytest.raises(FormatError, match=r"bad\.sktrace: index key .* is a .*, not a GVK string") as info:
        read_simkube_trace(msgpack.packb(raw, use_bin_type=True), "bad.sktrace")
    assert repr(key) in str(info.value)


def test_a_lifecycle_owner_gvk_that_is_not_a_string_is_a_format_error(simkube_traces: Path) -> None:
    raw = _raw(simkube_traces / "cronjob.sktrace")
    raw["pod_lifecycles"][(1.5, "default/x")] = {1: [{"Running": 1}]}
    with pytest.raises(FormatError, match="pod_lifecycles key"):
        read_simkube_trace(msgpack.packb(raw, use_bin_type=True), "bad.sktrace")


# Anything msgpack can hold, including what JSON cannot (bytes, float keys, tuple keys, huge ints).
ODD = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=4)
    | st.sampled_from(["v1.Pod", "apps/v1.Deployment", "Empty", "Running", "ns/name", "", "/"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.one_of(st.text(max_size=4), st.integers(-2, 2), st.floats(), st.booleans()), inner, max_size=3
        )
        | st.dictionaries(st.sampled_from(["Running", "Finished"]), inner, min_size=1, max_size=1)
    ),
    max_leaves=8,
)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a decoded trace: ("v", key) for a map value, ("k", key) for a map key."""
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out.append((*path, ("k", k)))
            out += _paths(v, (*path, ("v", k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*path, ("v", i)))
    return out


def _replace(node: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    (how, at), rest = path[0], path[1:]
    if isinstance(node, list):
        return [_replace(v, rest, new) if i == at else v for i, v in enumerate(node)]
    if how == "k":  # replace the key, keep the value (a key msgpack can pack must be hashable here)
        try:
            hash(new)
        except TypeError:
            new = repr(new)
        return {(new if k == at else k): v for k, v in node.items()}
    return {k: (_replace(v, rest, new) if k == at else v) for k, v in node.items()}


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(["cronjob.sktrace", "bare-pods.sktrace"]), st.data())
def test_a_trace_with_any_field_of_any_shape_raises_only_format_errors(
    name: str, data: st.DataObject
) -> None:
    """Structure-aware: one place of a real trace (a value or a map key) gets a value of another shape.
    Reading it, and turning it into kubetape events, either works or raises FormatError, never an
    AssertionError, TypeError, KeyError or OverflowError."""
    from tests.data import SIMKUBE_TRACES

    raw = _raw(SIMKUBE_TRACES / name)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(raw)))
        raw = _replace(raw, path, data.draw(ODD))
    try:
        packed = msgpack.packb(raw, use_bin_type=True)
    except (OverflowError, TypeError, ValueError):
        return  # not a msgpack document: nothing a file could hold
    try:
        trace = read_simkube_trace(packed, "fuzz.sktrace")
    except FormatError:
        return
    with contextlib.suppress(KubetapeError):
        simkube_to_trace(trace)


def test_writer_refuses_what_simkube_would_refuse() -> None:
    trace = SimkubeTrace(2, {"trackedObjects": {"v1.ConfigMap": {}}}, [], {}, {})
    with pytest.raises(FormatError, match=r"v1\.ConfigMap has no podSpecTemplatePaths"):
        write_simkube_trace(trace)


# ---- random traces ----------------------------------------------------------------------------------
LIFECYCLES = st.builds(SimkubeLifecycle, st.integers(0, 2**40), st.none() | st.integers(0, 2**40)) | st.just(
    SimkubeLifecycle(None)
)


@st.composite
def simkube_traces(draw: st.DrawFn) -> SimkubeTrace:
    timestamps = sorted(draw(st.lists(st.integers(0, 2**40), max_size=5)))
    events = [
        SimkubeEvent(
            ts,
            draw(st.lists(k8s_objects(), max_size=3)),
            draw(st.lists(k8s_objects(), max_size=2)),
        )
        for ts in timestamps
    ]
    index = draw(
        st.dictionaries(st.sampled_from(["apps/v1.Deployment", "v1.Pod"]), st.dictionaries(NAMES, U64))
    )
    lifecycles = draw(
        st.dictionaries(
            st.tuples(st.sampled_from(["apps/v1.Deployment", "v1.Pod"]), NAMES),
            st.dictionaries(U64, st.lists(LIFECYCLES, max_size=3), max_size=2),
            max_size=3,
        )
    )
    config = {"trackedObjects": {"apps/v1.Deployment": {"podSpecTemplatePaths": ["/spec/template"]}}}
    return SimkubeTrace(2, config, events, index, lifecycles)


@given(simkube_traces())
def test_random_traces_round_trip(trace: SimkubeTrace) -> None:
    assert read_simkube_trace(write_simkube_trace(trace)) == trace
