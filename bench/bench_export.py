"""Export benchmark on an offline segment store; prints one JSON document.

N synthetic events spread over one hour of event time are compacted by the sink's own
:class:`~pipeline.sink.compactor.PartitionCompactor` (6 partitions, split by a hash of the key, as Kafka
does) into a local segment store, exactly as the sink writes it, with no broker involved. Then the
one-hour window is exported from that store in both formats, ``--repeats`` times each, through
:func:`~pipeline.store.export.export_window`; the kubetape one also as it was before the splice path,
decoding every object body (``kubetape_decoding_bodies``: the same file, checked by its digest here and
byte for byte by tests/unit/test_export_splice.py).

Beside the exports, in the same run, the same segments are read the two ways a reader of the store
can (each ``--repeats`` times, from a fresh store object):

* ``read``: each segment the export reads fetched from the store, its checksum checked and its body
  inflated: the bytes, and nothing an export could leave out;
* ``decode``: each decoded into events as the export decodes it (:func:`decode_segment`, the keyframe
  of each partition's first segment only).

Targets (issue 32): the export of 100k events <= 0.5 s, and at least 0.5 of the read's speed
(``export_vs_read`` = read time / export time; ``export_vs_decode`` likewise). The wall-clock median and
minimum are printed beside the thread's CPU time and the load average: on a shared machine, wall-clock
times stretch with the load, CPU much less; the ratios use the least CPU time of each.

Usage::

    .venv/bin/python -m bench.bench_export                 # 100k events, 3 repeats per format
    .venv/bin/python -m bench.bench_export --events 20000 --repeats 5 --profile simkube
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import statistics
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import zstandard

from bench.environment import machine
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.header import BODY_PREAMBLE, split_header
from pipeline.formats.wire.probe import EventHead
from pipeline.sink import synthetic
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportFormat, ExportRequest, export_window
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.segment_store import SegmentName

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


def time_export(
    store_dir: Path, start_ms: int, fmt: ExportFormat, repeats: int, *, decode_bodies: bool = False
) -> dict[str, Any]:
    """``repeats`` exports of the hour from a fresh catalog each (as a request to the sink would);
    ``decode_bodies``: the kubetape export decoding every object body (as before the splice path)."""
    walls, cpus = [], []
    events = size = 0
    digest = ""
    for _ in range(repeats):
        catalog = SegmentCatalog(LocalSegmentStore(store_dir))
        began, cpu = time.perf_counter(), time.thread_time()
        request = ExportRequest(start_ms, start_ms + HOUR_MS, fmt)
        result = export_window(catalog, request, decode_bodies=decode_bodies)
        walls.append(time.perf_counter() - began)
        cpus.append(time.thread_time() - cpu)
        events, size, digest = result.events, len(result.data), hashlib.sha256(result.data).hexdigest()
    return {
        "median_seconds": round(statistics.median(walls), 3),
        "min_seconds": round(min(walls), 3),
        "median_cpu_seconds": round(statistics.median(cpus), 3),
        "min_cpu_seconds": round(min(cpus), 3),
        "events": events,
        "bytes": size,
        "sha256": digest[:16],
    }


def planned_segments(store_dir: Path, start_ms: int) -> list[tuple[SegmentName, bool]]:
    """The segments an export of the hour reads, each with whether its keyframe is read (the first of
    each partition), as :func:`~pipeline.store.history.rebuild_window` plans them."""
    catalog = SegmentCatalog(LocalSegmentStore(store_dir))
    catalog.refresh_window(start_ms, start_ms + HOUR_MS)
    planned = []
    for partition in catalog.partitions():
        for index, entry in enumerate(catalog.plan(partition, start_ms, start_ms + HOUR_MS)):
            planned.append((entry.name, index == 0 and entry.header.keyframe_at_ms is not None))
    return planned


def _inflated(data: bytes) -> int:
    """Check a segment's body checksum and inflate it; the inflated size."""
    _header, offset = split_header(data, "bench")
    length, crc = BODY_PREAMBLE.unpack_from(data, offset)
    body = data[offset + BODY_PREAMBLE.size : offset + BODY_PREAMBLE.size + length]
    if zlib.crc32(body) != crc:
        raise RuntimeError("corrupt segment in the benchmark's own store")
    return len(zstandard.ZstdDecompressor().decompress(body))


def time_read(store_dir: Path, planned: list[tuple[SegmentName, bool]], repeats: int) -> dict[str, Any]:
    """``repeats`` reads of the planned segments: fetched and inflated (``read``), and decoded into
    events as the export decodes them (``decode``)."""
    reads, decodes = [], []
    inflated = 0
    for _ in range(repeats):
        store = LocalSegmentStore(store_dir)
        cpu = time.thread_time()
        inflated = sum(_inflated(store.get(name)) for name, _ in planned)
        reads.append(time.thread_time() - cpu)
        store = LocalSegmentStore(store_dir)
        cpu = time.thread_time()
        for name, keyframe in planned:
            decode_segment(store.get(name), with_keyframe=keyframe)
        decodes.append(time.thread_time() - cpu)
    return {
        "segments": len(planned),
        "inflated_bytes": inflated,
        "read_min_cpu_seconds": round(min(reads), 3),
        "decode_min_cpu_seconds": round(min(decodes), 3),
    }


def profile_export(
    store_dir: Path, start_ms: int, fmt: ExportFormat, *, decode_bodies: bool = False, top: int = 30
) -> None:
    """Print the ``top`` functions by own time of one export (a profile only: no JSON is printed)."""
    catalog = SegmentCatalog(LocalSegmentStore(store_dir))
    profiler = cProfile.Profile()
    profiler.enable()
    export_window(catalog, ExportRequest(start_ms, start_ms + HOUR_MS, fmt), decode_bodies=decode_bodies)
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
    parser.add_argument(
        "--decode-bodies",
        action="store_true",
        help="with --profile kubetape: the export that decodes every object body",
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
            profile_export(store_dir, start_ms, ExportFormat(args.profile), decode_bodies=args.decode_bodies)
            return
        export = {fmt.value: time_export(store_dir, start_ms, fmt, args.repeats) for fmt in ExportFormat}
        export["kubetape_decoding_bodies"] = time_export(
            store_dir, start_ms, ExportFormat.KUBETAPE, args.repeats, decode_bodies=True
        )
        read = time_read(store_dir, planned_segments(store_dir, start_ms), args.repeats)
    export_cpu = export[ExportFormat.KUBETAPE.value]["min_cpu_seconds"]
    if export[ExportFormat.KUBETAPE.value]["sha256"] != export["kubetape_decoding_bodies"]["sha256"]:
        raise RuntimeError("the splice export and the export decoding every body wrote different files")
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
        "read_same_segments": read,
        "kubetape_export": {
            "min_cpu_seconds": export_cpu,
            "export_vs_read": round(read["read_min_cpu_seconds"] / export_cpu, 3),
            "export_vs_decode": round(read["decode_min_cpu_seconds"] / export_cpu, 3),
            "decoding_bodies_min_cpu_seconds": export["kubetape_decoding_bodies"]["min_cpu_seconds"],
            "speedup_vs_decoding_bodies": round(
                export["kubetape_decoding_bodies"]["min_cpu_seconds"] / export_cpu, 2
            ),
            "target_seconds": 0.5,
            "target_vs_read": 0.5,
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
