"""Object keys and GVK strings."""

from __future__ import annotations

import pytest

from pipeline.model.errors import FormatError
from pipeline.model.keys import GroupVersionKind, key_of, kind_key, object_key, parse_object_key


def test_object_key_spells_core_group_and_cluster_scope() -> None:
    assert object_key("v1", "Pod", "default", "web-0") == "core/Pod/default/web-0"
    assert object_key("apps/v1", "Deployment", "team-a", "api") == "apps/Deployment/team-a/api"
    assert object_key("v1", "Namespace", None, "team-a") == "core/Namespace/_/team-a"
    assert object_key("rbac.authorization.k8s.io/v1", "ClusterRole", "", "view") == (
        "rbac.authorization.k8s.io/ClusterRole/_/view"
    )


def test_key_is_independent_of_the_api_version() -> None:
    assert object_key("batch/v1", "CronJob", "ns", "c") == object_key("batch/v1beta1", "CronJob", "ns", "c")


def test_parse_object_key_inverts_object_key() -> None:
    parsed = parse_object_key(object_key("v1", "Pod", "default", "web-0"))
    assert (parsed.group, parsed.kind, parsed.namespace, parsed.name) == ("", "Pod", "default", "web-0")
    assert parsed.namespaced_name == "default/web-0"
    cluster = parse_object_key("core/Node/_/node-1")
    assert cluster.namespace is None
    assert cluster.namespaced_name == "node-1"


@pytest.mark.parametrize("bad", ["", "a/b/c", "a/b/c/d/e", "a//c/d", "apps/Deployment/ns/"])
def test_malformed_keys_are_rejected_with_the_key_named(bad: str) -> None:
    with pytest.raises(FormatError, match="malformed object key"):
        parse_object_key(bad)


def test_object_key_refuses_parts_with_slashes_or_empty_names() -> None:
    with pytest.raises(FormatError, match="contains '/'"):
        object_key("v1", "Pod", "ns", "a/b")
    with pytest.raises(FormatError, match="empty name"):
        object_key("v1", "Pod", "ns", "")


def test_key_of_reads_an_object_body() -> None:
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "y"}}
    assert key_of(obj) == "apps/Deployment/y/x"
    with pytest.raises(FormatError, match="apiVersion/kind/metadata"):
        key_of({"metadata": {"name": "x"}})


def test_kind_key_stands_for_a_whole_kind() -> None:
    assert kind_key("apps/v1", "Deployment") == "apps/Deployment/*/*"
    assert parse_object_key(kind_key("v1", "Pod")).kind == "Pod"


@pytest.mark.parametrize(
    ("text", "gvk", "formatted"),
    [
        ("apps/v1.Deployment", GroupVersionKind("apps", "v1", "Deployment"), "apps/v1.Deployment"),
        ("v1.Pod", GroupVersionKind("", "v1", "Pod"), "v1.Pod"),
        ("/v1.Pod", GroupVersionKind("", "v1", "Pod"), "v1.Pod"),
        (
            "simkube.io/v1.Simulation",
            GroupVersionKind("simkube.io", "v1", "Simulation"),
            "simkube.io/v1.Simulation",
        ),
    ],
)
def test_gvk_strings_parse_as_simkube_writes_them(text: str, gvk: GroupVersionKind, formatted: str) -> None:
    assert GroupVersionKind.parse(text) == gvk
    assert gvk.format() == formatted


@pytest.mark.parametrize("bad", ["Deployment", "apps/v1", "apps/.Deployment", "a/b/v1.X"])
def test_malformed_gvk_strings_are_rejected(bad: str) -> None:
    with pytest.raises(FormatError, match="malformed GVK"):
        GroupVersionKind.parse(bad)
