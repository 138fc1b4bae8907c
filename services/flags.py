"""Flags that several ``kubetape`` commands share, defined once so that they read and default alike.

Each helper adds its flags to one parser; the values still reach the command as plain ``argparse``
attributes (``args.kubeconfig``, ``args.http_port``, …), turned into settings in :mod:`services.settings`.
"""

from __future__ import annotations

import argparse
import os
import re
from functools import partial
from pathlib import Path

from pipeline.io.kafka.security import load_security
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.keys import ClusterId, parse_cluster_id
from pipeline.model.lifecycle_delays import FLAGS as DELAY_FLAGS
from pipeline.model.lifecycle_delays import LifecycleDelays, parse_delay
from pipeline.model.timespec import DURATION_PATTERN
from pipeline.model.timespec import parse_duration as parse_duration_s
from pipeline.store.store_url import StoreLocation, parse_store_url
from services.environment import env_default, env_path

DEFAULT_SEGMENT_DIR = Path("~/.cache/kubetape/segments")


def add_kubeconfig_flags(parser: argparse.ArgumentParser, *, what: str, default: str) -> None:
    """``--kubeconfig`` (of the cluster ``what`` names; ``default`` says what None means) and
    ``--context``."""
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        # $KUBECONFIG resolved here, once, for every command: later None means in-cluster credentials
        default=env_path("KUBECONFIG"),
        help=f"kubeconfig of {what} (default: {default})",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")


def add_http_flags(parser: argparse.ArgumentParser, *, port: int, serves: str = "health/metrics") -> None:
    """Where a service serves ``/healthz``, ``/readyz`` and ``/metrics`` (and what else ``serves`` names):
    127.0.0.1 unless told."""
    parser.add_argument("--http-host", default="127.0.0.1", help=f"{serves} address (default: 127.0.0.1)")
    parser.add_argument(
        "--http-port", type=int, default=port, help=f"{serves} port, 0 = any (default: {port})"
    )


def add_log_flags(
    parser: argparse.ArgumentParser,
    *,
    levels: tuple[str, ...] = ("debug", "info", "warning"),
    level_help: str | None = None,
    text: bool = True,
) -> None:
    """A service's ``--log-level`` and, when it can also log text (``text``), ``--log-format``; JSON
    lines otherwise. Setting ``service_log`` tells :mod:`services.settings` to log as a service."""
    if text:
        parser.add_argument("--log-format", choices=["json", "text"], default="json", help="(default: json)")
    else:
        parser.set_defaults(log_format="json")
    parser.add_argument("--log-level", choices=list(levels), default="info", help=level_help)
    parser.set_defaults(service_log=True)


def accept_relative_times(parser: argparse.ArgumentParser) -> None:
    """Let ``--from -30m`` through: argparse takes "-30m" for an option unless it looks like a negative
    number, so widen its notion of one to relative times (no option of ours looks like that)."""
    parser._negative_number_matcher = re.compile(rf"^-(?:[0-9]+(?:\.[0-9]+)?|{DURATION_PATTERN})$")


def parse_duration(text: str) -> float:
    """An argparse ``type``: seconds of a duration (:mod:`pipeline.model.timespec`: ``500ms``, ``1h30m``,
    ``7d``); argparse names the flag in front of the error."""
    try:
        return parse_duration_s(text, where="")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    default = env_default("KUBETAPE_SEGMENT_STORE") or env_default("KUBETAPE_SEGMENT_DIR")
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
            "'default' for records without a cluster header, as before fleets; an empty topic: the first "
            "record's, waited for); a message of another stops the sink, naming the --cluster to pass"
        )
    # the recording side (watcher and sink) shares $KUBETAPE_CLUSTER_ID; a reader names its cluster itself
    default = None if reader else env_default("KUBETAPE_CLUSTER_ID")
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


KAFKA_CONFIG_HELP = (
    "Kafka client properties file: bootstrap.servers, security.protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, "
    "SASL_SSL), sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER), sasl.username, "
    "sasl.password, sasl.oauthbearer.token.file, ssl.ca.location, ssl.certificate.location, "
    "ssl.key.location, "
    "ssl.key.password, ssl.endpoint.identification.algorithm; each also $KUBETAPE_KAFKA_<NAME> (e.g. "
    "$KUBETAPE_KAFKA_SASL_PASSWORD), which wins over the file (default: $KUBETAPE_KAFKA_CONFIG; see "
    "docs/production-kafka.md)"
)


def add_kafka_config_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--kafka-config FILE``: how every Kafka client of the command connects (TLS, SASL). Secrets have
    no flag of their own: they come from that file or the environment."""
    parser.add_argument("--kafka-config", type=Path, default=None, metavar="FILE", help=KAFKA_CONFIG_HELP)


def kafka_settings(
    args: object,
    *,
    client_id: str,
    default_bootstrap: str | None = None,
    missing: str = 'no Kafka bootstrap: pass --bootstrap or run `eval "$(kubetape stack env)"`',
    compression: str | None = "zstd",
) -> KafkaSettings:
    """The Kafka settings of a command, resolved once: the bootstrap from ``--bootstrap``, else
    ``$KUBETAPE_BOOTSTRAP``, else ``bootstrap.servers`` of the Kafka config, else ``default_bootstrap``
    (a ConfigError saying ``missing`` when none is set); security from ``--kafka-config`` (else
    ``$KUBETAPE_KAFKA_CONFIG``) and ``$KUBETAPE_KAFKA_*``. ``args``: parsed flags or a command's
    settings, read for ``bootstrap`` and ``kafka_config``."""
    config = getattr(args, "kafka_config", None) or env_path("KUBETAPE_KAFKA_CONFIG")
    security, configured_bootstrap = load_security(config, os.environ)  # and $KUBETAPE_KAFKA_<PROPERTY>
    bootstrap = (
        getattr(args, "bootstrap", None)
        or env_default("KUBETAPE_BOOTSTRAP")
        or configured_bootstrap
        or default_bootstrap
    )
    if not bootstrap:
        raise ConfigError(missing)
    return KafkaSettings(bootstrap=bootstrap, client_id=client_id, compression=compression, security=security)


_DELAY_HELP = {
    "--image-pull-delay": "trace time a replayed pod waits after it is scheduled, as its images are pulled",
    "--image-pull-jitter": "adds up to this much, drawn at random per pod, to --image-pull-delay",
    "--pod-startup-delay": "trace time a replayed pod then waits as its containers start, before it is "
    "Running and Ready",
    "--pod-startup-jitter": "adds up to this much, drawn at random per pod, to --pod-startup-delay",
}


def add_lifecycle_delay_flags(parser: argparse.ArgumentParser) -> None:
    """SimKube 2.7's lifecycle delays (``skctl run``'s flags), for ``kubetape replay`` and ``sim run``."""
    for flag, help_text in _DELAY_HELP.items():
        parser.add_argument(
            flag,
            dest=DELAY_FLAGS[flag],
            type=partial(_delay_flag, flag),
            default=0.0,
            metavar="DURATION",
            help=f"{help_text}: e.g. 10s, or whole milliseconds as in SimKube (default 0); divided by "
            "--speed, as all trace time (docs/lifecycle-delays.md)",
        )


def _delay_flag(flag: str, text: str) -> float:
    try:
        return parse_delay(text, flag)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def lifecycle_delays_from(args: argparse.Namespace) -> LifecycleDelays:
    return LifecycleDelays(**{name: getattr(args, name) for name in DELAY_FLAGS.values()})
