"""Progress output for long stack operations: one timestamped line per step, to stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

Reporter = Callable[[str], None]

_started = time.monotonic()


def stderr_reporter(message: str) -> None:
    """Print ``[  12.3s] message`` so a newcomer sees the long first build is moving."""
    elapsed = time.monotonic() - _started
    print(f"[{elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)


def silent_reporter(message: str) -> None:
    del message
