"""The recording benchmark's seeded workload: the pods it asks for, and the spec versions an exact
recording of it must count (the benchmark's verdict rests on them)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.record_workload import (
    ChangeKind,
    expected_spec_changes,
    initial_replicas,
    nodes_for,
    steady_changes,
)


@given(st.integers(1, 300), st.integers(0, 5000), st.integers(0, 10))
def test_the_ramp_asks_for_exactly_the_pods_with_at_least_one_each(
    deployments: int, extra: int, seed: int
) -> None:
    replicas = initial_replicas(deployments + extra, deployments, seed)
    assert len(replicas) == deployments
    assert sum(replicas) == deployments + extra
    assert min(replicas) >= 1


def test_fewer_pods_than_deployments_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="10 pods cannot be spread over 20 Deployments"):
        initial_replicas(10, 20, 1)


def test_the_steady_phase_has_the_rate_and_every_kind_and_stays_near_the_total() -> None:
    replicas = initial_replicas(5000, 100, 1)
    changes = steady_changes(replicas, changes_per_min=100, steady_s=600, seed=1)
    assert len(changes) == 1000
    assert [c.at_s for c in changes[:3]] == [0.0, 0.6, 1.2]
    assert {c.kind for c in changes} == set(ChangeKind)
    current = list(replicas)
    for change in changes:
        if change.kind is ChangeKind.SCALE:
            assert change.replicas != current[change.index]  # a scale always changes the count
            assert change.replicas >= 1
            current[change.index] = change.replicas
        else:
            assert change.replicas == current[change.index]
    assert abs(sum(current) - 5000) <= 100
    assert replicas == initial_replicas(5000, 100, 1)  # the plan leaves its input alone


@given(st.integers(2, 40), st.integers(0, 5))
def test_expected_versions_count_creations_scales_and_rolls_but_not_annotations(
    deployments: int, seed: int
) -> None:
    replicas = initial_replicas(deployments * 3, deployments, seed)
    changes = steady_changes(replicas, changes_per_min=60, steady_s=120, seed=seed)
    counts = expected_spec_changes(deployments, changes, replicas)
    # a naive reference: one version per creation, then one per change that is not an annotate
    reference = [1] * deployments
    for change in changes:
        reference[change.index] += change.kind is not ChangeKind.ANNOTATE
    assert counts == reference


def test_nodes_hold_the_pods_with_room_for_a_rollouts_surge() -> None:
    assert nodes_for(50_000) * 110 >= 50_000 * 1.25
    assert nodes_for(5_000) == 57
