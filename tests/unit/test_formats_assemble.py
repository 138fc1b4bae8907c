"""Assembling a window [A, B) into one trace, and converting traces to and from SimKube v2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.formats.assemble import assemble_window, fold_keyframe, simkube_to_trace, trace_to_simkube
from pipeline.formats.segment.content import Keyframe
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.formats.simkube import (
    SimkubeEvent,
    SimkubeLifecycle,
    read_simkube_trace,
    simkube_compatibility_problems,
    write_simkube_trace,
)
from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import ObjectKey, key_of, object_key
from pipeline.model.tracer_config import TracerConfig
from pipeline.validate.rules import validate_trace

A, B = 100_000, 200_000


def _obj(kind: str, name: str, spec: Any = None, owner: tuple[str, str] | None = None) -> dict[str, Any]:
    api = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "Pod": "v1", "Job": "batch/v1"}[kind]
    meta: dict[str, Any] = {"name": name, "namespace": "default", "annotations": {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "x"}]
    obj: dict[str, Any] = {"apiVersion": api, "kind": kind, "metadata": meta}
    if spec is not None:
        obj["spec"] = spec
    return obj


def _applied(ts: int, obj: dict[str, Any], uid: str = "") -> Event:
    return Event.applied(ts, key_of(obj), obj, object_spec_hash(obj), uid=uid)


def _deleted(ts: int, obj: dict[str, Any]) -> Event:
    return Event.deleted(ts, key_of(obj), obj)


def _lifecycle(
    ts: int, pod: str, owner: ObjectKey, *, start: int, end: int | None, pod_hash: int = 7
) -> Event:
    return Event.pod_lifecycle(
        ts,
        object_key("v1", "Pod", "default", pod),
        owner_key=owner,
        pod_spec_hash=pod_hash,
        start_ms=start,
        end_ms=end,
    )


WEB = _obj("Deployment", "web", {"replicas": 1})
API = _obj("Deployment", "api", {"replicas": 2})
JOB = _obj("Job", "batch", {"parallelism": 1})


def test_state_at_window_start_is_folded_into_the_first_events() -> None:
    trace = assemble_window(
        Keyframe(0, {key_of(WEB): _applied(0, WEB)}),
        [
            _applied(10_000, API),
            _deleted(20_000, WEB),
            _applied(A + 5_000, JOB),
            _deleted(A + 6_000, API),
            _applied(B, _obj("Deployment", "late")),  # at the exclusive end: not in the window
        ],
        A,
        B,
    )
    assert trace.header.kind is SegmentKind.TRACE
    assert (trace.header.start_ms, trace.header.end_ms) == (A, B)
    summary = [(e.type, e.ts_ms, e.key) for e in trace.events]
    assert summary == [
        (EventType.APPLIED, A, "apps/Deployment/default/api"),  # folded state: api lives, web was deleted
        (EventType.APPLIED, A + 5_000, "batch/Job/default/batch"),
        (EventType.DELETED, A + 6_000, "apps/Deployment/default/api"),
    ]


def test_events_before_the_keyframe_are_already_in_it() -> None:
    stale = _applied(5, _obj("Deployment", "web", {"replicas": 99}))
    trace = assemble_window(Keyframe(50, {key_of(WEB): _applied(40, WEB)}), [stale], A, B)
    assert trace.events[0].obj == WEB


def test_keyframe_after_window_start_and_empty_windows_are_refused() -> None:
    with pytest.raises(FormatError, match="after the window start"):
        assemble_window(Keyframe(A + 1), [], A, B)
    with pytest.raises(FormatError, match="empty window"):
        assemble_window(None, [], A, A)


def test_lifecycles_are_clipped_to_the_window_and_need_their_owner() -> None:
    web, gone = key_of(WEB), object_key("apps/v1", "Deployment", "default", "gone")
    trace = assemble_window(
        None,
        [
            _applied(1_000, WEB),
            _lifecycle(2_000, "web-1", web, start=2_000, end=None),  # running since before A
            _lifecycle(3_000, "web-2", web, start=3_000, end=None),
            _lifecycle(9_000, "web-2", web, start=3_000, end=9_000),  # finished before A: dropped
            _lifecycle(A + 1_000, "web-3", web, start=A + 1_000, end=None),
            _lifecycle(B + 9_000, "web-3", web, start=A + 1_000, end=B + 9_000),  # known only after B
            _lifecycle(A + 2_000, "orphan", gone, start=A + 2_000, end=A + 3_000),  # owner not in trace
        ],
        A,
        B,
    )
    lifecycles = {
        e.key.rsplit("/", 1)[1]: (e.ts_ms, e.pod_start_ms, e.pod_end_ms)
        for e in trace.events
        if e.type is EventType.POD_LIFECYCLE
    }
    assert lifecycles == {"web-1": (A, A, None), "web-3": (A + 1_000, A + 1_000, None)}


def test_finished_tracked_pods_are_not_replayed_again() -> None:
    pod = _obj("Pod", "bare", {"containers": []})
    pod_key = key_of(pod)
    trace = assemble_window(
        None,
        [
            _applied(1_000, pod, uid="u1"),
            Event.pod_lifecycle(
                2_000, pod_key, owner_key=pod_key, pod_spec_hash=1, start_ms=1_500, end_ms=2_000, uid="u1"
            ),
        ],
        A,
        B,
    )
    assert trace.events == ()


def test_objects_owned_by_objects_of_the_trace_are_left_to_their_owner() -> None:
    rs = _obj("ReplicaSet", "web-5d9", {"replicas": 1}, owner=("Deployment", "web"))
    lone_rs = _obj("ReplicaSet", "lone", {"replicas": 1}, owner=("Deployment", "not-recorded"))
    events = [_applied(1_000, WEB), _applied(2_000, rs), _applied(A + 1, lone_rs)]
    kept = {e.key for e in assemble_window(None, events, A, B).events}
    assert kept == {key_of(WEB), key_of(lone_rs)}
    everything = {e.key for e in assemble_window(None, events, A, B, suppress_owned=False).events}
    assert key_of(rs) in everything


def test_assembled_trace_round_trips_as_a_segment() -> None:
    trace = assemble_window(
        None, [_applied(1_000, WEB), _applied(A + 10, API)], A, B, config=TracerConfig.default()
    )
    assert decode_segment(encode_segment(trace)) == trace


# ---- SimKube export -------------------------------------------------------------------------------
def test_export_to_simkube_truncates_to_seconds_and_coalesces_like_simkube() -> None:
    web_v2 = _obj("Deployment", "web", {"replicas": 5})
    start = 1_743_286_823_400
    trace = assemble_window(
        None,
        [
            _applied(start - 10_000, WEB),
            _applied(start + 100, API),  # same second as the window start: joins the first event
            _deleted(start + 2_300, API),
            _applied(start + 2_500, _obj("Deployment", "api", {"replicas": 3})),  # delete then apply: split
            _applied(start + 4_999, web_v2),
        ],
        start,
        start + 60_000,
        config=TracerConfig.default(),
    )
    sk = trace_to_simkube(trace)
    shape = [
        (
            e.ts,
            [o["metadata"]["name"] for o in e.applied_objs],
            [o["metadata"]["name"] for o in e.deleted_objs],
        )
        for e in sk.events
    ]
    assert shape == [
        (1_743_286_823, ["web", "api"], []),
        (1_743_286_825, [], ["api"]),
        (1_743_286_825, ["api"], []),
        (1_743_286_828, ["web"], []),
    ]
    assert sk.events[1].deleted_objs == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "default"}}
    ]
    assert sk.index == {
        "apps/v1.Deployment": {
            "default/web": object_spec_hash(web_v2),
            "default/api": object_spec_hash(_obj("Deployment", "api", {"replicas": 3})),
        }
    }
    assert simkube_compatibility_problems(sk) == []
    assert read_simkube_trace(write_simkube_trace(sk)) == sk


def test_export_groups_lifecycles_by_owner_and_pod_hash_in_launch_order() -> None:
    web = key_of(WEB)
    trace = assemble_window(
        None,
        [
            _applied(1_000, WEB),
            _lifecycle(A + 9_000, "web-b", web, start=A + 9_000, end=A + 20_500),
            _lifecycle(A + 1_000, "web-a", web, start=A + 1_000, end=None),
            _lifecycle(A + 2_000, "web-c", web, start=A + 2_000, end=None, pod_hash=8),
        ],
        A,
        B,
    )
    sk = trace_to_simkube(trace, TracerConfig.default())
    assert sk.pod_lifecycles == {
        ("apps/v1.Deployment", "default/web"): {
            7: [SimkubeLifecycle(101, None), SimkubeLifecycle(109, 120)],
            8: [SimkubeLifecycle(102, None)],
        }
    }


@pytest.mark.parametrize("name", ["cronjob.sktrace", "bare-pods.sktrace"])
def test_simkube_traces_survive_a_trip_through_kubetape(simkube_traces: Path, name: str) -> None:
    original = read_simkube_trace(simkube_traces / name)
    trace = simkube_to_trace(original, name)
    assert decode_segment(encode_segment(trace)) == trace
    back = trace_to_simkube(trace)
    assert back.pod_lifecycles == original.pod_lifecycles

    def objects(events: list[SimkubeEvent]) -> list[tuple[int, str, str]]:
        return [(e.ts, "applied", o["metadata"]["name"]) for e in events for o in e.applied_objs] + [
            (e.ts, "deleted", o["metadata"]["name"]) for e in events for o in e.deleted_objs
        ]

    assert objects(back.events) == objects(original.events)
    assert read_simkube_trace(write_simkube_trace(back)) == back


def test_cronjob_index_hash_survives_the_trip(simkube_traces: Path) -> None:
    original = read_simkube_trace(simkube_traces / "cronjob.sktrace")
    assert trace_to_simkube(simkube_to_trace(original)).index == original.index


# ---- properties -----------------------------------------------------------------------------------
OBJ_NAMES = st.sampled_from(["a", "b", "c"])


@st.composite
def histories(draw: st.DrawFn) -> list[Event]:
    """Applies and deletes of a few Deployments plus lifecycles of their (untracked) pods."""
    out = []
    for _ in range(draw(st.integers(0, 25))):
        ts = draw(st.integers(0, 300_000))
        name = draw(OBJ_NAMES)
        choice = draw(st.sampled_from(["apply", "delete", "lifecycle"]))
        if choice == "apply":
            out.append(_applied(ts, _obj("Deployment", name, {"replicas": draw(st.integers(0, 3))})))
        elif choice == "delete":
            out.append(_deleted(ts, _obj("Deployment", name)))
        else:
            start = draw(st.integers(0, ts))
            end = draw(st.none() | st.integers(start, ts))
            owner = object_key("apps/v1", "Deployment", "default", name)
            out.append(_lifecycle(ts, f"{name}-{draw(st.integers(0, 3))}", owner, start=start, end=end))
    return out


@given(histories(), st.integers(0, 300_000), st.integers(1, 300_000), st.integers(0, 100_000))
def test_a_keyframe_gives_the_same_window_as_the_whole_history(
    history: list[Event], a: int, length: int, back: int
) -> None:
    start, end = a, a + length
    at = max(0, start - back)
    full = assemble_window(None, history, start, end)
    keyframe = fold_keyframe(None, history, at)
    from_keyframe = assemble_window(keyframe, [e for e in history if e.ts_ms >= at], start, end)
    assert from_keyframe == full
    assert all(start <= e.ts_ms < end for e in full.events)
    sk = trace_to_simkube(full, TracerConfig.default())
    assert read_simkube_trace(write_simkube_trace(sk)) == sk


def test_fold_keyframe_keeps_what_a_later_window_needs() -> None:
    pod = _obj("Pod", "bare", {"containers": []})
    web = key_of(WEB)
    history = [
        _applied(1_000, WEB),
        _applied(1_500, API),
        _deleted(2_000, API),
        _applied(2_500, pod),
        Event.pod_lifecycle(
            3_000, key_of(pod), owner_key=key_of(pod), pod_spec_hash=1, start_ms=2_600, end_ms=3_000
        ),
        _lifecycle(3_000, "web-1", web, start=2_000, end=None),
        _lifecycle(4_000, "web-2", web, start=2_000, end=4_000),  # over and its pod is gone: dropped
    ]
    keyframe = fold_keyframe(None, history, 5_000)
    assert keyframe.at_ms == 5_000
    assert set(keyframe.objects) == {web, key_of(pod)}
    # the bare pod's finished lifecycle stays while the pod object exists (so it is not replayed again)
    assert {k.rsplit("/", 1)[1] for k in keyframe.lifecycles} == {"bare", "web-1"}
    later = fold_keyframe(keyframe, [_deleted(6_000, pod)], 7_000)
    assert {k.rsplit("/", 1)[1] for k in later.lifecycles} == {"web-1"}
    with pytest.raises(FormatError, match="cannot fold"):
        fold_keyframe(keyframe, [], 4_000)


def test_simkube_export_carries_no_status_and_validates_without_w0000() -> None:
    # SimKube's own example traces hold no status, and its validator flags every object with one
    live = {**_obj("Deployment", "web", {"replicas": 2}), "status": {"replicas": 2, "readyReplicas": 2}}
    trace = assemble_window(None, [_applied(A, live)], A, B, config=TracerConfig.default())
    sk = trace_to_simkube(trace)
    applied = [obj for event in sk.events for obj in event.applied_objs]
    assert [obj["metadata"]["name"] for obj in applied] == ["web"]
    assert all("status" not in obj for obj in applied)
    assert [f for f in validate_trace(sk) if f.code == "W0000"] == []
    # kubetape's own format keeps the status (analytics read it)
    assert next(e.obj for e in trace.events if e.obj is not None)["status"]["readyReplicas"] == 2
