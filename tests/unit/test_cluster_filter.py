"""Readers of a topic a fleet shares keep one cluster's records by header, and never merge clusters
silently: without --cluster they read the topic's only cluster, and a second one is an error naming both."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pipeline.io.kafka.headers import CLUSTER_HEADER, ClusterFilter
from pipeline.model.errors import ConfigError
from pipeline.model.keys import ClusterId

EU = [(CLUSTER_HEADER, b"eu")]
US = [("traceparent", b"x"), (CLUSTER_HEADER, b"us")]
LEGACY: list[tuple[str, bytes]] = []


def test_a_chosen_cluster_keeps_its_records_only() -> None:
    wanted = ClusterFilter("kubetape.events", ClusterId("us"))
    assert [wanted.keeps(h) for h in (EU, US, LEGACY, None)] == [False, True, False, False]
    wanted.check()  # the others were skipped on purpose


def test_without_a_cluster_the_only_one_is_read_and_a_second_is_an_error_naming_them() -> None:
    wanted = ClusterFilter("kubetape.events", None)
    assert [wanted.keeps(h) for h in (EU, EU)] == [True, True]
    wanted.check()  # one cluster so far: a single-cluster topic reads as before fleets
    assert wanted.cluster == "eu"
    assert [wanted.keeps(h) for h in (US, LEGACY, EU)] == [False, False, True]
    with pytest.raises(
        ConfigError, match=r"'kubetape.events' holds records of several clusters \(default, eu, us\)"
    ):
        wanted.check()


def test_records_without_the_header_are_the_default_clusters() -> None:
    wanted = ClusterFilter("kubetape.events", None)
    assert [wanted.keeps(h) for h in (LEGACY, None)] == [True, True]
    assert wanted.cluster == "default"
    wanted.check()


class ClusterFilterMachine(RuleBasedStateMachine):
    """Records of random clusters against the naive model: the chosen cluster, else the first one met,
    is kept; the rest is dropped; an error exactly when, unchosen, two clusters were met."""

    def __init__(self) -> None:
        super().__init__()
        self.filter: ClusterFilter | None = None
        self.chosen: str | None = None
        self.met: list[str] = []

    @initialize(chosen=st.sampled_from([None, "default", "eu", "us"]))
    def start(self, chosen: str | None) -> None:
        self.filter = ClusterFilter("t", ClusterId(chosen) if chosen else None)
        self.chosen = chosen

    @rule(cluster=st.sampled_from(["default", "eu", "us"]), noise=st.booleans())
    def record(self, cluster: str, noise: bool) -> None:
        assert self.filter is not None
        headers = [("traceparent", b"x")] if noise else []
        if cluster != "default":
            headers.append((CLUSTER_HEADER, cluster.encode()))
        self.met.append(cluster)
        kept = self.chosen or self.met[0]
        assert self.filter.keeps(headers) == (cluster == kept)

    @invariant()
    def refuses_a_merge_exactly_when_two_unchosen_clusters_were_met(self) -> None:
        assert self.filter is not None
        merged = self.chosen is None and len(set(self.met)) > 1
        if merged:
            with pytest.raises(ConfigError, match="several clusters"):
                self.filter.check()
        else:
            self.filter.check()


TestClusterFilterMachine = ClusterFilterMachine.TestCase
