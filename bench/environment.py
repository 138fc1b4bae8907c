"""What every benchmark shares around its measurement: the machine it ran on (printed with the figures,
which mean little without it) and a private local stack that is torn down however the run ends."""

from __future__ import annotations

import contextlib
import os
import platform
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.io.kafka.settings import KafkaSettings
    from pipeline.stack.stack import LocalStack
    from pipeline.stack.state import StackInfo


def machine() -> dict[str, Any]:
    """The platform, Python version and CPU count, as each benchmark's JSON states them."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


@contextlib.contextmanager
def private_stack(
    clusters: Iterable[str], *, autoscaled: Iterable[str] = (), prefix: str = "kubetape-bench-"
) -> Iterator[tuple[LocalStack, StackInfo]]:
    """A stack of its own in a temporary directory (Kafka, the S3 server, ``clusters``, Karpenter beside
    those in ``autoscaled``), stopped and removed on the way out."""
    # imported here: benchmarks given an existing broker or cluster never need the stack's code
    from pipeline.stack.stack import LocalStack

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        stack = LocalStack(Path(tmp))
        info = stack.up(list(clusters), autoscaled=autoscaled)
        try:
            yield stack, info
        finally:
            stack.down()


@contextlib.contextmanager
def private_brokers() -> Iterator[tuple[KafkaSettings, KafkaSettings]]:
    """A plaintext and a secured (SASL_SSL, SCRAM-SHA-512, as the stack's admin) private broker, started
    one after the other: the same workload on both measures what TLS and SASL cost, as a ratio."""
    from pipeline.io.kafka.security import load_security
    from pipeline.io.kafka.settings import KafkaSettings
    from pipeline.stack.kafka_security import SecurityFiles
    from pipeline.stack.stack import LocalStack

    with tempfile.TemporaryDirectory(prefix="kubetape-bench-brokers-") as tmp:
        plain_stack, secured_stack = LocalStack(Path(tmp) / "plain"), LocalStack(Path(tmp) / "secured")
        try:
            plain = KafkaSettings(plain_stack.start_kafka().bootstrap)
            info = secured_stack.start_kafka("sasl-ssl")
            files = SecurityFiles(info.stack_dir / "kafka" / "security")
            security, bootstrap = load_security(files.client_config("admin", "sasl-ssl"), {})
            yield plain, KafkaSettings(bootstrap or info.bootstrap, security=security)
        finally:
            plain_stack.down()
            secured_stack.down()
