"""``kubetape analytics``: run an analytics consumer over Kafka or a trace file.

``kubetape analytics run NAME --bootstrap B [--from T] [--to T]`` joins the consumer group
``kubetape-analytics-NAME`` on ``kubetape.events`` (live, or the range [--from, --to)) and commits after
each checkpoint of the consumer; ``kubetape analytics run NAME --trace FILE`` runs it offline.
Built-in consumers:

* ``timeline`` — per-second cluster state → ``OUT/timeline.parquet`` and ``OUT/pods.parquet``
  (query with DuckDB: ``SELECT second, running FROM 'OUT/timeline.parquet' WHERE owner = '*'``);
* ``metrics`` — Prometheus series on ``http://127.0.0.1:PORT/metrics``, readable only with
  ``Authorization: Bearer $KUBETAPE_TOKEN`` (they name namespaces and kinds).

SIGTERM/Ctrl-C stop intake; the last checkpoint and commit still run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.analytics.consumer import AnalyticsConsumer, group_id_for
from pipeline.io.kafka.settings import EVENTS_TOPIC, KafkaSettings
from pipeline.model.errors import ConfigError
from pipeline.model.keys import ClusterId
from services.flags import accept_relative_times, add_cluster_argument, add_kafka_config_flag, kafka_settings
from services.serving import on_stop_signals
from services.settings import from_flags

BUILTIN_CONSUMERS = ("timeline", "metrics")


@dataclass(frozen=True, slots=True)
class AnalyticsRunSettings:
    name: str
    trace: Path | None = None
    bootstrap: str | None = None
    kafka_config: Path | None = None
    topic: str = EVENTS_TOPIC
    cluster: ClusterId | None = None
    start: str | None = None
    end: str | None = None
    out: Path = Path("analytics-out")
    http_port: int = 9464
    token_env: str = "KUBETAPE_TOKEN"
    """The name of the variable holding the metrics' bearer token (read at run time, never a default)."""


@dataclass(frozen=True, slots=True)
class AnalyticsListSettings:
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="analytics_command", required=True, metavar="ACTION")
    run = sub.add_parser("run", help="run one consumer", description=__doc__)
    accept_relative_times(run)
    run.add_argument("name", choices=BUILTIN_CONSUMERS, help="the consumer to run")
    source = run.add_mutually_exclusive_group()
    source.add_argument("--trace", type=Path, default=None, help="run offline over this trace file")
    source.add_argument(
        "--bootstrap",
        default=None,
        help="Kafka bootstrap servers (default: $KUBETAPE_BOOTSTRAP, else bootstrap.servers of "
        "--kafka-config)",
    )
    add_kafka_config_flag(run)
    run.add_argument("--topic", default=EVENTS_TOPIC, help=f"topic to consume (default {EVENTS_TOPIC})")
    add_cluster_argument(run)
    run.add_argument("--from", dest="start", default=None, help="range start: -30m, now, ms or ISO-8601")
    run.add_argument("--to", dest="end", default=None, help="range end (exclusive); stop there")
    run.add_argument(
        "--out", type=Path, default=Path("analytics-out"), help="output directory (default ./analytics-out)"
    )
    run.add_argument("--http-port", type=int, default=9464, help="metrics port on 127.0.0.1 (9464; 0: free)")
    run.add_argument(
        "--token-env",
        default="KUBETAPE_TOKEN",
        help="environment variable holding the bearer token /metrics requires (default KUBETAPE_TOKEN)",
    )
    # over Kafka a consumer is a service and logs JSON lines; over a trace file it is a command
    run.set_defaults(
        settings=from_flags(AnalyticsRunSettings),
        func=_run,
        service_log=_over_kafka,
        log_format="json",
        log_level="info",
    )
    listing = sub.add_parser("list", help="the built-in consumers and their consumer groups")
    listing.set_defaults(settings=from_flags(AnalyticsListSettings), func=_list)


def _over_kafka(args: argparse.Namespace) -> bool:
    return args.trace is None


def _list(args: AnalyticsListSettings) -> int:
    del args
    for name in BUILTIN_CONSUMERS:
        print(f"{name}\tgroup {group_id_for(name)}")
    return 0


def build_consumer(name: str, out_dir: Path, *, offline: bool) -> AnalyticsConsumer:
    if name == "timeline":
        from pipeline.analytics.builtin_timeline import TimelineConsumer

        return TimelineConsumer(out_dir, final=offline)
    from pipeline.analytics.builtin_metrics import MetricsConsumer

    return MetricsConsumer()


def _run(args: AnalyticsRunSettings) -> int:
    from pipeline.analytics.runner import run_offline
    from pipeline.formats.trace import initial_events, read_trace

    if args.trace is not None:
        if args.start or args.end:
            raise ConfigError("--from/--to select a Kafka range; a trace file is read whole")
        if args.cluster:
            raise ConfigError("--cluster selects a cluster of a Kafka topic; a trace file holds one cluster")
        consumer = build_consumer(args.name, args.out, offline=True)
        stats = run_offline(
            consumer, initial_events(read_trace(args.trace), time_ordered=True), str(args.trace)
        )
        print(json.dumps({"consumer": args.name, "events": stats.events, "out": str(args.out)}))
        if args.name == "metrics":
            from pipeline.analytics.builtin_metrics import MetricsConsumer

            assert isinstance(consumer, MetricsConsumer)
            print(consumer.metrics.render(), end="")
        return 0
    settings = kafka_settings(
        args,
        client_id="kubetape-analytics",
        missing='no Kafka bootstrap: pass --bootstrap, --trace FILE, or `eval "$(kubetape stack env)"`',
    )
    asyncio.run(_run_kafka(args, settings))
    return 0


async def _run_kafka(args: AnalyticsRunSettings, settings: KafkaSettings) -> None:
    from aiohttp import web

    from pipeline.analytics.builtin_metrics import MetricsConsumer
    from pipeline.analytics.runner import ConsumerRunner
    from pipeline.io.http import HttpSettings, add_data_route, bound_port, start_http
    from pipeline.io.kafka.reader import TopicReader
    from pipeline.model.timespec import parse_time

    start_ms = parse_time(args.start, where="--from") if args.start else None
    end_ms = parse_time(args.end, where="--to") if args.end else None
    consumer = build_consumer(args.name, args.out, offline=False)
    http_runner: web.AppRunner | None = None
    if isinstance(consumer, MetricsConsumer):
        token = os.environ.get(args.token_env)
        if not token:
            raise ConfigError(
                f"the metrics consumer serves cluster data and needs a bearer token: set ${args.token_env}"
            )
        app = web.Application()
        metrics = consumer.metrics

        async def serve_metrics(request: web.Request) -> web.Response:
            del request
            return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

        add_data_route(app, "GET", "/metrics", serve_metrics, token)
        http_runner = await start_http(app, HttpSettings(port=args.http_port, token=token))
        print(
            f"metrics on http://127.0.0.1:{bound_port(http_runner)}/metrics (bearer token)", file=sys.stderr
        )
    try:
        group = group_id_for(consumer.name) + (f".{args.cluster}" if args.cluster else "")
        async with TopicReader(
            settings,
            args.topic,
            start=start_ms if start_ms is not None else "committed",
            end=end_ms if end_ms is not None else "none",
            group_id=group,
            cluster=args.cluster,
        ) as source:
            runner = ConsumerRunner(consumer, source)
            with on_stop_signals(runner.stop):
                stats = await runner.run()
            print(
                json.dumps(
                    {"consumer": consumer.name, "events": stats.events, "undecodable": stats.undecodable}
                )
            )
    finally:
        if http_runner is not None:
            await http_runner.cleanup()
