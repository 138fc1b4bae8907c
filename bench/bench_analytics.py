"""Analytics benchmarks (no services needed); prints one JSON document.

* ``fold``: a synthetic recording (N pods of 50 Deployments, each created, started and finished, plus
  ConfigMap changes) decoded from the Kafka wire format alone, then decoded *and* folded into the
  per-second timeline (what the ``timeline`` consumer does per message). Figures: events/s of each and
  the fold's share of the decode-only rate (1.0 = folding is free).
* ``parquet``: the resulting rows written to and read back from ``timeline.parquet``: rows/s each way.

Usage: ``.venv/bin/python -m bench.bench_analytics [--pods 20000]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.environment import machine
from pipeline.analytics.timeline import TimelineFolder
from pipeline.analytics.timeline_store import read_timeline, write_timeline
from pipeline.formats.wire.codec import decode_event, encode_event
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey

T0 = 1_800_000_000_000


def synthetic_recording(pods: int) -> list[Event]:
    events: list[Event] = []
    for i in range(pods):
        owner = ObjectKey(f"apps/Deployment/shop/web-{i % 50}")
        key = ObjectKey(f"core/Pod/shop/web-{i % 50}-{i}")
        created = T0 + i * 20  # 50 pods a second
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"web-{i % 50}-{i}", "namespace": "shop"},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]
            },
        }
        events.append(Event.applied(created, key, obj, 1))
        start, end = created + 500, created + 30_000
        events.append(
            Event.pod_lifecycle(start, key, owner_key=owner, pod_spec_hash=1, start_ms=start, end_ms=end)
        )
        config = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i % 100}", "namespace": "shop"},
        }
        events.append(Event.applied(created + 5, ObjectKey(f"core/ConfigMap/shop/cm-{i % 100}"), config, 2))
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=20_000)
    args = parser.parse_args()
    wire = [encode_event(e) for e in synthetic_recording(args.pods)]

    started = time.perf_counter()
    for value in wire:
        decode_event(value)
    decode_s = time.perf_counter() - started

    started = time.perf_counter()
    folder = TimelineFolder()
    rows = []
    for index in range(0, len(wire), 1000):  # the runner's batches
        folder.add_all(decode_event(value) for value in wire[index : index + 1000])
        rows.extend(folder.advance())
    rows.extend(folder.finish())
    fold_s = time.perf_counter() - started

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "timeline.parquet"
        started = time.perf_counter()
        write_timeline(path, rows)
        write_s = time.perf_counter() - started
        started = time.perf_counter()
        read_back = read_timeline(path)
        read_s = time.perf_counter() - started
        size = path.stat().st_size
    assert len(read_back) == len(rows)
    events = len(wire)
    result = {
        "events": events,
        "timeline_rows": len(rows),
        "fold": {
            "decode_only_events_per_s": round(events / decode_s),
            "decode_and_fold_events_per_s": round(events / fold_s),
            "ratio_fold_to_decode_only": round(decode_s / fold_s, 3),
        },
        "parquet": {
            "write_rows_per_s": round(len(rows) / write_s),
            "read_rows_per_s": round(len(rows) / read_s),
            "bytes_per_row": round(size / len(rows), 2),
        },
        "machine": machine(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
