"""The segment index: one hour exported from a long S3 store, with the index against the whole listing;
prints one JSON document.

A prefix of the local stack's S3 server (s3proxy, loopback) is filled with ``--hours`` of segments of
``--partitions`` partitions (one change a minute per partition, 60 s windows, a keyframe every 4
segments, and one late change an hour dated three hours back), written through the sink's writer, which
indexes them. Then the middle hour is exported with a fresh catalog, as ``kubetape export`` does, twice
per round: once reading the index, once with the same store told it keeps none (the whole listing and
every header, which is what a store without the index costs). Rounds alternate ``--repeat`` times and
the best of each is kept. Both exports must give the same bytes. The ratios are the point: same server,
same data, same machine.

Usage::

    .venv/bin/python -m bench.bench_store_index                 # starts a private stack (~1 min)
    .venv/bin/python -m bench.bench_store_index --hours 48
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import time
import uuid
from typing import Any

from bench.environment import machine, private_stack
from pipeline.sink.compactor import ClosedSegment, CompactionSettings, PartitionCompactor
from pipeline.sink.synthetic import applied, deployment
from pipeline.sink.writer import SegmentWriter
from pipeline.stack import s3
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportRequest, export_window
from pipeline.store.s3_store import S3SegmentStore
from pipeline.store.segment_store import SegmentName, StoredSegment
from pipeline.store.store_url import S3Location, parse_store_url

HOUR = 3_600_000
T0 = 1_763_700_000_000 - 1_763_700_000_000 % HOUR


class CountingStore(S3SegmentStore):
    """Counts the requests a reader makes (listings are counted per call, not per page)."""

    def __init__(self, location: S3Location) -> None:
        super().__init__(location)
        self.requests: dict[str, int] = {"list": 0, "head": 0, "get": 0, "list_markers": 0}

    def list(self) -> list[StoredSegment]:
        self.requests["list"] += 1
        return super().list()

    def head(self, name: SegmentName, size: int) -> bytes:
        self.requests["head"] += 1
        return super().head(name, size)

    def get(self, name: SegmentName) -> bytes:
        self.requests["get"] += 1
        return super().get(name)

    def list_markers(
        self, prefix: str, *, after: str | None = None, through: str | None = None, limit: int | None = None
    ) -> builtins.list[str]:
        self.requests["list_markers"] += 1
        return super().list_markers(prefix, after=after, through=through, limit=limit)


def _fill(store: S3SegmentStore, hours: int, partitions: int) -> int:
    settings = CompactionSettings(window_ms=60_000, keyframe_every=4)
    compactors = [PartitionCompactor(p, settings) for p in range(partitions)]
    offsets = [0] * partitions
    closed: list[ClosedSegment] = []
    for minute in range(hours * 60):
        for p, compactor in enumerate(compactors):
            ts = T0 + minute * 60_000 + 1_000 + p
            late = minute % 60 == 30 and minute >= 180
            if late:  # a change recorded now, dated three hours back: a late segment
                ts -= 3 * HOUR
            obj = deployment("shop", f"p{p}-d{minute % 40}", offsets[p] + 1)
            closed += compactor.add(offsets[p], applied(ts, obj, offsets[p] + 1), 0.0)
            offsets[p] += 1
    closed += [c for comp in compactors if (c := comp.flush()) is not None]
    writer = SegmentWriter(store, 1, 8)
    for future in [writer.submit(c) for c in closed]:
        future.result()
    writer.close()
    store.put_marker("index/ready/v1")  # what the sink's first assignment writes on a new store
    return len(closed)


def _export(location: S3Location, request: ExportRequest, *, indexed: bool) -> dict[str, Any]:
    store = CountingStore(location)
    if not indexed:
        store.index_layout = None  # the same store, read as one without the index
    catalog = SegmentCatalog(store)
    started, cpu = time.perf_counter(), time.process_time()
    data = export_window(catalog, request).data
    result = {
        "seconds": round(time.perf_counter() - started, 3),
        "cpu_seconds": round(time.process_time() - cpu, 3),
        "requests": dict(store.requests),
        "answered_from_index": catalog.answered_from_index,
        "bytes": len(data),
    }
    result["_data"] = data
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hours", type=int, default=24, help="hours of segments in the store (24)")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3, help="rounds, best of each kept (3)")
    args = parser.parse_args()
    with private_stack([], prefix="kubetape-bench-index-") as (_, info):
        assert info.s3_endpoint is not None
        for line in s3.env_lines(info.s3_endpoint):
            name, value = line.removeprefix("export ").split("=", 1)
            os.environ[name] = value
        location = parse_store_url(f"s3://{s3.BUCKET}/bench/{uuid.uuid4().hex[:8]}")
        assert isinstance(location, S3Location)
        started = time.perf_counter()
        segments = _fill(S3SegmentStore(location), args.hours, args.partitions)
        fill_s = time.perf_counter() - started
        middle = args.hours // 2
        request = ExportRequest(T0 + middle * HOUR, T0 + (middle + 1) * HOUR)
        runs: dict[str, list[dict[str, Any]]] = {"index": [], "whole_listing": []}
        for _ in range(args.repeat):
            runs["index"].append(_export(location, request, indexed=True))
            runs["whole_listing"].append(_export(location, request, indexed=False))
    if len({r.pop("_data") for rs in runs.values() for r in rs}) != 1:
        raise SystemExit("the exports differ between the index and the whole listing")
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in runs.items()}
    index, whole = best["index"], best["whole_listing"]
    print(
        json.dumps(
            {
                "benchmark": "store_index",
                "machine": machine(),
                "store": {"hours": args.hours, "partitions": args.partitions, "segments": segments},
                "fill_seconds": round(fill_s, 1),
                "export_one_hour": {"index": index, "whole_listing": whole, "best_of": args.repeat},
                "index_vs_whole_listing_time": round(index["seconds"] / whole["seconds"], 3),
                "index_vs_whole_listing_header_reads": round(
                    index["requests"]["head"] / max(whole["requests"]["head"], 1), 3
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
