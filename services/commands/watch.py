"""``kubetape watch``: record a cluster onto Kafka (list+watch → filter/shape → kubetape.events/state).

Settings come from flags, then environment variables, then documented defaults, and are built once into
a frozen :class:`~services.watch_service.WatchServiceSettings`; the service itself is wired in
:mod:`services.watch_service`.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from pipeline.io.http import HttpSettings
from pipeline.model.errors import ConfigError
from services.environment import env_default
from services.flags import (
    add_http_flags,
    add_kafka_config_flag,
    add_kubeconfig_flags,
    add_log_flags,
    kafka_settings,
)
from services.watch_service import WatchServiceSettings, serve

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="tracer config YAML (SimKube-compatible; default: Deployments, StatefulSets, Jobs, CronJobs)",
    )
    add_kubeconfig_flags(
        parser,
        what="the cluster to record",
        default="$KUBECONFIG, else the pod's service account inside a cluster, else ~/.kube/config",
    )
    parser.add_argument(
        "--cluster-id",
        default=None,
        help="names the recorded cluster in a fleet sharing one topic set: in every Kafka key and the "
        "kubetape.cluster header (default: $KUBETAPE_CLUSTER_ID, else the kube-system namespace UID; "
        "'default' continues a recording made before fleets)",
    )
    parser.add_argument(
        "--bootstrap",
        default=None,
        help="Kafka bootstrap servers (default: $KUBETAPE_BOOTSTRAP, else bootstrap.servers of "
        "--kafka-config, "
        f"else {DEFAULT_BOOTSTRAP})",
    )
    add_kafka_config_flag(parser)
    parser.add_argument(
        "--topics",
        choices=["create", "check"],
        default="create",
        help="create missing topics (default; the local stack) or only check them and refuse to start "
        "without them (production: `kubetape topics create` makes them with replicas and "
        "min.insync.replicas)",
    )
    add_http_flags(parser, port=8080)
    parser.add_argument(
        "--partitions",
        type=int,
        default=3,
        help="partitions of kubetape.events/state when created (default: 3)",
    )
    parser.add_argument(
        "--compression", default="zstd", choices=["zstd", "lz4", "gzip", "none"], help="(default: zstd)"
    )
    parser.add_argument(
        "--flush-deadline", type=float, default=30.0, help="seconds to flush on shutdown (default: 30)"
    )
    parser.add_argument(
        "--max-pending",
        type=int,
        default=10_000,
        help="changes buffered while Kafka is slow or down before the watches pause (default: 10000)",
    )
    parser.add_argument(
        "--ready-ack-timeout",
        type=float,
        default=5.0,
        help="/readyz answers 503 once changes have waited this many seconds with no acknowledgement "
        "from Kafka (the broker is down or unreachable; default: 5)",
    )
    parser.add_argument(
        "--usage-every",
        type=float,
        default=15.0,
        help="seconds between samples of the tracked owners' pod usage from the Metrics API, published "
        "on kubetape.usage (default: 15, metrics-server's resolution; 0: usage is not recorded)",
    )
    add_log_flags(parser, level_help="debug: one line per watch event")
    parser.set_defaults(settings=settings_from_args, func=_run)


def settings_from_args(args: argparse.Namespace) -> WatchServiceSettings:
    kubeconfig: Path | None = args.kubeconfig  # $KUBECONFIG by default (services.environment)
    if kubeconfig is None and not env_default("KUBERNETES_SERVICE_HOST"):
        kubeconfig = Path("~/.kube/config").expanduser()  # outside a pod, as kubectl does
    if not (args.usage_every == 0 or 1 <= args.usage_every <= 3600):
        raise ConfigError(
            f"--usage-every {args.usage_every}: give 0 (usage is not recorded) or seconds from 1 to 3600 "
            "(15, metrics-server's resolution, is the default)"
        )
    compression = None if args.compression == "none" else args.compression
    kafka = kafka_settings(
        args, client_id="kubetape-watcher", default_bootstrap=DEFAULT_BOOTSTRAP, compression=compression
    )
    return WatchServiceSettings(
        kubeconfig=kubeconfig,
        kafka=kafka,
        http=HttpSettings(host=args.http_host, port=args.http_port),
        tracer_config=args.config,
        context=args.context,
        partitions=args.partitions,
        flush_deadline_s=args.flush_deadline,
        max_pending_units=args.max_pending,
        ready_ack_timeout_s=args.ready_ack_timeout,
        create_topics=args.topics == "create",
        cluster_id=args.cluster_id or env_default("KUBETAPE_CLUSTER_ID"),
        usage_every_s=args.usage_every,
    )


def _run(settings: WatchServiceSettings) -> int:
    return asyncio.run(serve(settings))
