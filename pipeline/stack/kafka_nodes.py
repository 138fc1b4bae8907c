"""The stack's Kafka nodes as one cluster: each node's layout, the stopped ones started together, all
of them stopped. A base class of :class:`~.stack.LocalStack`, whose ``up``, ``start_kafka``,
``stop_kafka``, ``down`` and ``info`` call these methods.

Apart from :mod:`.stack` because running several brokers as one KRaft cluster (a shared cluster id,
the quorum started before any node is waited for) is a concern of its own; :mod:`.kafka` runs one
broker's process.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.stack import kafka
from pipeline.stack.ports import free_port
from pipeline.stack.progress import Reporter
from pipeline.stack.state import KafkaNodeState, KafkaState, StackState, check_kafka_request
from pipeline.stack.versions import StackVersions


class KafkaNodes:
    """The Kafka nodes of the stack kept in ``stack_dir`` (the attributes :class:`~.stack.LocalStack`
    sets)."""

    stack_dir: Path
    versions: StackVersions
    report: Reporter
    state_path: Path

    def _kafka_layouts(self, state: KafkaState) -> list[kafka.KafkaLayout]:
        """Each node's layout: a lone broker in ``kafka/``, the nodes of a cluster in ``kafka/node-N/``."""
        if len(state.nodes) == 1:
            node = state.nodes[0]
            return [
                kafka.KafkaLayout(
                    self.stack_dir / "kafka", node.broker_port, node.controller_port, node.mtls_port
                )
            ]
        quorum = tuple((index, node.controller_port) for index, node in enumerate(state.nodes, 1))
        return [
            kafka.KafkaLayout(
                self.stack_dir / "kafka" / f"node-{index}",
                node.broker_port,
                node.controller_port,
                node.mtls_port,
                node_id=index,
                quorum=quorum,
            )
            for index, node in enumerate(state.nodes, 1)
        ]

    def _ensure_kafka_running(
        self, state: StackState, libs: Path, security: str | None = None, brokers: int | None = None
    ) -> None:
        """Start every Kafka node that does not run; ``security`` and ``brokers`` None keep the existing
        cluster's (a new one: plaintext, one broker)."""
        check_kafka_request(state.kafka, security, brokers, self.stack_dir)
        secured = security not in (None, "plaintext")
        if state.kafka is not None:
            if security is not None:
                state.kafka.security = security  # sasl-ssl and mtls are the same broker: only `env` differs
        else:
            state.kafka = KafkaState(
                [
                    KafkaNodeState(free_port(), free_port(), mtls_port=free_port() if secured else None)
                    for _ in range(brokers or 1)
                ],
                security=security or "plaintext",
            )
        stopped = [
            (node, layout)
            for node, layout in zip(state.kafka.nodes, self._kafka_layouts(state.kafka), strict=True)
            if not node.running
        ]
        if not stopped:
            return
        layouts = self._kafka_layouts(state.kafka)
        # the nodes of one cluster share the id their storage is formatted with
        cluster_id = (
            next(filter(None, map(kafka.formatted_cluster_id, layouts)), None) or kafka.new_cluster_id()
        )
        started = time.monotonic()
        waits = []
        to_start = [layout for _node, layout in stopped]
        for layout in to_start:
            kafka.write_server_properties(layout)
        with ThreadPoolExecutor(max_workers=len(to_start)) as pool:  # a JVM each: together, not in turn
            list(pool.map(lambda layout: kafka.format_storage(libs, layout, cluster_id), to_start))
        for node, layout in stopped:
            what = "broker" if len(layouts) == 1 else f"node {layout.node_id} of {len(layouts)}"
            self.report(f"Kafka {self.versions.kafka}: starting {what} on {layout.bootstrap}")
            offset = kafka.log_size(layout)
            node.pid = kafka.start_broker(libs, layout)
            state.save(self.state_path)
            waits.append((layout, node.pid, offset))
        # all started before any is waited for: a node of a quorum finishes starting only with a majority
        for layout, pid, offset in waits:
            kafka.wait_ready(layout, pid, log_offset=offset)
        kafka.apply_acls(libs, layouts[0])
        self.report(f"Kafka {self.versions.kafka}: ready in {time.monotonic() - started:.1f}s")

    def _stop_kafka_nodes(self, state: KafkaState) -> None:
        running = [node for node in state.nodes if node.pid]
        kafka.stop_brokers([node.pid for node in running if node.pid])
        for node in running:
            node.pid = None
        if running:
            self.report(
                "Kafka broker stopped" if len(state.nodes) == 1 else f"{len(running)} Kafka brokers stopped"
            )
