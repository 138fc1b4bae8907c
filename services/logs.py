"""Logging for the CLI and services: JSON lines for services, short text for interactive commands.

Context (component, partition, offset, object key) goes in ``extra={"ctx": {...}}`` and is rendered
as fields, so one line describes one unit of work and tests can assert on it.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

from services.settings import LogSettings


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        context = getattr(record, "ctx", None)
        if isinstance(context, dict):
            line.update(context)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure_logging(settings: LogSettings) -> None:
    """Log to stderr, as JSON lines or as text (see :class:`~services.settings.LogSettings`)."""
    handler = logging.StreamHandler(sys.stderr)
    text_format = "%(levelname)s %(name)s: %(message)s"
    handler.setFormatter(
        JsonFormatter()
        if settings.json_lines
        else logging.Formatter(("%(asctime)s " if settings.with_time else "") + text_format)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.level)
    # aiokafka logs every transient coordinator miss during a group's first join at WARNING/ERROR;
    # the stages report real failures themselves.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
