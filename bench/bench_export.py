"""Export benchmark on an offline segment store; prints one JSON document.

N synthetic events spread over one hour of event time are compacted by the sink's own
:class:`~pipeline.sink.compactor.PartitionCompactor` (6 partitions, split by a hash of the key, as Kafka
does) into a local segment store, exactly as the sink writes it, with no broker involved. Then the
one-hour window is exported from that store in both formats, ``--repeats`` times each, through
:func:`~pipeline.store.export.export_window`.

Target (issue 5): the export of 100k events < 2 s. The wall-clock median and minimum are printed beside
the thread's CPU time and the load average: on a shared machine, wall-clock times stretch with the
load, CPU much less.

Usage::

    .venv/bin/python -m bench.bench_export                 # 100k events, 3 repeats per format
    .venv/bin/python -m bench.bench_export --events 20000 --repeats 5 --profile simkube
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from bench.environment import machine
from pipeline.formats.wire.probe import EventHead
from pipeline.sink import synthetic
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportFormat, ExportRequest, export_window
from pipeline.store.local_store import LocalSegmentStore

PARTITIONS = 6
HOUR_MS = 3_600_000
SEGMENT_ZSTD_LEVEL = 3
"""The sink's default segment compression (``SinkSettings.zstd_level``)."""


def build_store(store_dir: Path, n: int, start_ms: int) -> int:
    """Compact ``n`` synthetic events into ``store_dir`` as the sink would; returns the segment count."""
    synthetic.FAST_HASHES = True  # SimKube's pure-Python hash would dominate generating the workload
    settings = CompactionSettings(keyframe_every=10)
    compactors = [PartitionCompactor(p, settings) for p in range(PARTITIONS)]
    messages: list[list[tuple[int, EventHead | None]]] = [[] for _ in range(PARTITIONS)]
    for e in synthetic.synthetic_events(n, start_ms, HOUR_MS):
        batch = messages[zlib.crc32(e.key.encode()) % PARTITIONS]  # one key, one partition: as Kafka
        batch.append((len(batch), EventHead.of(e)))
    store = LocalSegmentStore(store_dir)
    written = 0
    for compactor, batch in zip(compactors, messages, strict=True):
        closed = compactor.add_many(batch, now=0.0)
        last = compactor.flush()  # the open segment too, as the sink does on shutdown
        for c in [*closed, *([last] if last is not None else [])]:
            store.put(c.name, c.encode(SEGMENT_ZSTD_LEVEL))
            written += 1
    return written


def time_export(store_dir: Path, start_ms: int, fmt: ExportFormat, repeats: int) -> dict[str, Any]:
    """``repeats`` exports of the hour from a fresh catalog each (as a request to the sink would)."""
    walls, cpus = [], []
    events = size = 0
    for _ in range(repeats):
        catalog = SegmentCatalog(LocalSegmentStore(store_dir))
        began, cpu = time.perf_counter(), time.thread_time()
        result = export_window(catalog, ExportRequest(start_ms, start_ms + HOUR_MS, fmt))
        walls.append(time.perf_counter() - began)
        cpus.append(time.thread_time() - cpu)
        events, size = result.events, len(result.data)
    return {
        "median_seconds": round(statistics.median(walls), 3),
        "min_seconds": round(min(walls), 3),
        "median_cpu_seconds": round(statistics.median(cpus), 3),
        "min_cpu_seconds": round(min(cpus), 3),
        "events": events,
        "bytes": size,
    }


def profile_export(store_dir: Path, start_ms: int, fmt: ExportFormat, top: int = 30) -> None:
    """Print the ``top`` functions by own time of one export (a profile only: no JSON is printed)."""
    catalog = SegmentCatalog(LocalSegmentStore(store_dir))
    profiler = cProfile.Profile()
    profiler.enable()
    export_window(catalog, ExportRequest(start_ms, start_ms + HOUR_MS, fmt))
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000, help="events in the store (100000)")
    parser.add_argument("--repeats", type=int, default=3, help="exports per format (3)")
    parser.add_argument(
        "--profile",
        choices=[f.value for f in ExportFormat],
        default=None,
        help="print a cProfile of one export in this format instead of timing",
    )
    args = parser.parse_args()
    now = int(time.time() * 1000) - HOUR_MS
    start_ms = now - now % 60_000
    with tempfile.TemporaryDirectory(prefix="kubetape-bench-export-") as tmp:
        store_dir = Path(tmp)
        built = time.perf_counter()
        segments = build_store(store_dir, args.events, start_ms)
        build_seconds = time.perf_counter() - built
        if args.profile is not None:
            profile_export(store_dir, start_ms, ExportFormat(args.profile))
            return
        export = {fmt.value: time_export(store_dir, start_ms, fmt, args.repeats) for fmt in ExportFormat}
    result = {
        "benchmark": "export",
        "machine": machine(),
        "events": args.events,
        "partitions": PARTITIONS,
        "segments": segments,
        "store_build_seconds": round(build_seconds, 3),
        "repeats": args.repeats,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "export_one_hour": export,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
