"""Cluster ids and the Kafka message keys of a fleet: two clusters never share a key, the default
cluster's keys are those of recordings made before fleets, and bad ids are refused naming the rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.model.errors import FormatError
from pipeline.model.keys import (
    DEFAULT_CLUSTER,
    ClusterId,
    message_key,
    parse_cluster_id,
    split_message_key,
)

cluster_ids = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?", fullmatch=True).map(ClusterId)
keys = st.from_regex(r"[a-z]+/[A-Za-z]+/[a-z_]+/[a-z0-9.:-]+", fullmatch=True)


def test_a_kube_system_uid_is_a_cluster_id() -> None:
    uid = "0d9d7c56-52e0-4c61-a3ad-3b4f1f5ea3c1"
    assert parse_cluster_id(uid) == uid


@pytest.mark.parametrize("bad", ["", "Prod", "a/b", "-edge", "edge-", "x" * 64, "a b"])
def test_a_bad_cluster_id_is_refused_naming_where_and_the_rule(bad: str) -> None:
    with pytest.raises(FormatError, match=r"--cluster-id: must be"):
        parse_cluster_id(bad, "--cluster-id")


def test_the_default_cluster_keeps_the_keys_recorded_before_fleets() -> None:
    assert message_key(DEFAULT_CLUSTER, "apps/Deployment/ns/web") == "apps/Deployment/ns/web"
    assert message_key(ClusterId("eu"), "apps/Deployment/ns/web") == "eu/apps/Deployment/ns/web"


@given(a=cluster_ids, b=cluster_ids, key_a=keys, key_b=keys)
def test_keys_of_two_clusters_never_collide_and_split_back(
    a: ClusterId, b: ClusterId, key_a: str, key_b: str
) -> None:
    if a != b:
        assert message_key(a, key_a) != message_key(b, key_b)
    assert split_message_key(message_key(a, key_a), a) == key_a


def test_a_key_without_the_cluster_prefix_is_not_the_clusters() -> None:
    assert split_message_key("us/apps/Deployment/ns/web", ClusterId("eu")) is None
