"""Apache Kafka 4.x nodes (KRaft, each a combined broker+controller) on loopback: one by default, or a
cluster of several whose controllers form one quorum (``stack up --brokers 3``).

Started from the jars :func:`pipeline.stack.build.ensure_kafka` collects, with storage formatted once
per data directory so that a stop and a restart keep committed data. Plaintext by default; secured
(TLS, SCRAM, mutual TLS, ACLs: :mod:`pipeline.stack.kafka_security`) when the layout says so.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack import kafka_security
from pipeline.stack.processes import (
    port_open,
    require_tool,
    spawn_detached,
    terminate_process_group,
    wait_until_ready,
)

STARTED_MARKER = "Kafka Server started"
_TOOL_JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
# Kafka's stock performance flags, with a small heap: Kafka relies on the page cache, not the heap.
_BROKER_JVM = [
    "-Xms256m",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]
# A node of a several-broker cluster: the machine runs all of them (2 cores, shared with the clusters), so
# each gets a small heap, one GC thread and the quick JIT only; their load is a test's, not a benchmark's.
_CLUSTER_NODE_JVM = [
    "-Xms64m",
    "-Xmx384m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]


@dataclass(frozen=True, slots=True)
class KafkaLayout:
    """Where one broker keeps its config, data and log, and the ports it listens on."""

    home: Path
    broker_port: int
    controller_port: int
    mtls_port: int | None = None
    """Set on a secured broker: its mutual-TLS listener (the client port is then SASL_SSL)."""
    node_id: int = 1
    quorum: tuple[tuple[int, int], ...] = ()
    """Every node of a several-broker cluster as (node id, controller port); empty for a lone node."""

    @property
    def voters(self) -> str:
        """``controller.quorum.voters``: every node's controller, this one's alone for a lone node."""
        nodes = self.quorum or ((self.node_id, self.controller_port),)
        return ",".join(f"{node}@127.0.0.1:{port}" for node, port in nodes)

    @property
    def replicas(self) -> int:
        """How many brokers the cluster has: the replication factor of its topics by default."""
        return max(len(self.quorum), 1)

    @property
    def secured(self) -> bool:
        return self.mtls_port is not None

    @property
    def bootstrap(self) -> str:
        # a secured broker is reached by the name in its certificate
        host = kafka_security.BROKER_HOST if self.secured else "127.0.0.1"
        return f"{host}:{self.broker_port}"

    @property
    def security_files(self) -> kafka_security.SecurityFiles:
        return kafka_security.SecurityFiles(self.home / "security")

    @property
    def properties(self) -> Path:
        return self.home / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_file(self) -> Path:
        return self.home / "broker.log"


def _listeners(layout: KafkaLayout) -> list[str]:
    if layout.mtls_port is not None:
        files = layout.security_files
        kafka_security.make_materials(files, layout.broker_port, layout.mtls_port)
        return kafka_security.server_properties(
            files, layout.broker_port, layout.mtls_port, layout.controller_port
        )
    return [
        f"listeners=PLAINTEXT://127.0.0.1:{layout.broker_port},CONTROLLER://127.0.0.1:{layout.controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{layout.broker_port}",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    ]


def _replication(layout: KafkaLayout) -> list[str]:
    """Replication of new and internal topics: everything on every broker, and writes with ``acks=all``
    taken while one broker is down (``min.insync.replicas`` one less than the brokers, at least 1)."""
    replicas = layout.replicas
    min_isr = max(replicas - 1, 1)
    settings = [
        f"default.replication.factor={replicas}",
        f"min.insync.replicas={min_isr}",
        f"offsets.topic.replication.factor={replicas}",
        f"transaction.state.log.replication.factor={replicas}",
        f"transaction.state.log.min.isr={min_isr}",
        f"share.coordinator.state.topic.replication.factor={replicas}",
        f"share.coordinator.state.topic.min.isr={min_isr}",
    ]
    if replicas > 1:
        # a node killed on loopback is fenced (and leaves the ISR, so acks=all writes go on) after 3 s
        # without a heartbeat instead of the default 9 s
        settings += ["broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500"]
    return settings


def write_server_properties(layout: KafkaLayout) -> None:
    layout.home.mkdir(parents=True, exist_ok=True)
    # Test-speed tweaks: one offsets partition and no initial rebalance delay make the first
    # consumer-group join take milliseconds instead of seconds.
    layout.properties.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={layout.node_id}",
                f"controller.quorum.voters={layout.voters}",
                *_listeners(layout),
                "controller.listener.names=CONTROLLER",
                f"log.dirs={layout.data_dir}",
                "num.partitions=1",
                *_replication(layout),
                "offsets.topic.num.partitions=1",
                "transaction.state.log.num.partitions=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=true",
                "num.network.threads=2",
                "num.io.threads=2",
                "num.recovery.threads.per.data.dir=1",
                "log.cleaner.backoff.ms=1000",
                # No time retention by default: tests and demos load traces recorded long ago, stamped with
                # their own times, and the default 7 days would delete them at the next 5-minute check,
                # between producing and consuming. Topics made by `kubetape topics` set their own.
                "log.retention.ms=-1",
                "",
            ]
        )
    )


def _java_base(libs: Path, layout: KafkaLayout) -> list[str]:
    java = require_tool("java", "run the Kafka broker")
    return [
        java,
        f"-Dlog4j2.configurationFile={libs / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={layout.home / 'logs'}",
    ]


def new_cluster_id() -> str:
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    return "A" + cluster_id[1:] if cluster_id.startswith("-") else cluster_id


def formatted_cluster_id(layout: KafkaLayout) -> str | None:
    """The cluster id this node's storage was formatted with (None: not formatted yet)."""
    try:
        text = (layout.data_dir / "meta.properties").read_text()
    except OSError:
        return None
    return next(
        (line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("cluster.id=")), None
    )


def format_storage(libs: Path, layout: KafkaLayout, cluster_id: str | None = None) -> None:
    """Format the KRaft storage once (every node of a cluster with the same ``cluster_id``); a formatted
    data dir is kept across restarts."""
    if (layout.data_dir / "meta.properties").exists():
        return
    cluster_id = cluster_id or new_cluster_id()
    argv = [
        *_java_base(libs, layout)[:1],
        *_TOOL_JVM,
        *_java_base(libs, layout)[1:],
        "-cp",
        f"{libs}/*",
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(layout.properties),
        "--ignore-formatted",
        # SCRAM credentials exist from the first start, so the broker can authenticate to itself
        *(kafka_security.scram_format_args(layout.security_files) if layout.secured else []),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(
            f"formatting Kafka storage in {layout.data_dir} failed: "
            f"{(result.stdout + result.stderr).strip()[-800:]}"
        )


def start_broker(libs: Path, layout: KafkaLayout) -> int:
    """Start the broker detached and return its pid (call :func:`wait_ready` next)."""
    java_base = _java_base(libs, layout)
    argv = [
        java_base[0],
        *(_BROKER_JVM if layout.replicas == 1 else _CLUSTER_NODE_JVM),
        *java_base[1:],
        "-cp",
        f"{libs}/*",
        "kafka.Kafka",
        str(layout.properties),
    ]
    return spawn_detached(argv, log_file=layout.log_file, cwd=layout.home)


def wait_ready(layout: KafkaLayout, pid: int, timeout_s: float = 90.0, log_offset: int = 0) -> None:
    """Wait for the broker's "started" log line (after ``log_offset``) and an open listener port: as long
    as its log grows, and ``timeout_s`` after it stopped growing (a secured broker took ~100 s to start
    on a loaded 2-core machine, its log growing all along: a fixed 90 s failed it)."""

    def probe() -> str | None:
        if STARTED_MARKER not in _read_from(layout.log_file, log_offset):
            return "no started line in the log yet"
        return None if port_open(layout.broker_port) else f"port {layout.broker_port} not open yet"

    name = "the Kafka broker" if layout.replicas == 1 else f"Kafka node {layout.node_id}"
    wait_until_ready(
        name, pid, probe, log_file=layout.log_file, timeout_s=timeout_s, progress=lambda: log_size(layout)
    )


def apply_acls(libs: Path, layout: KafkaLayout) -> None:
    """Create each kubetape principal's ACLs on a secured broker, once per data directory: one JVM
    running Kafka's Admin API (``resources/KafkaAcls.java``), as the admin super user."""
    files = layout.security_files
    marker = layout.data_dir / "kubetape-acls-applied"
    if not layout.secured or marker.exists():
        return
    program = Path(__file__).parent / "resources" / "KafkaAcls.java"
    admin = kafka_security.java_admin_properties(files, layout.broker_port)
    java_base = _java_base(libs, layout)
    argv = [java_base[0], *_TOOL_JVM, *java_base[1:], "-cp", f"{libs}/*", str(program), str(admin)]
    result = subprocess.run([*argv, str(files.acl_file)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"creating the ACLs failed: {(result.stdout + result.stderr).strip()[-800:]}")
    marker.write_text("")


def stop_broker(pid: int) -> None:
    # SIGTERM lets the broker flush and shut down cleanly (a controlled shutdown keeps data intact).
    terminate_process_group(pid, grace_s=30.0)


def stop_brokers(pids: list[int]) -> None:
    """Stop the nodes of one cluster together: stopped one by one, the last waits out its grace for a
    quorum that is already gone (30 s of a 3-node cluster's 40)."""
    with ThreadPoolExecutor(max_workers=max(len(pids), 1)) as pool:
        list(pool.map(stop_broker, pids))


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def log_size(layout: KafkaLayout) -> int:
    try:
        return layout.log_file.stat().st_size
    except OSError:
        return 0
