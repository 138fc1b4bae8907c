"""Readers of a topic a fleet shares keep one cluster's records by header, and never merge clusters
silently: without --cluster, a record of a cluster other than the default one is an error naming it."""

from __future__ import annotations

import pytest

from pipeline.io.kafka_range import ClusterFilter
from pipeline.io.topics import CLUSTER_HEADER
from pipeline.model.errors import ConfigError
from pipeline.model.keys import ClusterId

EU = [(CLUSTER_HEADER, b"eu")]
US = [("traceparent", b"x"), (CLUSTER_HEADER, b"us")]
LEGACY: list[tuple[str, bytes]] = []


def test_a_chosen_cluster_keeps_its_records_only() -> None:
    wanted = ClusterFilter("kubetape.events", ClusterId("us"))
    assert [wanted.keeps(h) for h in (EU, US, LEGACY, None)] == [False, True, False, False]
    wanted.check()  # the others were skipped on purpose


def test_without_a_cluster_the_default_one_is_read_and_others_are_an_error_naming_them() -> None:
    wanted = ClusterFilter("kubetape.events", None)
    assert [wanted.keeps(h) for h in (LEGACY, None)] == [True, True]
    wanted.check()
    assert [wanted.keeps(h) for h in (EU, US, EU)] == [False, False, False]
    with pytest.raises(
        ConfigError, match=r"'kubetape.events' holds records of other clusters .*\(eu, us\).*--cluster"
    ):
        wanted.check()
