"""``kubetape topics create|describe``: the topic set made right for production (replication factor,
``min.insync.replicas``, retention of the history, compaction of the state and resume topics) and a
description of what exists, as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.io.kafka.settings import EVENTS_TOPIC
from services.flags import add_kafka_config_flag, kafka_settings, parse_duration
from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class TopicsSettings:
    topics_command: str
    bootstrap: str | None = None
    kafka_config: Path | None = None
    topic: str = EVENTS_TOPIC
    partitions: int = 6
    replication_factor: int = 1
    min_insync_replicas: int | None = None
    retention: float | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = verbs.add_parser("create", help="create the missing topics of the set (existing ones are kept)")
    describe = verbs.add_parser("describe", help="what exists: partitions, replicas, compaction (JSON)")
    for verb in (create, describe):
        verb.add_argument(
            "--bootstrap", default=None, help="Kafka bootstrap servers (default: $KUBETAPE_BOOTSTRAP)"
        )
        add_kafka_config_flag(verb)
        verb.add_argument("--topic", default=EVENTS_TOPIC, help=f"the events topic (default: {EVENTS_TOPIC})")
        verb.set_defaults(settings=from_flags(TopicsSettings), func=_run)
    create.add_argument(
        "--partitions", type=int, default=6, help="partitions of the events and state topics (6)"
    )
    create.add_argument(
        "--replication-factor", type=int, default=1, help="replicas of every topic (1; 3 in production)"
    )
    create.add_argument(
        "--min-insync-replicas",
        type=int,
        default=None,
        help="replicas that must have a write before it is acknowledged (acks=all); 2 with 3 replicas",
    )
    create.add_argument(
        "--retention",
        type=parse_duration,
        default=None,
        help="how long the events topic keeps history, e.g. 7d (default: the broker's retention)",
    )


def _run(settings: TopicsSettings) -> int:
    from pipeline.io.kafka.topics import create_topics, describe_topics, topic_set

    kafka = kafka_settings(settings, client_id="kubetape-topics")
    specs = topic_set(
        partitions=settings.partitions,
        replication_factor=settings.replication_factor,
        min_insync_replicas=settings.min_insync_replicas,
        retention_ms=round(settings.retention * 1000) if settings.retention is not None else None,
        events_topic=settings.topic,
    )
    names = [s.name for s in specs]
    if settings.topics_command == "create":
        outcome = asyncio.run(create_topics(kafka, specs))
        print(json.dumps(outcome, indent=2))
        return 0
    print(json.dumps(asyncio.run(describe_topics(kafka, names)), indent=2))
    return 0
