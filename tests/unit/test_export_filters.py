"""Export filters: include/exclude by namespace, label selector (kubectl syntax) and kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.formats.segment.decode import read_segment
from pipeline.model.errors import ConfigError
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey, key_of
from pipeline.model.selectors import LabelRequirement, LabelSelector, parse_selector_text
from pipeline.store.export import ExportFilters, kind_matches
from services.cli import main
from tests.unit.test_sink_cli import export_args, fill_store


def _event(api_version: str, kind: str, name: str, namespace: str | None = None, **labels: str) -> Event:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    if labels:
        meta["labels"] = labels
    obj = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    return Event.applied(0, key_of(obj), obj, 1)


WEB = _event("apps/v1", "Deployment", "web", "shop", app="web", tier="front")
DB = _event("apps/v1", "StatefulSet", "db", "shop", app="db")
DNS = _event("v1", "ConfigMap", "coredns", "kube-system")
SHOP_NS = _event("v1", "Namespace", "shop")
SYSTEM_NS = _event("v1", "Namespace", "kube-system")
CLASS = _event("storage.k8s.io/v1", "StorageClass", "fast")
LIFECYCLE = Event.pod_lifecycle(
    0, ObjectKey("core/Pod/shop/web-1"), owner_key=WEB.key, pod_spec_hash=1, start_ms=0, end_ms=None
)
ALL = [WEB, DB, DNS, SHOP_NS, SYSTEM_NS, CLASS, LIFECYCLE]


def _kept(filters: ExportFilters) -> list[Event]:
    return [e for e in ALL if not filters.excludes(e)]


def test_no_filters_keep_everything() -> None:
    assert _kept(ExportFilters()) == ALL


def test_include_namespace_keeps_its_objects_its_namespace_and_cluster_scoped_ones() -> None:
    assert _kept(ExportFilters(included_namespaces=("shop",))) == [WEB, DB, SHOP_NS, CLASS, LIFECYCLE]


def test_exclude_namespace_drops_the_namespace_object_too() -> None:
    assert _kept(ExportFilters(excluded_namespaces=("kube-system",))) == [WEB, DB, SHOP_NS, CLASS, LIFECYCLE]


@pytest.mark.parametrize(
    ("kinds", "kept"),
    [
        (("Deployment",), [WEB]),
        (("deployment.apps", "StatefulSet"), [WEB, DB]),
        (("Deployment.batch",), []),
        (("ConfigMap.core", "Pod."), [DNS, LIFECYCLE]),
        (("StorageClass.storage.k8s.io",), [CLASS]),
    ],
)
def test_include_kind(kinds: tuple[str, ...], kept: list[Event]) -> None:
    assert _kept(ExportFilters(included_kinds=kinds)) == kept


def test_exclude_kind() -> None:
    assert _kept(ExportFilters(excluded_kinds=("Namespace", "Pod"))) == [WEB, DB, DNS, CLASS]


def test_label_filters_pass_lifecycles_and_combine_with_the_others() -> None:
    front = ExportFilters(included_labels=(parse_selector_text("tier=front"),))
    assert _kept(front) == [WEB, LIFECYCLE]
    no_db = ExportFilters(
        included_labels=(parse_selector_text("app"),), excluded_labels=(parse_selector_text("app=db"),)
    )
    assert _kept(no_db) == [WEB, LIFECYCLE]
    both = ExportFilters(
        included_namespaces=("shop",), excluded_kinds=("StatefulSet",), included_kinds=("Deployment", "Pod")
    )
    assert _kept(both) == [WEB, LIFECYCLE]


def test_kind_patterns() -> None:
    assert kind_matches("Pod", "", "Pod")
    assert kind_matches("pod", "", "Pod")
    assert kind_matches("Pod.core", "", "Pod")
    assert not kind_matches("Pod.apps", "", "Pod")
    assert not kind_matches("Po", "", "Pod")


@pytest.mark.parametrize(
    ("text", "selector"),
    [
        ("app=web", LabelSelector((("app", "web"),))),
        ("app==web, tier=front", LabelSelector((("app", "web"), ("tier", "front")))),
        ("tier!=db", LabelSelector((), (LabelRequirement("tier", "NotIn", ("db",)),))),
        ("env in (a, b)", LabelSelector((), (LabelRequirement("env", "In", ("a", "b")),))),
        ("env notin (c),gpu,!spot", LabelSelector((), (
            LabelRequirement("env", "NotIn", ("c",)),
            LabelRequirement("gpu", "Exists"),
            LabelRequirement("spot", "DoesNotExist"),
        ))),
        ("kubernetes.io/arch=amd64", LabelSelector((("kubernetes.io/arch", "amd64"),))),
    ],
)  # fmt: skip
def test_selector_text_in_kubectl_syntax(text: str, selector: LabelSelector) -> None:
    assert parse_selector_text(text) == selector


@pytest.mark.parametrize("text", ["", "=web", "app=web tier=db", "env in ()", "a=b,,c", "env in (a"])
def test_unreadable_selectors_say_what_is_expected(text: str) -> None:
    with pytest.raises(
        ConfigError, match=r"label filter: (cannot read|.*needs at least one|an empty selector)"
    ):
        parse_selector_text(text, "label filter")


# ---- the command line -------------------------------------------------------------------------------
def _exported(tmp_path: Path, *flags: str) -> list[dict[str, Any]]:
    out = tmp_path / "out.kseg"
    args = export_args(tmp_path)
    assert main([*args, *flags, "-o", str(out)]) == 0
    trace = read_segment(out)
    keyframe = list(trace.keyframe.objects.values()) if trace.keyframe else []
    return [e.obj for e in [*keyframe, *trace.events] if e.obj is not None]


def test_export_filters_on_the_command_line(tmp_path: Path) -> None:
    fill_store(tmp_path / "segments")
    everything = _exported(tmp_path)
    assert {o["metadata"]["namespace"] for o in everything} == {"ns-0", "ns-1", "ns-2", "ns-3"}

    only_ns1 = _exported(tmp_path, "--include-namespace", "ns-1")
    assert only_ns1
    assert {o["metadata"]["namespace"] for o in only_ns1} == {"ns-1"}

    # skctl's comma-list flag, as SimKube users type it
    rest = _exported(tmp_path, "--excluded-namespaces", "ns-0,ns-1")
    assert {o["metadata"]["namespace"] for o in rest} == {"ns-2", "ns-3"}

    labelled = _exported(tmp_path, "--include-label", "app in (app-0, app-1)")
    assert labelled
    assert {o["metadata"]["labels"]["app"] for o in labelled} <= {"app-0", "app-1"}

    assert _exported(tmp_path, "--include-kind", "Deployment.apps") == everything
    assert _exported(tmp_path, "--exclude-kind", "Deployment") == []


def test_an_unreadable_label_filter_fails_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill_store(tmp_path / "segments")
    args = [*export_args(tmp_path), "-o", str(tmp_path / "x")]
    assert main([*args, "--include-label", "app in (a"]) == 2
    assert "label filter 'app in (a'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
