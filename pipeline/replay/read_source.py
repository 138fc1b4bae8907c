"""Reading a replay's source into one trace: a trace file (local or over HTTP), a trace already in
memory, a range of a segment store (as ``kubetape export`` assembles it) or of a topic. Following a live
topic is :class:`pipeline.replay.sources.FollowSource`'s. Each trace carries the recorded load of its
window (``Segment.usage``) as the source holds it: a file's own samples, the store's ``usage/``
sub-store, the ``kubetape.usage`` topic beside a topic range."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pipeline.formats.segment.content import Segment
from pipeline.replay.sources import Warn, read_topic_trace
from pipeline.replay.spec import LoadedTrace, ReplaySource, SegmentRange, TopicFollow, TopicRange, TraceFile


def warn_on_stderr(message: str) -> None:
    print(f"kubetape: warning: {message}", file=sys.stderr)


async def read_source(source: ReplaySource, warn: Warn = warn_on_stderr) -> Segment:
    """The trace ``source`` holds (a followed topic has none: it is read as it goes)."""
    from pipeline.formats.trace import read_trace, trace_from_bytes

    if isinstance(source, LoadedTrace):
        return source.trace
    if isinstance(source, TraceFile):
        if source.location.startswith(("http://", "https://")):
            from pipeline.io.fetch import fetch_bytes

            return trace_from_bytes(await fetch_bytes(source.location), source.location)
        return read_trace(Path(source.location))
    assert not isinstance(source, TopicFollow)  # prepare() follows it
    start_ms, end_ms = range_ms(source.start, source.end)
    if isinstance(source, SegmentRange):
        return read_segment_range(
            source.store, start_ms, end_ms, cluster=source.cluster, config=source.config, warn=warn
        )
    assert isinstance(source, TopicRange)
    return await read_topic_trace(
        source.kafka,
        source.topic,
        start_ms,
        end_ms,
        config=tracer_config(source.config),
        warn=warn,
        cluster=source.cluster,
    )


# ---- ranges ------------------------------------------------------------------------------
def tracer_config(path: Path | None) -> Any:
    from pipeline.model.tracer_config import load_tracer_config

    return load_tracer_config(path) if path is not None else None


def time_ms(text: str, what: str) -> int:
    from pipeline.model.timespec import parse_time

    return parse_time(text, where=what)


def range_ms(start: str, end: str | None) -> tuple[int, int]:
    return time_ms(start, "--from"), time_ms(end or "now", "--to")


def read_segment_range(
    store: str,
    start_ms: int,
    end_ms: int,
    *,
    cluster: str | None = None,
    config: Path | None = None,
    warn: Warn = warn_on_stderr,
) -> Segment:
    """The trace of ``[start_ms, end_ms)`` of ``cluster`` in a segment store (a directory or
    s3://bucket/prefix): the same assembly as ``kubetape export``, so a range replays as its exported
    file would."""
    from pipeline.store.catalog import SegmentCatalog
    from pipeline.store.export import ExportRequest, window_trace
    from pipeline.store.store_url import cluster_location, open_segment_store, parse_store_url
    from pipeline.store.usage_history import open_usage_store

    location = cluster_location(parse_store_url(store, what="--segments"), cluster)
    catalog = SegmentCatalog(open_segment_store(location, must_exist=True))
    return window_trace(
        catalog,
        ExportRequest(start_ms, end_ms, config=tracer_config(config)),
        warn,
        usage=open_usage_store(location, for_reading=True),  # the recorded load, as an export carries it
    )
