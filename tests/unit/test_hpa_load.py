"""The recorded load as simulated pods' usage: the conserve model keeps the owner's total whatever the
number of pods the simulated HPA runs, per-pod gives each pod a recorded pod's mean, hashes of one
reading are one load, and a gap holds the last load."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.model.keys import ObjectKey
from pipeline.model.usage import ContainerUsage, UsageSample
from pipeline.replay.hpa.load import (
    CPU_ANNOTATION,
    MEMORY_ANNOTATION,
    LoadModel,
    OwnerLoad,
    PodUsage,
    RecordedLoad,
    pod_usage,
    usage_annotations,
)

WEB = ObjectKey("apps/Deployment/shop/web")
OTHER = ObjectKey("apps/Deployment/shop/other")


def sample(
    ts_ms: int,
    pods: int,
    cpu: int,
    memory: int = 0,
    *,
    owner: ObjectKey = WEB,
    hash_: str = "a",
    gap: bool = False,
) -> UsageSample:
    containers = (ContainerUsage("app", cpu, memory),) if pods else ()
    return UsageSample(ts_ms, owner, hash_, pods, containers, gap)


@given(
    recorded_pods=st.integers(1, 500),
    cpu=st.integers(0, 10_000_000),
    memory=st.integers(0, 1 << 40),
    running=st.integers(1, 1000),
)
def test_conserve_spreads_the_recorded_total_over_the_running_pods(
    recorded_pods: int, cpu: int, memory: int, running: int
) -> None:
    load = OwnerLoad(0, recorded_pods, cpu, memory)
    usage = pod_usage(load, running, LoadModel.CONSERVE)
    assert usage is not None
    assert abs(usage.cpu_millicores * running - cpu) <= 1e-6 * max(cpu, 1)
    assert abs(usage.memory_bytes * running - memory) <= 1e-6 * max(memory, 1)


@given(recorded_pods=st.integers(1, 500), cpu=st.integers(0, 10_000_000), running=st.integers(1, 1000))
def test_per_pod_gives_every_pod_a_recorded_pods_mean_whatever_runs(
    recorded_pods: int, cpu: int, running: int
) -> None:
    usage = pod_usage(OwnerLoad(0, recorded_pods, cpu, 0), running, LoadModel.PER_POD)
    assert usage is not None
    assert abs(usage.cpu_millicores - cpu / recorded_pods) <= 1e-9 * max(cpu, 1)


def test_no_usage_without_pods_to_give_it_to_or_to_average_over() -> None:
    assert pod_usage(OwnerLoad(0, 2, 100, 0), 0, LoadModel.CONSERVE) is None
    assert pod_usage(OwnerLoad(0, 0, 0, 0), 3, LoadModel.PER_POD) is None
    assert pod_usage(OwnerLoad(0, 0, 0, 0), 3, LoadModel.CONSERVE) == PodUsage(0.0, 0.0)


def test_the_template_hashes_of_one_reading_are_summed_into_one_load() -> None:
    load = RecordedLoad.from_samples(
        [
            sample(1000, 2, 300, hash_="old"),
            sample(1000, 1, 200, hash_="new"),
            sample(2000, 3, 900, hash_="new"),
        ],
        [WEB],
    )
    assert load.at(WEB, 999) is None
    assert load.at(WEB, 1000) == OwnerLoad(1000, 3, 500, 0)
    assert load.at(WEB, 1999) == OwnerLoad(1000, 3, 500, 0)
    assert load.at(WEB, 5000) == OwnerLoad(2000, 3, 900, 0)


def test_a_gap_holds_the_last_load_and_is_counted() -> None:
    load = RecordedLoad.from_samples(
        [
            sample(500, 0, 0, gap=True),  # before any load: nothing to hold
            sample(1000, 2, 400),
            sample(2000, 0, 0, gap=True),
            sample(3000, 4, 1200),
        ],
        [WEB],
    )
    assert load.at(WEB, 600) is None
    held = load.at(WEB, 2500)
    assert held == OwnerLoad(2000, 2, 400, 0, held_over_gap=True)
    assert load.at(WEB, 3000) == OwnerLoad(3000, 4, 1200, 0)
    assert load.to_json() == {str(WEB): {"readings": 3, "gaps_held": 1, "gaps_before_any_load": 1}}


def test_only_the_autoscaled_owners_are_kept() -> None:
    load = RecordedLoad.from_samples([sample(1000, 1, 100), sample(1000, 1, 100, owner=OTHER)], [WEB])
    assert set(load.owners) == {WEB}
    assert load.at(OTHER, 1000) is None


def test_the_annotations_divide_a_pods_usage_among_its_containers() -> None:
    # KWOK's usage-from-annotation gives every container the annotation's value
    assert usage_annotations(PodUsage(300.4, 3 * 1024.0), 3) == {
        CPU_ANNOTATION: "100m",
        MEMORY_ANNOTATION: "1024",
    }
    assert usage_annotations(PodUsage(90.0, 0.0), 0) == {CPU_ANNOTATION: "90m", MEMORY_ANNOTATION: "0"}


def test_load_models_are_named_as_the_flag_names_them() -> None:
    assert LoadModel.parse("per-pod") is LoadModel.PER_POD
    assert LoadModel.parse("conserve") is LoadModel.CONSERVE
