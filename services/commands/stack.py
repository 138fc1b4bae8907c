"""``kubetape stack up|down|status|env|nodes|build``: the local real stack (Kafka + KWOK clusters)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.stack.karpenter import DEFAULT_INSTANCE_TYPES, KarpenterSettings
from pipeline.stack.kwok import DEFAULT_NODE_SKELETON, PROFILES
from pipeline.stack.progress import stderr_reporter
from pipeline.stack.stack import AUTOSCALERS, DEFAULT_CLUSTERS, LocalStack
from pipeline.stack.state import MAX_BROKERS, StackState
from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class StackSettings:
    """``stack build``, ``status`` and ``env``: which stack."""

    stack_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class StackBuildSettings(StackSettings):
    autoscaler: str | None = None
    """Also build this autoscaler (else it is built on first use)."""
    metrics: bool = False
    """Also build metrics-server (else it is built on first use)."""
    real_node: bool = False
    """Also build the real node's kubelet and sandbox image (else they are made on first use)."""


@dataclass(frozen=True, slots=True)
class StackUpSettings(StackSettings):
    clusters: list[str] | None = None
    nodes: int = 0
    profile: str = "default"
    metrics: bool = False
    autoscaler: str | None = None
    autoscaler_cluster: list[str] | None = None
    instance_types: Path = DEFAULT_INSTANCE_TYPES
    kafka_security: str | None = None
    brokers: int | None = None
    real_node: str | None = None


@dataclass(frozen=True, slots=True)
class StackDownSettings(StackSettings):
    keep_data: bool = False


@dataclass(frozen=True, slots=True)
class StackNodesSettings(StackSettings):
    cluster: str = ""
    count: int = 0
    skeleton: Path = DEFAULT_NODE_SKELETON
    prefix: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stack-dir",
        type=Path,
        default=None,
        help="where the stack keeps state and data (default: $KUBETAPE_STACK_DIR or "
        "~/.cache/kubetape/stack/default)",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    build = actions.add_parser(
        "build",
        help="build and cache the stack's components without starting anything (Karpenter with "
        "--autoscaler; otherwise it is built on first use)",
    )
    build.add_argument(
        "--autoscaler",
        choices=AUTOSCALERS,
        default=None,
        help="also build this autoscaler (the test suite does, for its autoscaler tests)",
    )
    build.add_argument(
        "--metrics",
        action="store_true",
        help="also build metrics-server (the test suite does, for its Metrics API test)",
    )
    build.add_argument(
        "--real-node",
        action="store_true",
        help="also build the real node's kubelet and its sandbox image (the test suite does, for its "
        "real node test)",
    )
    build.set_defaults(settings=from_flags(StackBuildSettings), func=_build)

    up = actions.add_parser("up", help="start Kafka and the named KWOK clusters (idempotent)")
    up.add_argument(
        "--cluster",
        action="append",
        dest="clusters",
        default=None,
        help=f"cluster name, repeatable (default: {', '.join(DEFAULT_CLUSTERS)})",
    )
    up.add_argument("--nodes", type=int, default=0, help="fake nodes to add to each new cluster")
    up.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="default",
        help="control-plane and KWOK settings of new clusters: 'large' for 1k-5k fake nodes (more "
        "requests in flight, controller, scheduler and KWOK workers); 'large-sampled' also lets the "
        "scheduler score 10%% of the nodes, which can change where pods land (default: default)",
    )
    up.add_argument(
        "--metrics",
        action="store_true",
        help="new clusters serve the Metrics API (kubectl top, the HPA): metrics-server over KWOK's "
        "emulated kubelet metrics; pods use what their kwok.x-k8s.io/usage-cpu and usage-memory "
        "annotations say (docs/metrics.md; builds metrics-server on first use, ~4 min)",
    )
    up.add_argument(
        "--autoscaler",
        choices=AUTOSCALERS,
        default=None,
        help="run this autoscaler beside --autoscaler-cluster (Karpenter with its KWOK provider)",
    )
    up.add_argument(
        "--autoscaler-cluster",
        action="append",
        default=None,
        metavar="NAME",
        help="cluster the autoscaler scales, repeatable (default: sim)",
    )
    up.add_argument(
        "--instance-types",
        type=Path,
        default=DEFAULT_INSTANCE_TYPES,
        help="Karpenter KWOK provider instance types (JSON; default: four kwok-standard-N types with prices)",
    )
    up.add_argument(
        "--kafka-security",
        choices=["plaintext", "sasl-ssl", "mtls"],
        default=None,
        help="plaintext (default, fastest), or a secured broker: TLS with a CA the stack makes, SCRAM "
        "users and ACLs per kubetape principal (watcher, sink, replayer, analytics, admin), and a mutual-TLS "
        "listener; sasl-ssl and mtls start the same broker and choose what `stack env` prints "
        "(docs/production-kafka.md)",
    )
    up.add_argument(
        "--brokers",
        type=int,
        default=None,
        metavar="N",
        help=f"Kafka brokers of a new stack (1 to {MAX_BROKERS}; default 1): several form one KRaft cluster "
        "on loopback, with new and internal topics on every broker and min.insync.replicas one less, so "
        "a broker can be killed under replicated topics (plaintext only; docs/stack.md)",
    )
    up.add_argument(
        "--real-node",
        default=None,
        metavar="CLUSTER",
        help="give this cluster (one of --cluster) a node run by a real kubelet over containerd and runc, "
        "beside its KWOK nodes: builds the kubelet on first use; needs root and Debian's containerd, runc, "
        "containernetworking-plugins and buildah (docs/stack.md, 'A real node')",
    )
    up.set_defaults(settings=from_flags(StackUpSettings), func=_up)

    down = actions.add_parser("down", help="stop every process of the stack and delete its data")
    down.add_argument("--keep-data", action="store_true", help="stop processes but keep data for a later up")
    down.set_defaults(settings=from_flags(StackDownSettings), func=_down)

    status = actions.add_parser("status", help="show what is running (JSON)")
    status.set_defaults(settings=from_flags(StackSettings), func=_status)

    env = actions.add_parser("env", help='print shell exports (eval "$(kubetape stack env)")')
    env.set_defaults(settings=from_flags(StackSettings), func=_env)

    nodes = actions.add_parser("nodes", help="add N fake nodes to a cluster from a Node YAML skeleton")
    nodes.add_argument("--cluster", required=True)
    nodes.add_argument(
        "--skeleton",
        type=Path,
        default=DEFAULT_NODE_SKELETON,
        help="Node YAML: capacity, labels, taints (default: a 8-CPU/32Gi node)",
    )
    nodes.add_argument("--count", type=int, required=True)
    nodes.add_argument("--prefix", default=None, help="node name prefix (default: the skeleton's name)")
    nodes.set_defaults(settings=from_flags(StackNodesSettings), func=_nodes)


def _stack(args: StackSettings) -> LocalStack:
    return LocalStack(args.stack_dir, report=stderr_reporter)


def _build(args: StackBuildSettings) -> int:
    stack = _stack(args)
    libs, bin_dir = stack.build()
    built = {"kafka_libs": str(libs), "kube_bin_dir": str(bin_dir)}
    # Karpenter only on request: the demo and most commands never start it (a stack or replay with
    # --autoscaler builds it on first use); the test suite asks, so that its ~2–4 min are paid in set-up
    # rather than under an autoscaler test's deadline
    if args.autoscaler is not None:
        built["karpenter_dir"] = str(stack.build_autoscaler())
    if args.metrics:
        built["metrics_server"] = str(stack.build_metrics_server())
    if args.real_node:
        built.update(stack.build_real_node())
    print(json.dumps(built, indent=2))
    return 0


def _up(args: StackUpSettings) -> int:
    stack = _stack(args)
    clusters = args.clusters or list(DEFAULT_CLUSTERS)
    before = set(StackState.load(stack.state_path).clusters)
    autoscaled = (args.autoscaler_cluster or ["sim"]) if args.autoscaler else []
    info = stack.up(
        clusters,
        profile=args.profile,
        metrics=args.metrics,
        autoscaled=autoscaled,
        autoscaler_settings=KarpenterSettings(instance_types=args.instance_types),
        kafka_security_mode=args.kafka_security,
        brokers=args.brokers,
        real_node_cluster=args.real_node,
    )
    if args.nodes:
        for name in clusters:
            if name not in before:
                stack.add_nodes(name, DEFAULT_NODE_SKELETON, args.nodes)
    print("\n".join(info.env_lines()))
    return 0


def _down(args: StackDownSettings) -> int:
    _stack(args).down(keep_data=args.keep_data)
    return 0


def _status(args: StackSettings) -> int:
    status = _stack(args).status()
    print(json.dumps(status, indent=2))
    kafka = status["kafka"]
    clusters = status["clusters"]
    autoscalers = status["autoscalers"]
    s3 = status.get("s3")
    node = status.get("real_node")
    healthy = (
        (node is None or bool(isinstance(node, dict) and node.get("ready")))
        and bool(isinstance(kafka, dict) and kafka.get("running"))
        and bool(isinstance(s3, dict) and s3.get("running"))
        and all(
            c["healthy"]
            for c in clusters.values()  # type: ignore[attr-defined]
        )
        and all(
            a["healthy"]
            for a in autoscalers.values()  # type: ignore[attr-defined]
        )
    )
    return 0 if healthy else 1


def _env(args: StackSettings) -> int:
    print("\n".join(_stack(args).info().env_lines()))
    return 0


def _nodes(args: StackNodesSettings) -> int:
    names = _stack(args).add_nodes(args.cluster, args.skeleton, args.count, args.prefix)
    print("\n".join(names))
    return 0
