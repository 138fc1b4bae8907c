"""Every environment variable the ``kubetape`` commands read, in one table, with the flag it stands in for.

A variable is a default: the flag, when given, wins. Commands read a variable only through
:func:`env_default` (or :func:`env_path`), which refuses a name missing from :data:`ENVIRONMENT`, so
this table is the whole list. Secrets (the sink's and analytics' bearer token) are read by name at
run time (``--token-env NAME``) and never become a default that ``--help`` would print.

The stack layer reads two variables of its own (``$KUBETAPE_STACK_DIR``, ``$KUBETAPE_CACHE``: it is
stdlib-only and runs without the CLI); the S3 store reads the ``AWS_*`` variables as the AWS tools do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class EnvFlag:
    variable: str
    flag: str
    commands: tuple[str, ...]
    meaning: str


ENVIRONMENT: tuple[EnvFlag, ...] = (
    EnvFlag(
        "KUBECONFIG",
        "--kubeconfig",
        ("watch", "replay", "controller", "sim"),
        "kubeconfig of the cluster a command talks to; unset: in-cluster credentials (watch: else "
        "~/.kube/config)",
    ),
    # Kafka: how the clients reach the broker. Resolved by the Kafka settings (services.flags, the
    # `kafka` work of issue 31), listed here so that the table stays the whole list.
    EnvFlag(
        "KUBETAPE_BOOTSTRAP",
        "--bootstrap",
        ("watch", "sink", "analytics", "replay"),
        "Kafka bootstrap servers (default: bootstrap.servers of the Kafka config; watch: else "
        "localhost:9092)",
    ),
    EnvFlag(
        "KUBETAPE_KAFKA_CONFIG",
        "--kafka-config",
        ("watch", "sink", "analytics", "replay"),
        "Kafka client properties file: TLS and SASL of every client (docs/production-kafka.md)",
    ),
    EnvFlag(
        "KUBETAPE_KAFKA_<PROPERTY>",
        "(none: secrets have no flag)",
        ("watch", "sink", "analytics", "replay"),
        "one Kafka client property each, e.g. $KUBETAPE_KAFKA_SASL_PASSWORD for sasl.password; wins "
        "over the --kafka-config file (read by pipeline.io.kafka.security)",
    ),
    EnvFlag(
        "KUBETAPE_SEGMENT_STORE",
        "--segment-store",
        ("sink", "export", "inspect", "analytics"),
        "the segment store: a directory, file:///dir or s3://bucket/prefix",
    ),
    EnvFlag("KUBETAPE_SEGMENT_DIR", "--segment-store", ("sink", "export"), "older name of the above"),
    EnvFlag(
        "KUBETAPE_CLUSTER_ID",
        "--cluster-id (watch), --cluster (sink)",
        ("watch", "sink"),
        "the recorded cluster's id in a fleet",
    ),
    EnvFlag(
        "KUBETAPE_STACK_DIR",
        "--stack-dir",
        ("stack", "replay", "sweep"),
        "the local stack's directory (read by pipeline.stack.stack)",
    ),
    EnvFlag(
        "KUBERNETES_SERVICE_HOST",
        "(none: tells where watch runs)",
        ("watch",),
        "set in every pod: without --kubeconfig and $KUBECONFIG, watch uses the pod's service account, "
        "not ~/.kube/config",
    ),
    EnvFlag("KUBETAPE_IMAGE", "--image", ("controller",), "the kubetape image the replayer Jobs run"),
    EnvFlag("POD_NAMESPACE", "--namespace", ("controller",), "namespace of the Jobs and the Lease"),
    EnvFlag("POD_NAME", "--identity", ("controller",), "the Lease holder's identity"),
)
"""Variable → flag, for every variable a command reads."""

_KNOWN = {row.variable for row in ENVIRONMENT}


def env_default(variable: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of ``variable`` (None when unset or empty), a variable of :data:`ENVIRONMENT`."""
    if variable not in _KNOWN:
        raise KeyError(f"{variable} is not in services.environment.ENVIRONMENT: add its row first")
    return (os.environ if environ is None else environ).get(variable) or None


def env_path(variable: str, environ: Mapping[str, str] | None = None) -> Path | None:
    value = env_default(variable, environ)
    return None if value is None else Path(value)
