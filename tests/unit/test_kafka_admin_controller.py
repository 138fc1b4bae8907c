"""Where the admin client sends topic creation: the broker the metadata names as controller if it accepts a
connection, else one that does; a broker whose connection drops during the send is passed over for the next;
a broker that answers NOT_CONTROLLER (ZooKeeper mode) sends it on to the
controller of fresh metadata. The real brokers' case (KRaft, the named controller just killed) is
``tests/integration/test_kafka_brokers.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, NotControllerError

from pipeline.io.kafka.clients import new_admin
from pipeline.io.kafka.settings import KafkaSettings


@dataclass
class Broker:
    nodeId: int  # noqa: N815 (aiokafka's name)


@dataclass
class Metadata:
    controller: Broker | None
    ids: list[int]

    def brokers(self) -> list[Broker]:
        return [Broker(i) for i in self.ids]


@dataclass
class Cluster:
    """Three brokers as an admin client sees them: which accept a connection, which one the metadata names
    as controller now and after a refresh, and (ZooKeeper mode) which one alone accepts CreateTopics."""

    live: set[int]
    named: list[int]
    only_controller_accepts: int | None = None
    dropping: set[int] = field(
        default_factory=set
    )  # "ready" (a connection from before it died), yet the send fails
    sent_to: list[int] = field(default_factory=list)
    refreshes: int = 0
    _request_timeout_ms: int = 1000
    _retry_backoff: float = 0.01

    def __post_init__(self) -> None:
        self.cluster = Metadata(Broker(self.named[0]), [1, 2, 3])

    async def force_metadata_update(self) -> bool:
        self.refreshes += 1
        self.cluster.controller = Broker(self.named[min(self.refreshes, len(self.named) - 1)])
        return True

    def get_random_node(self) -> int:
        return 1

    async def ready(self, node_id: int) -> bool:
        return node_id in self.live or node_id in self.dropping

    async def send(self, node_id: int, request: Any) -> str:
        if node_id in self.dropping:
            self.sent_to.append(node_id)
            raise KafkaConnectionError(f"Connection at broker {node_id} closed")
        if node_id not in self.live:
            raise NodeNotReadyError(f"node id {node_id}")
        self.sent_to.append(node_id)
        if self.only_controller_accepts not in (None, node_id):
            raise NotControllerError
        return f"created by {node_id}"


async def _create(cluster: Cluster) -> str:
    admin = new_admin(KafkaSettings("127.0.0.1:9"))
    admin._client = cluster
    response: str = await admin.create_topics([NewTopic("t", 1, 1)])
    return response


async def test_the_named_controller_gets_the_request_when_it_answers() -> None:
    cluster = Cluster(live={1, 2, 3}, named=[3])
    assert await _create(cluster) == "created by 3"
    assert cluster.sent_to == [3]


async def test_a_dead_named_controller_is_passed_over_for_a_broker_that_answers() -> None:
    cluster = Cluster(live={1, 2}, named=[3])
    assert await _create(cluster) == "created by 1"
    assert cluster.refreshes == 0


async def test_a_broker_that_is_not_the_controller_sends_it_on_to_the_one_fresh_metadata_names() -> None:
    # ZooKeeper mode: the controller (3) died, 2 took over; stale metadata still names 3
    cluster = Cluster(live={1, 2}, named=[3, 2], only_controller_accepts=2)
    assert await _create(cluster) == "created by 2"
    assert cluster.sent_to == [1, 2]


async def test_a_named_controller_whose_old_connection_drops_during_the_send_is_passed_over() -> None:
    # killed just before the send: its connection still counted as ready, the reset arrived during the send
    cluster = Cluster(live={1, 2}, named=[3], dropping={3})
    assert await _create(cluster) == "created by 1"
    assert cluster.sent_to == [3, 1]


async def test_each_broker_is_tried_once_and_the_last_failure_is_raised_when_every_connection_drops() -> None:
    cluster = Cluster(live=set(), named=[3], dropping={1, 2, 3})
    with pytest.raises(KafkaConnectionError, match="broker"):
        await _create(cluster)
    assert sorted(cluster.sent_to) == [1, 2, 3]


async def test_with_no_broker_answering_the_clients_own_error_names_one() -> None:
    cluster = Cluster(live=set(), named=[3])
    with pytest.raises(NodeNotReadyError, match="node id 3"):
        await _create(cluster)
