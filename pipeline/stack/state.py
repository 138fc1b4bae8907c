"""What the local stack keeps in ``<stack dir>/state.json`` (:class:`StackState`: the Kafka nodes, the
clusters, the Karpenters, the S3 server) and what a client is given to reach a running stack
(:class:`StackInfo`), with the check of what a request may ask of the saved Kafka.

Apart from :mod:`.stack`, which starts and stops the processes, because these are plain records that
commands, services and tests read (``kubetape stack``'s options, a Karpenter's saved settings, the
addresses of a running stack) without starting anything.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack import kafka_security, karpenter, real_node, s3
from pipeline.stack.processes import pid_alive

MAX_BROKERS = 5


@dataclass(slots=True)
class KafkaNodeState:
    """One Kafka node (a broker and a controller of the quorum) of the stack."""

    broker_port: int
    controller_port: int
    pid: int | None = None
    mtls_port: int | None = None
    """Set on a secured broker: its mutual-TLS listener."""

    @property
    def running(self) -> bool:
        return bool(self.pid and pid_alive(self.pid))


@dataclass(slots=True)
class KafkaState:
    nodes: list[KafkaNodeState]
    """Node ``i + 1`` of the KRaft cluster at ``nodes[i]``; one for the default broker."""
    security: str = "plaintext"
    """One of :data:`kafka_security.SECURITY_MODES`; a secured broker also listens for mutual TLS."""

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> KafkaState:
        if "nodes" not in raw:  # written before the stack could run several brokers: its one node
            node = {k: v for k, v in raw.items() if k != "security"}
            return cls([KafkaNodeState(**node)], str(raw.get("security", "plaintext")))  # type: ignore[arg-type]
        nodes = [KafkaNodeState(**node) for node in raw["nodes"]]  # type: ignore[attr-defined]
        return cls(nodes, str(raw.get("security", "plaintext")))

    @property
    def secured(self) -> bool:
        return self.nodes[0].mtls_port is not None

    @property
    def bootstrap(self) -> str:
        """Every broker's client address (``host:port,host:port``): a client reaches the cluster while
        any one of them runs."""
        if self.security == "mtls" and self.secured:
            return ",".join(f"{kafka_security.BROKER_HOST}:{node.mtls_port}" for node in self.nodes)
        host = kafka_security.BROKER_HOST if self.secured else "127.0.0.1"
        return ",".join(f"{host}:{node.broker_port}" for node in self.nodes)


@dataclass(slots=True)
class StackState:
    kafka: KafkaState | None = None
    clusters: list[str] = field(default_factory=list)
    karpenter: dict[str, karpenter.KarpenterState] = field(default_factory=dict)
    """Running Karpenters by the cluster they scale."""
    s3: s3.S3State | None = None
    real_node: real_node.RealNodeState | None = None
    """The cluster node run by a real kubelet (``stack up --real-node CLUSTER``), if any."""

    @classmethod
    def load(cls, path: Path) -> StackState:
        if not path.exists():
            return cls()
        try:
            raw = json.loads(path.read_text())
            kafka_raw = raw.get("kafka")
            s3_raw = raw.get("s3")
            node_raw = raw.get("real_node")
            return cls(
                kafka=KafkaState.from_json(kafka_raw) if kafka_raw else None,
                clusters=list(raw.get("clusters", [])),
                karpenter={
                    name: karpenter.KarpenterState(**value)
                    for name, value in (raw.get("karpenter") or {}).items()
                },
                s3=s3.S3State(**s3_raw) if s3_raw else None,
                real_node=real_node.RealNodeState(**node_raw) if node_raw else None,
            )
        except (ValueError, TypeError) as exc:
            raise StackError(
                f"stack state file {path} is unreadable ({exc}); run `kubetape stack down "
                f"--force` or delete it"
            ) from exc

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)


@dataclass(frozen=True, slots=True)
class StackInfo:
    """What a user or a test needs to talk to a running stack."""

    stack_dir: Path
    bootstrap: str
    kubeconfigs: dict[str, Path]
    bin_dir: Path
    s3_endpoint: str | None = None
    """The local S3 server (bucket :data:`pipeline.stack.s3.BUCKET`, credentials in :meth:`env_lines`)."""
    kafka_configs: dict[str, Path] = field(default_factory=dict)
    """A secured broker's ``--kafka-config`` file per kubetape principal (``admin`` may do anything)."""

    @property
    def kafka_config(self) -> Path | None:
        """The client config every command gets from ``stack env`` on a secured broker: the admin's."""
        return self.kafka_configs.get(kafka_security.ADMIN)

    def env_lines(self) -> list[str]:
        lines = [
            f"export KUBETAPE_BOOTSTRAP={self.bootstrap}",
            *(
                [f"export KUBETAPE_KAFKA_CONFIG={self.kafka_config}"]
                + [
                    f"# least privilege: --kafka-config {path} ({who})"
                    for who, path in self.kafka_configs.items()
                ]
                if self.kafka_config
                else []
            ),
            f"export KUBETAPE_STACK_DIR={self.stack_dir}",
            f"export PATH={self.bin_dir}:$PATH",
        ]
        for name, path in sorted(self.kubeconfigs.items()):
            lines.append(f"export KUBECONFIG_{name.upper().replace('-', '_')}={path}")
        if self.s3_endpoint:
            lines += s3.env_lines(self.s3_endpoint)
        return lines


def check_kafka_request(
    running: KafkaState | None, security: str | None, brokers: int | None, stack_dir: Path
) -> None:
    """Refuse a security mode or broker count the stack cannot run, or that the ``running`` cluster
    does not have (None: keep what it has)."""
    if security is not None and security not in kafka_security.SECURITY_MODES:
        raise StackError(
            f"--kafka-security {security!r}: use one of {', '.join(kafka_security.SECURITY_MODES)}"
        )
    if brokers is not None and not 1 <= brokers <= MAX_BROKERS:
        raise StackError(f"--brokers {brokers}: run between 1 and {MAX_BROKERS} Kafka brokers")
    secured = security not in (None, "plaintext")
    if secured and (brokers or 1) > 1:
        raise StackError(
            f"--brokers {brokers} with --kafka-security {security}: the secured broker runs alone; "
            "use --brokers 1, or a plaintext cluster for several brokers"
        )
    if running is None:
        return
    if security is not None and (security == "plaintext") == running.secured:
        raise StackError(
            f"the stack in {stack_dir} has a {running.security} broker, not {security}; "
            "`kubetape stack down` first"
        )
    if brokers is not None and brokers != len(running.nodes):
        raise StackError(
            f"the stack in {stack_dir} runs {len(running.nodes)} Kafka broker(s), not "
            f"{brokers}; `kubetape stack down` first"
        )
