"""The recorded-load sample: bounds that reject broken readings, and a lossless wire form."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.model.errors import FormatError
from pipeline.model.keys import object_key
from pipeline.model.usage import (
    CPU_MILLICORES_MAX,
    ContainerUsage,
    UsageSample,
    usage_from_wire,
)

OWNER = object_key("apps/v1", "Deployment", "shop", "web")


def sample(**changes: object) -> UsageSample:
    fields: dict[str, object] = {
        "ts_ms": 1_700_000_000_000,
        "owner_key": OWNER,
        "template_hash": "5d8f7",
        "pods": 3,
        "containers": (ContainerUsage("app", 540, 3 * 64 << 20), ContainerUsage("sidecar", 30, 3 << 20)),
    }
    fields.update(changes)
    return UsageSample(**fields)  # type: ignore[arg-type]


def test_totals_and_per_pod_usage_come_from_the_sums_and_the_pod_count() -> None:
    usage = sample()
    assert usage.cpu_millicores == 570
    assert usage.memory_bytes == (3 * 64 << 20) + (3 << 20)
    assert usage.per_pod()["app"] == (180.0, float(64 << 20))
    assert sample(pods=0, containers=()).per_pod() == {}


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"containers": (ContainerUsage("app", -1, 0),)}, "negative or absurd"),
        ({"containers": (ContainerUsage("app", CPU_MILLICORES_MAX + 1, 0),)}, "negative or absurd"),
        ({"containers": (ContainerUsage("app", 1, 1), ContainerUsage("app", 1, 1))}, "appears twice"),
        ({"pods": 0}, "zero pods"),
        ({"pods": -2}, "pod count"),
        ({"owner_key": "web"}, "owner key"),
        ({"ts_ms": True}, "time"),
    ],
)
def test_a_broken_reading_is_rejected_naming_the_owner(changes: dict[str, object], words: str) -> None:
    with pytest.raises(FormatError, match=words) as raised:
        sample(**changes)
    assert OWNER in str(raised.value) or changes.get("owner_key") == "web"


@given(
    pods=st.integers(1, 1000),
    cpu=st.integers(0, CPU_MILLICORES_MAX),
    memory=st.integers(0, 1 << 40),
    gap=st.booleans(),
)
def test_the_wire_form_round_trips_through_msgpack(pods: int, cpu: int, memory: int, gap: bool) -> None:
    usage = sample(pods=pods, containers=(ContainerUsage("app", cpu, memory),), gap=gap)
    decoded = usage_from_wire(msgpack.unpackb(msgpack.packb(usage.to_wire())))
    assert decoded == usage


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"containers": "x"},
        {"containers": [["app", 1]]},
        {"ts": 1, "owner": OWNER, "pods": 1, "containers": [[1, 2, 3]]},
    ],
)
def test_malformed_wire_data_is_a_format_error(data: object) -> None:
    with pytest.raises(FormatError):
        usage_from_wire(data)
