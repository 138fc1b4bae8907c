"""Pods whose owner is not tracked (a custom controller's) replay as bare pods, with their recorded
lifetime."""

from __future__ import annotations

from typing import Any

from pipeline.formats.assemble import assemble_window
from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.plan import plan_replay
from pipeline.replay.rewrite import (
    LIFETIME_ANNOTATION,
    RewriteSettings,
    RootRef,
    format_lifetime,
    rewrite_object,
)

ROOT = RootRef("kubetape.dev/v1", "ReplayRoot", "kubetape-replay-r1", "uid-root")


def _widget_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "w-1",
            "namespace": "shop",
            "ownerReferences": [
                {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "u-w"}
            ],
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
    }


def test_a_pod_of_an_untracked_owner_is_exported_and_replayed_as_a_bare_pod() -> None:
    obj = _widget_pod()
    key = key_of(obj)
    events = [
        Event.applied(1_000, key, obj, 1),
        # as the watcher records it: the pod is its own lifecycle owner (its Widget is not tracked)
        Event.pod_lifecycle(2_000, key, owner_key=key, pod_spec_hash=7, start_ms=1_000, end_ms=31_000),
    ]
    recorded = build_segment(events, start_ms=0, end_ms=40_000, kind=SegmentKind.TRACE)
    # the export keeps it (its owner is not in the trace) with its lifecycle
    trace = assemble_window(None, recorded.events, 0, 40_000)
    assert [e.key for e in trace.events] == [key, key]

    plan = plan_replay(trace, speed=10)
    assert plan.lifetimes_ms == {key: 3_000.0}

    replayed = rewrite_object(
        obj, RewriteSettings(replay_name="r1"), ROOT, namespaced=True, lifetime_ms=3_000.0
    )
    assert "ownerReferences" not in replayed["metadata"]  # bare: no Widget for the GC to miss
    assert replayed["metadata"]["annotations"][LIFETIME_ANNOTATION] == format_lifetime(3_000.0)


def test_a_pod_whose_lifecycle_belongs_to_a_traced_owner_is_left_to_that_owner() -> None:
    """Pods tracked without skipOwned: a Deployment's pod (owned through an untracked ReplicaSet, which its
    ownerReferences name) is left out of the export, its Deployment recreates it; the Widget's pod stays."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }
    web_pod = _widget_pod()
    web_pod["metadata"]["name"] = "web-abc-1"
    web_pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc"}
    ]
    widget_pod = _widget_pod()
    dkey, wkey, pkey = key_of(deployment), key_of(web_pod), key_of(widget_pod)
    events = [
        Event.applied(1_000, dkey, deployment, 1),
        Event.applied(1_000, wkey, web_pod, 2),
        Event.applied(1_000, pkey, widget_pod, 3),
        Event.pod_lifecycle(2_000, wkey, owner_key=dkey, pod_spec_hash=7, start_ms=1_000, end_ms=None),
        Event.pod_lifecycle(2_000, pkey, owner_key=pkey, pod_spec_hash=7, start_ms=1_000, end_ms=None),
    ]
    trace = assemble_window(None, events, 0, 40_000)
    objects = {e.key for e in trace.events if e.obj is not None}
    assert objects == {dkey, pkey}
    kept_all = assemble_window(None, events, 0, 40_000, suppress_owned=False)
    assert {e.key for e in kept_all.events if e.obj is not None} == {dkey, wkey, pkey}
