"""``kubetape sink``: compact ``kubetape.events`` into durable trace segments and serve ``POST /export``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
from pathlib import Path
from typing import Any

from pipeline.io.http import HttpSettings
from pipeline.io.kafka import KafkaSettings
from pipeline.io.sink_consumer import DEFAULT_SINK_GROUP
from pipeline.io.store_url import StoreLocation, parse_store_url
from pipeline.io.topics import DEADLETTER_TOPIC, EVENTS_TOPIC
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.keys import DEFAULT_CLUSTER, ClusterId, parse_cluster_id
from pipeline.sink.compactor import CompactionSettings
from pipeline.sink.service import SinkServiceSettings, run_sink_service
from pipeline.sink.sink import SinkSettings
from services.logs import configure_logging

DEFAULT_SEGMENT_DIR = Path("~/.cache/kubetape/segments")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds from ``500ms``, ``60s``, ``5m``, ``2h``, ``7d``."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; use e.g. 500ms, 60s, 5m, 2h, 7d")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("KUBETAPE_SEGMENT_STORE") or os.environ.get("KUBETAPE_SEGMENT_DIR")
    parser.add_argument(
        "--segment-store",
        "--segment-dir",
        dest="segment_store",
        type=_store_location,
        # a string default goes through `type` at parse time: a bad $KUBETAPE_SEGMENT_STORE is reported as
        # this option's error by the commands that read a store, not by every command of the CLI
        default=default or str(DEFAULT_SEGMENT_DIR),
        metavar="DIR_OR_URL",
        help="segment store: a directory, file:///dir or s3://bucket/prefix (credentials and endpoint from "
        "AWS_* variables; default: $KUBETAPE_SEGMENT_STORE, $KUBETAPE_SEGMENT_DIR or "
        f"{DEFAULT_SEGMENT_DIR})",
    )


def add_cluster_argument(parser: argparse.ArgumentParser, *, reader: bool = True) -> None:
    """``--cluster``: which cluster of a fleet a command reads (``reader``) or the sink records."""
    if reader:
        text = (
            "the recorded cluster to read, of a store or topic holding a fleet (default: the store's only "
            "cluster; `kubetape inspect --clusters STORE` lists them)"
        )
    else:
        text = (
            "the cluster this sink records (its watcher's --cluster-id, by default the kube-system "
            "namespace UID, which the watcher logs; default: $KUBETAPE_CLUSTER_ID, as the watcher). Its "
            "segments go under clusters/<id>/ in the store, its consumer group defaults to "
            "kubetape-sink.<id>. Unset: the topic's only cluster (by the last record of each partition; "
            "'default' for records without a cluster header, as before fleets); a message of another "
            "stops the sink, naming the --cluster to pass"
        )
    # the recording side (watcher and sink) shares $KUBETAPE_CLUSTER_ID; a reader names its cluster itself
    default = None if reader else os.environ.get("KUBETAPE_CLUSTER_ID") or None
    parser.add_argument("--cluster", type=_cluster_id, default=default, help=text)


def _cluster_id(text: str) -> ClusterId:
    try:
        return parse_cluster_id(text, "--cluster")
    except FormatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _store_location(text: str) -> StoreLocation:
    try:
        return parse_store_url(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sink", help="compact the events topic into durable trace segments; serve health, metrics, export"
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KUBETAPE_BOOTSTRAP"),
        help="Kafka bootstrap servers (default: $KUBETAPE_BOOTSTRAP, set by `kubetape stack env`)",
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
    parser.add_argument("--keyframe-every", type=int, default=10, help="a keyframe every N segments (10)")
    parser.add_argument("--batch", type=int, default=10_000, help="max messages per getmany (10000)")
    parser.add_argument(
        "--retention", type=parse_duration, default=None, help="delete segments older than this (keep all)"
    )
    parser.add_argument("--http-host", default="127.0.0.1", help="HTTP listen address (127.0.0.1)")
    parser.add_argument("--http-port", type=int, default=8081, help="HTTP port; 0 picks a free one (8081)")
    parser.add_argument(
        "--token-env",
        default="KUBETAPE_TOKEN",
        help="environment variable holding the bearer token for POST /export (KUBETAPE_TOKEN; unset: "
        "export over HTTP is off)",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(func=_run)


def settings_from_args(args: argparse.Namespace) -> SinkServiceSettings:
    if not args.bootstrap:
        raise ConfigError('no Kafka bootstrap: pass --bootstrap or run `eval "$(kubetape stack env)"`')
    if args.window <= 0 or args.keyframe_every < 1 or args.batch < 1:
        raise ConfigError("--window must be positive, --keyframe-every and --batch at least 1")
    compaction = CompactionSettings(
        topic=args.topic,
        window_ms=int(args.window * 1000),
        idle_close_s=args.idle_close,
        keyframe_every=args.keyframe_every,
    )
    return SinkServiceSettings(
        kafka=KafkaSettings(bootstrap=args.bootstrap, client_id="kubetape-sink"),
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
    )


def sink_group(cluster: ClusterId) -> str:
    """The default consumer group of the sink recording ``cluster``: one group per cluster, since each
    reads every message of the topic and keeps its own cluster's."""
    return DEFAULT_SINK_GROUP if cluster == DEFAULT_CLUSTER else f"{DEFAULT_SINK_GROUP}.{cluster}"


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    configure_logging(json_lines=True, level=getattr(logging, args.log_level.upper()))
    asyncio.run(run_sink_service(settings))
    return 0
