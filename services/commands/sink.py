"""``kubetape sink``: compact ``kubetape.events`` into durable trace segments and serve ``POST /export``."""

from __future__ import annotations

import argparse
import asyncio
import os

from pipeline.io.http import HttpSettings
from pipeline.io.kafka.settings import DEADLETTER_TOPIC, DEFAULT_SINK_GROUP, EVENTS_TOPIC
from pipeline.model.errors import ConfigError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId
from pipeline.sink.compactor import CompactionSettings
from pipeline.sink.service import SinkServiceSettings, run_sink_service
from pipeline.sink.settings import SinkSettings
from services.flags import (
    add_cluster_argument,
    add_http_flags,
    add_kafka_config_flag,
    add_log_flags,
    add_store_argument,
    kafka_settings,
    parse_duration,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        default=None,
        help="Kafka bootstrap servers (default: $KUBETAPE_BOOTSTRAP, set by `kubetape stack env`, else "
        "bootstrap.servers of --kafka-config)",
    )
    add_kafka_config_flag(parser)
    parser.add_argument(
        "--topics",
        choices=["create", "check"],
        default="create",
        help="create a missing events, usage or dead-letter topic (default; the local stack) or only check "
        "the events and dead-letter topics exist and refuse to start without them, and wait for the usage "
        "topic (production)",
    )
    add_store_argument(parser)
    add_cluster_argument(parser, reader=False)
    parser.add_argument("--topic", default=EVENTS_TOPIC, help=f"events topic (default: {EVENTS_TOPIC})")
    parser.add_argument(
        "--group",
        default=None,
        help=f"consumer group (default: {DEFAULT_SINK_GROUP}; {DEFAULT_SINK_GROUP}.<id> with --cluster <id>)",
    )
    parser.add_argument(
        "--deadletter-topic",
        default=DEADLETTER_TOPIC,
        help=f"where undecodable messages go (default: {DEADLETTER_TOPIC})",
    )
    parser.add_argument("--partitions", type=int, default=6, help="partitions if the topic is created (6)")
    parser.add_argument("--window", type=parse_duration, default=60.0, help="event-time segment window (60s)")
    parser.add_argument(
        "--idle-close", type=parse_duration, default=10.0, help="close a segment idle this long (10s)"
    )
    parser.add_argument(
        "--keyframe-every", type=int, default=60, help="a keyframe at least every N segments (60)"
    )
    parser.add_argument(
        "--keyframe-cost",
        type=float,
        default=4.0,
        help="also a keyframe once the events since the last one weigh this many times it (4; 0: by "
        "count alone; see docs/storage-cost.md)",
    )
    parser.add_argument("--batch", type=int, default=10_000, help="max messages per getmany (10000)")
    parser.add_argument(
        "--retention",
        type=parse_duration,
        default=None,
        help="delete segments (events and usage) older than this (keep all)",
    )
    add_http_flags(parser, port=8081, serves="health/metrics/export")
    parser.add_argument(
        "--token-env",
        default="KUBETAPE_TOKEN",
        help="environment variable holding the bearer token for POST /export (KUBETAPE_TOKEN; unset: "
        "export over HTTP is off)",
    )
    add_log_flags(parser, levels=("debug", "info", "warning", "error"), text=False)
    parser.set_defaults(settings=settings_from_args, func=_run)


def settings_from_args(args: argparse.Namespace) -> SinkServiceSettings:
    if args.window <= 0 or args.keyframe_every < 1 or args.batch < 1 or not args.keyframe_cost >= 0:
        raise ConfigError(
            "--window must be positive, --keyframe-every and --batch at least 1, --keyframe-cost 0 or more"
        )
    compaction = CompactionSettings(
        topic=args.topic,
        window_ms=int(args.window * 1000),
        idle_close_s=args.idle_close,
        keyframe_every=args.keyframe_every,
        keyframe_cost=args.keyframe_cost or None,
    )
    return SinkServiceSettings(
        kafka=kafka_settings(args, client_id="kubetape-sink"),
        segment_store=args.segment_store,
        cluster=args.cluster,
        sink=SinkSettings(compaction=compaction, batch_max_records=args.batch),
        http=HttpSettings(
            host=args.http_host, port=args.http_port, token=os.environ.get(args.token_env) or None
        ),
        group_id=args.group or sink_group(args.cluster or DEFAULT_CLUSTER),
        deadletter_topic=args.deadletter_topic,
        partitions=args.partitions,
        retention_s=args.retention,
        create_topics=args.topics == "create",
    )


def sink_group(cluster: ClusterId) -> str:
    """The default consumer group of the sink recording ``cluster``: one group per cluster, since each
    reads every message of the topic and keeps its own cluster's."""
    return DEFAULT_SINK_GROUP if cluster == DEFAULT_CLUSTER else f"{DEFAULT_SINK_GROUP}.{cluster}"


def _run(settings: SinkServiceSettings) -> int:
    asyncio.run(run_sink_service(settings))
    return 0
