"""A store holds each cluster of a fleet apart: ``clusters/<id>/`` beside the default cluster's root, a
reader picks one, and a store of several clusters read without ``--cluster`` is refused naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.model.errors import ConfigError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.segment_store import segment_name
from pipeline.store.store_url import (
    LocalLocation,
    S3Location,
    StoreLocation,
    cluster_location,
    cluster_store_location,
    stored_clusters,
)


def fill(location: StoreLocation) -> None:
    assert isinstance(location, LocalLocation)
    LocalSegmentStore(location.path).put(segment_name(0, 0), b"segment bytes")


def test_each_cluster_has_a_store_of_its_own_and_the_default_one_is_the_root(tmp_path: Path) -> None:
    root = LocalLocation(tmp_path)
    assert cluster_store_location(root, DEFAULT_CLUSTER) == root
    assert cluster_store_location(root, ClusterId("eu")) == LocalLocation(tmp_path / "clusters" / "eu")
    assert cluster_store_location(S3Location("b", "kt/prod"), ClusterId("eu")) == S3Location(
        "b", "kt/prod/clusters/eu"
    )
    assert cluster_store_location(S3Location("b", ""), ClusterId("eu")) == S3Location("b", "clusters/eu")


def test_a_store_lists_its_clusters_and_a_reader_picks_one(tmp_path: Path) -> None:
    root = LocalLocation(tmp_path)
    assert stored_clusters(root) == []
    assert cluster_location(root, None) == root  # nothing recorded yet: the root, as before fleets
    fill(cluster_store_location(root, ClusterId("eu")))
    assert stored_clusters(root) == ["eu"]
    assert cluster_location(root, None) == cluster_store_location(root, ClusterId("eu"))  # the only one
    fill(root)  # a recording from before fleets
    fill(cluster_store_location(root, ClusterId("us")))
    assert stored_clusters(root) == [DEFAULT_CLUSTER, "eu", "us"]
    assert cluster_location(root, "us") == LocalLocation(tmp_path / "clusters" / "us")
    assert cluster_location(root, "default") == root


def test_a_store_of_several_clusters_read_without_a_cluster_is_refused_naming_them(tmp_path: Path) -> None:
    root = LocalLocation(tmp_path)
    fill(cluster_store_location(root, ClusterId("eu")))
    fill(cluster_store_location(root, ClusterId("us")))
    with pytest.raises(ConfigError, match=r"holds 2 clusters \(eu, us\); choose one with --cluster"):
        cluster_location(str(tmp_path), None)
    with pytest.raises(ConfigError, match=r"--cluster: must be"):
        cluster_location(root, "EU/x")
