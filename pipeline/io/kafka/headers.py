"""Which cluster of a fleet wrote a record: the header a watcher sets, and the filter readers keep one
cluster's records with (by the header alone: other clusters' values are never decoded or kept)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pipeline.model.errors import ConfigError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId

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


class ClusterFilter:
    """Keeps the records of one cluster of a fleet, by :data:`CLUSTER_HEADER` alone.

    ``cluster`` None: the only cluster the topic holds, taken from the first record met (the default
    cluster for records without the header); a record of a second cluster makes :meth:`check` raise,
    naming both: a reader never merges clusters silently. One filter may serve several reads (a
    follow's range, then its tail) so they keep the same cluster."""

    def __init__(self, topic: str, cluster: ClusterId | None) -> None:
        self.topic = topic
        self.cluster = cluster
        self.chosen = cluster is not None
        self.others: set[str] = set()

    def keeps(self, headers: Sequence[tuple[str, bytes]] | None) -> bool:
        if self.cluster is None:
            self.cluster = ClusterId(cluster_named(headers))
            return True
        if is_from_cluster(headers, self.cluster):
            return True
        if not self.chosen:
            self.others.add(cluster_named(headers))
        return False

    def check(self) -> None:
        """Raise ConfigError if, with no cluster chosen, records of several clusters were met."""
        if self.others:
            met = ", ".join(sorted({str(self.cluster), *self.others}))
            raise ConfigError(
                f"topic {self.topic!r} holds records of several clusters ({met}): a fleet shares it; "
                "choose one with --cluster"
            )
