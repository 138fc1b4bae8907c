"""The names of kubetape's Kafka topics, in one place (a deployment may rename the events topic with
``--topic``; the others follow the watcher's and the sink's defaults), and of the header that says which
cluster of a fleet wrote a record."""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId

EVENTS_TOPIC = "kubetape.events"
"""Every published change, in order per object key: what the sink records and consumers read."""
STATE_TOPIC = "kubetape.state"
"""Compacted: the latest published version of each object (the watcher's memory across restarts)."""
RESUME_TOPIC = "kubetape.watch-resume"
"""Compacted: resume points (resourceVersions) and the last lifecycle of each pod."""
DEADLETTER_TOPIC = "kubetape.deadletter"
"""Messages set aside: the sink's undecodable input, the watcher's records the broker refuses."""

CLUSTER_HEADER = "kubetape.cluster"
"""Header naming the :data:`~pipeline.model.keys.ClusterId` of the watcher that wrote a record (every
topic). Absent on the default cluster's records (those of recordings made before fleets). Consumers
filter on it without decoding the value."""


def cluster_header(cluster: ClusterId) -> list[tuple[str, bytes]]:
    """The headers a record from ``cluster`` carries (none for the default cluster, as before fleets)."""
    return [] if cluster == DEFAULT_CLUSTER else [(CLUSTER_HEADER, cluster.encode())]


def cluster_named(headers: Iterable[tuple[str, bytes]] | None) -> str:
    """The cluster a record with ``headers`` names (the default cluster without the header), as text."""
    for name, value in headers or ():
        if name == CLUSTER_HEADER:
            return value.decode(errors="replace")
    return DEFAULT_CLUSTER


def is_from_cluster(headers: Iterable[tuple[str, bytes]] | None, cluster: ClusterId) -> bool:
    """Whether a record with ``headers`` (aiokafka's ``ConsumerRecord.headers``) was written by
    ``cluster``; a record without the header belongs to the default cluster."""
    for name, value in headers or ():
        if name == CLUSTER_HEADER:
            return value == cluster.encode()
    return cluster == DEFAULT_CLUSTER
