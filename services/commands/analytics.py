"""``kubetape analytics``: run an analytics consumer over Kafka or a trace file.

``kubetape analytics run NAME --bootstrap B [--from T] [--to T]`` joins the consumer group
``kubetape-analytics-NAME`` on ``kubetape.events`` (live, or the range [--from, --to)) and commits after
each checkpoint of the consumer; ``kubetape analytics run NAME --trace FILE`` runs it offline.
Built-in consumers:

* ``timeline`` — per-second cluster state → ``OUT/timeline.parquet`` and ``OUT/pods.parquet``
  (query with DuckDB: ``SELECT second, running FROM 'OUT/timeline.parquet' WHERE owner = '*'``), with
  the recorded load (``cpu_used_m``, ``memory_used_bytes``, ``usage_pods``) read from ``--usage-topic``
  under the group ``kubetape-analytics-timeline.usage``, or from the trace;
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
from typing import TYPE_CHECKING

from pipeline.analytics.consumer import AnalyticsConsumer, group_id_for
from pipeline.io.kafka.settings import EVENTS_TOPIC, USAGE_TOPIC, KafkaSettings
from pipeline.model.errors import ConfigError
from pipeline.model.keys import ClusterId
from services.flags import accept_relative_times, add_cluster_argument, add_kafka_config_flag, kafka_settings
from services.serving import on_stop_signals
from services.settings import from_flags

if TYPE_CHECKING:
    from pipeline.analytics.builtin_timeline import TimelineConsumer
    from pipeline.analytics.runner import ConsumerRunner, RunStats, UsageRunner
    from pipeline.io.kafka.reader import TopicReader

BUILTIN_CONSUMERS = ("timeline", "metrics")


@dataclass(frozen=True, slots=True)
class AnalyticsRunSettings:
    name: str
    trace: Path | None = None
    bootstrap: str | None = None
    kafka_config: Path | None = None
    topic: str = EVENTS_TOPIC
    usage_topic: str = USAGE_TOPIC
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
    run.add_argument(
        "--usage-topic",
        default=USAGE_TOPIC,
        help=f"the recorded load's topic, for the timeline's usage columns (default {USAGE_TOPIC}; "
        "'' reads none; a topic that does not exist is skipped with a line saying so)",
    )
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
    from pipeline.analytics.builtin_timeline import TimelineConsumer
    from pipeline.analytics.consumer import BatchContext
    from pipeline.analytics.runner import run_offline
    from pipeline.formats.trace import initial_events, read_trace

    if args.trace is not None:
        if args.start or args.end:
            raise ConfigError("--from/--to select a Kafka range; a trace file is read whole")
        if args.cluster:
            raise ConfigError("--cluster selects a cluster of a Kafka topic; a trace file holds one cluster")
        consumer = build_consumer(args.name, args.out, offline=True)
        trace = read_trace(args.trace)
        if isinstance(consumer, TimelineConsumer):
            consumer.on_usage(trace.usage, BatchContext(str(args.trace), None, 0))
        stats = run_offline(consumer, initial_events(trace, time_ordered=True), str(args.trace))
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


async def _usage_runner(
    args: AnalyticsRunSettings,
    settings: KafkaSettings,
    consumer: TimelineConsumer,
    group: str,
    *,
    start_ms: int | None,
    end_ms: int | None,
) -> tuple[UsageRunner, TopicReader] | None:
    """The timeline's reader of the recorded load, under its own group; None (said once) when the
    usage topic does not exist (nothing was recorded: the usage columns stay empty)."""
    from pipeline.analytics.runner import UsageRunner, usage_group_id
    from pipeline.io.kafka.admin import topic_partitions
    from pipeline.io.kafka.reader import TopicReader

    if not await topic_partitions(settings, args.usage_topic):
        print(f"no topic {args.usage_topic}: the timeline has no usage columns", file=sys.stderr)
        return None
    source = TopicReader(
        settings,
        args.usage_topic,
        start=start_ms if start_ms is not None else "committed",
        end=end_ms if end_ms is not None else "none",
        group_id=usage_group_id(group),
        cluster=args.cluster,
    )
    return UsageRunner(consumer, source), source


async def _consume(
    runner: ConsumerRunner, usage: tuple[UsageRunner, TopicReader] | None, *, live: bool
) -> tuple[RunStats, int]:
    """Run the events' runner, and the usage runner beside it; their stats (usage: samples read)."""
    if usage is None:
        with on_stop_signals(runner.stop):
            return await runner.run(), 0
    usage_runner, usage_source = usage

    def stop_both() -> None:
        runner.stop()
        usage_runner.stop()

    async with usage_source:
        with on_stop_signals(stop_both):
            if not live:  # a range: its load first, so every row the events complete has its load
                usage_stats = await usage_runner.run()
                return await runner.run(), usage_stats.events
            # live: side by side; rows wait while the usage reader is behind (TimelineConsumer)
            usage_task = asyncio.create_task(usage_runner.run(), name="analytics-usage")
            try:
                stats = await runner.run()
            finally:
                usage_runner.stop()  # the events' end ends the usage too
                usage_stats = await usage_task
    return stats, usage_stats.events


async def _run_kafka(args: AnalyticsRunSettings, settings: KafkaSettings) -> None:
    from aiohttp import web

    from pipeline.analytics.builtin_metrics import MetricsConsumer
    from pipeline.analytics.builtin_timeline import TimelineConsumer
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
            usage = None
            if isinstance(consumer, TimelineConsumer) and args.usage_topic:
                usage = await _usage_runner(args, settings, consumer, group, start_ms=start_ms, end_ms=end_ms)
            stats, samples = await _consume(runner, usage, live=end_ms is None)
            print(
                json.dumps(
                    {
                        "consumer": consumer.name,
                        "events": stats.events,
                        "usage_samples": samples,
                        "undecodable": stats.undecodable,
                    }
                )
            )
    finally:
        if http_runner is not None:
            await http_runner.cleanup()
