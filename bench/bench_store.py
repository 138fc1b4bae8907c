"""Segment store benchmark: the sink and the export on S3 against a local directory; prints one JSON document.

One topic (6 partitions) is filled with N synthetic events over one hour of event time. In the same run
and on the same data, the in-process sink (check, compact, zstd, durable fenced writes, commits) drains
it into a local directory and into a prefix of the local stack's S3 server (s3proxy, filesystem backend,
on loopback); then the whole hour is exported from each store with a fresh catalog (so the S3 figure
includes listing the prefix and reading every header). The ratios ``s3 / local`` are the point: both
stores run on the same disk and the same loaded machine, so what is left is the cost of the object store
protocol (HTTP, signing, conditional writes, the epoch listing a fenced write does). Sink runs and
exports alternate between the stores ``--repeat`` times and the best of each is kept: on a shared,
loaded machine a single run mostly measures the neighbours.

Usage::

    .venv/bin/python -m bench.bench_store              # starts a private stack (Kafka + S3, ~1 min)
    .venv/bin/python -m bench.bench_store --events 50000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_sink import PARTITIONS, bench_export, bench_sink, fill_new_topic
from bench.environment import machine, private_stack
from pipeline.sink.service import tune_gc_for_throughput
from pipeline.stack import s3
from pipeline.stack.versions import S3PROXY_VERSION
from pipeline.store.export import ExportFormat
from pipeline.store.store_url import open_segment_store


@contextmanager
def _stack() -> Iterator[tuple[str, str]]:
    """A private stack with Kafka and the S3 server (no clusters); yields (bootstrap, S3 endpoint)."""
    with private_stack([], prefix="kubetape-bench-store-") as (_, info):
        assert info.s3_endpoint is not None
        yield info.bootstrap, info.s3_endpoint


async def _main(bootstrap: str, endpoint: str, n: int, repeat: int) -> dict[str, Any]:
    for line in s3.env_lines(endpoint):
        name, value = line.removeprefix("export ").split("=", 1)
        os.environ[name] = value
    tune_gc_for_throughput()
    topic, start_ms, ends = await fill_new_topic(bootstrap, "store", n)
    kubetape = (ExportFormat.KUBETAPE,)
    sinks: dict[str, list[dict[str, Any]]] = {"local": [], "s3": []}
    with tempfile.TemporaryDirectory(prefix="kubetape-bench-segments-") as tmp:
        for i in range(repeat):  # alternated, best of each, each into an empty store
            sinks["local"].append(await bench_sink(bootstrap, topic, ends, Path(tmp) / str(i)))
            url = f"s3://{s3.BUCKET}/bench/{uuid.uuid4().hex[:8]}"
            sinks["s3"].append(await bench_sink(bootstrap, topic, ends, open_segment_store(url)))
        local_sink, s3_sink = (max(sinks[k], key=lambda r: r["events_per_s"]) for k in ("local", "s3"))
        local_dir = Path(tmp) / "0"
        runs: dict[str, list[dict[str, Any]]] = {"local": [], "s3": []}
        for _ in range(repeat):  # alternated, best of each: the machine's load varies from second to second
            runs["local"].append(
                (await asyncio.to_thread(bench_export, local_dir, start_ms, kubetape))["kubetape"]
            )
            opener = lambda: open_segment_store(url)  # noqa: E731  # a fresh client and catalog per run
            runs["s3"].append((await asyncio.to_thread(bench_export, opener, start_ms, kubetape))["kubetape"])
    local_x, s3_x = (min(runs[k], key=lambda r: r["seconds"]) for k in ("local", "s3"))
    if s3_x["bytes"] != local_x["bytes"] or s3_x["events"] != local_x["events"]:
        raise SystemExit(f"the exports differ: local {local_x}, s3 {s3_x}")
    return {
        "benchmark": "store",
        "machine": machine(),
        "events": n,
        "partitions": PARTITIONS,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "s3_server": f"s3proxy {S3PROXY_VERSION} (filesystem backend, loopback)",
        "sink": {"local": local_sink, "s3": s3_sink, "best_of": repeat},
        "export_one_hour": {"local": local_x, "s3": s3_x, "best_of": repeat},
        "sink_s3_vs_local": round(s3_sink["events_per_s"] / local_sink["events_per_s"], 3),
        "export_s3_vs_local_time": round(s3_x["seconds"] / local_x["seconds"], 3),
        # the export's own thread: decoding and assembling, plus the client side of the requests
        "export_s3_vs_local_cpu": round(s3_x["cpu_seconds"] / local_x["cpu_seconds"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000, help="events in the topic (100000)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="sink runs and exports per store, best kept (3)"
    )
    args = parser.parse_args()
    with _stack() as (bootstrap, endpoint):
        result = asyncio.run(_main(bootstrap, endpoint, args.events, args.repeat))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
