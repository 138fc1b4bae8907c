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
    from pipeline.stack.stack import LocalStack, StackInfo


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
