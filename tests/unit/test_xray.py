"""``kubetape xray``'s views computed from traces: events over time, versions and diffs, pods per owner."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import PartitionRange, SegmentKind
from pipeline.formats.trace import read_trace
from pipeline.formats.xray import (
    AT_START,
    CHANGED,
    CREATED,
    DELETED,
    POD,
    browse,
    pod_counts,
    version_diff,
)
from pipeline.model.errors import ConfigError
from pipeline.model.events import Event
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import key_of, object_key
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.segment_store import segment_name
from pipeline.store.store_url import parse_store_url
from services.commands.xray import XraySettings, load

WEB = object_key("apps/v1", "Deployment", "shop", "web")


def _deployment(replicas: int, image: str = "web:1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "web", "image": image}]}},
        },
    }


def _applied(ts_ms: int, obj: dict[str, Any]) -> Event:
    return Event.applied(ts_ms, key_of(obj), obj, object_spec_hash(obj))


def _pod(ts_ms: int, name: str, start_ms: int, end_ms: int | None) -> Event:
    owner = key_of(_deployment(0))
    return Event.pod_lifecycle(
        ts_ms,
        object_key("v1", "Pod", "shop", name),
        owner_key=owner,
        pod_spec_hash=7,
        start_ms=start_ms,
        end_ms=end_ms,
    )


def shop_events() -> list[Event]:
    """The shop/web Deployment is created with 2 replicas at +0 s, scaled to 5 with a new image at +4 s and
    deleted at +8 s; a ConfigMap beside it; its pods run 2, then 5, then 4."""
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "shop"}}
    return [
        _applied(1_000, _deployment(2)),
        _applied(1_500, config),
        *(_pod(2_000, f"web-{i}", 2_000, None) for i in range(2)),
        _applied(5_000, _deployment(5, image="web:2")),
        *(_pod(6_000, f"web-{i}", 6_000, None) for i in range(2, 5)),
        _pod(8_000, "web-0", 2_000, 8_000),
        Event.deleted(9_000, key_of(_deployment(5)), _deployment(5, image="web:2")),
    ]


def write_kubetape_trace(path: Path) -> Path:
    """A kubetape trace of :func:`shop_events`."""
    trace = build_segment(shop_events(), start_ms=500, end_ms=10_000, kind=SegmentKind.TRACE)
    path.write_bytes(encode_segment(trace))
    return path


@pytest.fixture
def kubetape_trace(tmp_path: Path) -> Path:
    return write_kubetape_trace(tmp_path / "shop.ktrace")


def test_events_over_time_from_a_kubetape_trace(kubetape_trace: Path) -> None:
    data = browse(read_trace(kubetape_trace))
    assert [(r.ts_ms, r.type, r.kind, r.namespaced_name) for r in data.rows if r.type != POD] == [
        (1_000, CREATED, "Deployment", "shop/web"),
        (1_500, CREATED, "ConfigMap", "shop/settings"),
        (5_000, CHANGED, "Deployment", "shop/web"),
        (9_000, DELETED, "Deployment", "shop/web"),
    ]
    assert [r.ts_ms for r in data.rows] == sorted(r.ts_ms for r in data.rows)
    pods = [r for r in data.rows if r.type == POD]
    assert len(pods) == 6
    assert {r.owner for r in pods} == {WEB}


def test_filter_words_match_kind_name_and_type(kubetape_trace: Path) -> None:
    data = browse(read_trace(kubetape_trace))
    assert [(r.ts_ms, r.type) for r in data.filtered("deploy WEB")] == [
        (1_000, CREATED),
        (5_000, CHANGED),
        (9_000, DELETED),
    ]
    assert [r.ts_ms for r in data.filtered("deployment changed")] == [5_000]
    assert [r.name for r in data.filtered("configmap")] == ["settings"]
    assert data.filtered("statefulset") == []
    assert len(data.filtered("   ")) == len(data.rows)


def test_versions_and_the_diff_shows_what_changed(kubetape_trace: Path) -> None:
    data = browse(read_trace(kubetape_trace))
    versions = data.versions[WEB]
    assert [(v.ts_ms, v.type) for v in versions] == [(1_000, CREATED), (5_000, CHANGED), (9_000, DELETED)]
    changed = next(r for r in data.rows if r.type == CHANGED)
    assert changed.version == 1
    diff = version_diff(versions, 1)
    assert diff.startswith("--- created at 1970-01-01 00:00:01.000\n+++ changed at 1970-01-01 00:00:05.000\n")
    minus = {line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")}
    plus = {line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")}
    assert minus == {"-  replicas: 2", "-      - image: web:1"}
    assert plus == {"+  replicas: 5", "+      - image: web:2"}
    assert version_diff(versions, 2) == "no difference: version 3 equals version 2\n"
    first = version_diff(versions, 0)
    assert first.startswith("--- (none)\n")
    assert "+  replicas: 2" in first
    with pytest.raises(IndexError, match="no version 3: the object has 3"):
        version_diff(versions, 3)


def test_owner_pods_over_time(kubetape_trace: Path) -> None:
    data = browse(read_trace(kubetape_trace))
    assert data.owners() == [WEB]
    # web-0's finish (at +8 s) replaces its running event: it counts once, from 2 s to 8 s
    assert data.pod_counts(WEB) == [(2_000, 2), (6_000, 5), (8_000, 4)]
    assert data.pod_counts(object_key("apps/v1", "Deployment", "shop", "other")) == []


def test_pod_counts_skip_unchanged_steps() -> None:
    # one pod ends exactly when another starts: the count stays 1 and is listed once
    assert pod_counts([_pod(1, "a", 1_000, 2_000), _pod(2, "b", 2_000, None)]) == [(1_000, 1)]
    assert pod_counts([]) == []


def test_simkube_trace_events_and_versions(simkube_traces: Path) -> None:
    data = browse(read_trace(simkube_traces / "simkube-trace.json"))
    assert [(r.type, r.kind, r.namespaced_name) for r in data.rows] == [
        (AT_START, "Deployment", "default/nginx-deployment"),
        (DELETED, "Deployment", "default/nginx-deployment-2"),
    ]
    assert data.rows[0].ts_ms == 1_709_241_485_000
    (version,) = data.versions[object_key("apps/v1", "Deployment", "default", "nginx-deployment")]
    assert version.obj["spec"]["replicas"] == 2


def test_simkube_cronjob_pods_over_time(simkube_traces: Path) -> None:
    data = browse(read_trace(simkube_traces / "cronjob.sktrace"))
    (owner,) = data.owners()
    assert owner.startswith("batch/CronJob/")
    counts = data.pod_counts(owner)
    assert counts, "the cronjob trace records three finished jobs' pods"
    assert counts[-1][1] == 0
    assert max(count for _, count in counts) >= 1
    assert [v.type for v in data.versions[owner]] == [AT_START, DELETED]


def test_a_store_window_browses_as_its_export_would(tmp_path: Path) -> None:
    events = shop_events()
    segment = build_segment(
        events,
        start_ms=500,
        end_ms=10_000,
        partitions=[PartitionRange("kubetape.events", 0, 0, len(events) - 1)],
    )
    LocalSegmentStore(tmp_path / "store").put(segment_name(0, 0), encode_segment(segment))
    settings = XraySettings(segment_store=parse_store_url(str(tmp_path / "store")), start="500", end="4000")
    trace, source = load(settings)
    assert source.endswith("from 500 to 4000")
    data = browse(trace)
    # the window holds the creation and the first two pods, not the scale-up at +4 s
    assert [(r.type, r.kind, r.name) for r in data.rows if r.type != POD] == [
        (CREATED, "Deployment", "web"),
        (CREATED, "ConfigMap", "settings"),
    ]
    assert data.pod_counts(WEB) == [(2_000, 2)]

    later, _ = load(dataclasses.replace(settings, start="3000", end="6000"))
    rows = [(r.ts_ms, r.type, r.name) for r in browse(later).rows if r.type != POD]
    assert rows == [(3_000, AT_START, "web"), (3_000, AT_START, "settings"), (5_000, CHANGED, "web")]


def test_xray_needs_a_trace_or_a_window(tmp_path: Path) -> None:
    store = parse_store_url(str(tmp_path))
    with pytest.raises(ConfigError, match="give a trace file, or --from"):
        load(XraySettings(segment_store=store))
    with pytest.raises(ConfigError, match="give a trace file, or --from"):
        load(XraySettings(segment_store=store, trace=tmp_path / "t", start="-1h"))


def test_validation_marks_land_on_the_rows_that_applied_the_object(kubetape_trace: Path) -> None:
    from pipeline.formats.xray import ERROR_MARKER, expanded_text
    from services.commands.xray import validation_marks

    trace = read_trace(kubetape_trace)
    data = browse(trace, validation_marks(trace))
    marked = [(r.ts_ms, r.type, r.kind, r.marker, r.codes) for r in data.rows if r.type != POD]
    # the Deployment has no spec.selector (KE0010) when created and when changed; its deletion and
    # the ConfigMap carry nothing
    assert marked == [
        (1_000, CREATED, "Deployment", ERROR_MARKER, "KE0010"),
        (1_500, CREATED, "ConfigMap", "", ""),
        (5_000, CHANGED, "Deployment", ERROR_MARKER, "KE0010"),
        (9_000, DELETED, "Deployment", "", ""),
    ]
    assert all(r.marker == "" for r in data.rows if r.type == POD)
    assert expanded_text(data.rows[0], data.start_ms).splitlines() == [
        "created Deployment shop/web at 1970-01-01 00:00:01.000 (+0.5s)",
        f"  {ERROR_MARKER} KE0010 error: spec.selector is missing (the apiserver requires one)",
    ]
