"""A watcher restarted in a fleet reads back only its own cluster's state and resume records, keyed as
it wrote them: another cluster's object of the same name is not its memory."""

from __future__ import annotations

from typing import Any

from aiokafka import ConsumerRecord

from pipeline.io.kafka.headers import CLUSTER_HEADER, cluster_header
from pipeline.io.kafka.reads import own_record_key
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId, message_key

EU, US = ClusterId("eu"), ClusterId("us")


def record(cluster: ClusterId, key: str) -> ConsumerRecord[bytes, bytes]:
    headers: Any = tuple(cluster_header(cluster))
    return ConsumerRecord(
        "kubetape.state", 0, 0, 0, 0, message_key(cluster, key).encode(), b"v", None, 1, 1, headers
    )


def test_each_cluster_reads_back_its_own_records_without_the_prefix() -> None:
    key = "apps/Deployment/ns/web"
    records = [record(EU, key), record(US, key), record(DEFAULT_CLUSTER, key)]
    assert [own_record_key(r, EU) for r in records] == [key, None, None]
    assert [own_record_key(r, US) for r in records] == [None, key, None]
    assert [own_record_key(r, DEFAULT_CLUSTER) for r in records] == [None, None, key]


def test_a_record_whose_header_and_key_disagree_is_not_read_back() -> None:
    forged = ConsumerRecord(
        "kubetape.state",
        0,
        0,
        0,
        0,
        b"us/apps/Deployment/ns/web",
        b"v",
        None,
        1,
        1,
        ((CLUSTER_HEADER, b"eu"),),
    )
    assert own_record_key(forged, EU) is None
