"""Analytics benchmarks (no services needed); prints one JSON document.

* ``fold``: a synthetic recording (N pods of 50 Deployments, each created, started and finished, plus
  ConfigMap changes) decoded from the Kafka wire format alone, then decoded *and* folded into the
  per-second timeline (what the ``timeline`` consumer does per message). Figures: events/s of each and
  the fold's share of the decode-only rate (1.0 = folding is free; issue 32's target: >= 0.5). Each is
  run ``--repeats`` times in turn and the least thread CPU time of each is kept (a shared machine
  stretches wall-clock times unevenly). ``rows_digest`` covers every value of every row: a change that
  only makes the fold faster leaves it as it was.

  The pods name their Deployment as controller (``ownerReferences``), as a Deployment's pods do.
  ``--bare-pods`` leaves that out, as this benchmark did before: every pod is then a bare pod that asks
  for itself and is never deleted, so each second has a row per pod ever created (4.6M rows for 60k
  events at 20,000 pods): the cost is then the output's size, not the fold.
* ``parquet``: the resulting rows written to and read back from ``timeline.parquet``: rows/s each way.

Usage: ``.venv/bin/python -m bench.bench_analytics [--pods 20000] [--repeats 3] [--bare-pods]``
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.environment import machine
from pipeline.analytics.timeline import TimelineFolder
from pipeline.analytics.timeline_rows import TimelineRow
from pipeline.analytics.timeline_store import read_timeline, write_timeline
from pipeline.formats.wire.codec import decode_event, encode_event
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey

T0 = 1_800_000_000_000


def synthetic_recording(pods: int, *, owned: bool = True) -> list[Event]:
    events: list[Event] = []
    for i in range(pods):
        owner = ObjectKey(f"apps/Deployment/shop/web-{i % 50}")
        key = ObjectKey(f"core/Pod/shop/web-{i % 50}-{i}")
        created = T0 + i * 20  # 50 pods a second
        meta: dict[str, Any] = {"name": f"web-{i % 50}-{i}", "namespace": "shop"}
        if owned:
            meta["ownerReferences"] = [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"web-{i % 50}", "controller": True}
            ]
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
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


def rows_digest(rows: list[TimelineRow]) -> str:
    """A digest of every row's every value: equal digests, equal rows (compare runs of two versions)."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(repr(dataclasses.astuple(row)).encode())
    return digest.hexdigest()[:16]


def _fold(wire: list[bytes]) -> list[TimelineRow]:
    """Decode and fold ``wire`` as the timeline consumer does, in the runner's batches of 1,000."""
    folder = TimelineFolder()
    rows = []
    for index in range(0, len(wire), 1000):
        folder.add_all(decode_event(value) for value in wire[index : index + 1000])
        rows.extend(folder.advance())
    rows.extend(folder.finish())
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, in turn; the least CPU kept")
    parser.add_argument("--bare-pods", action="store_true", help="pods without an owner (see above)")
    args = parser.parse_args()
    wire = [encode_event(e) for e in synthetic_recording(args.pods, owned=not args.bare_pods)]

    decode_s = fold_s = float("inf")
    rows: list[TimelineRow] = []
    for _ in range(args.repeats):
        started = time.thread_time()
        for value in wire:
            decode_event(value)
        decode_s = min(decode_s, time.thread_time() - started)
        started = time.thread_time()
        rows = _fold(wire)
        fold_s = min(fold_s, time.thread_time() - started)

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
        "pods_owned": not args.bare_pods,
        "repeats": args.repeats,
        "timeline_rows": len(rows),
        "rows_digest": rows_digest(rows),
        "fold": {
            "decode_only_events_per_s": round(events / decode_s),
            "decode_and_fold_events_per_s": round(events / fold_s),
            "ratio_fold_to_decode_only": round(decode_s / fold_s, 3),
            "target_ratio": 0.5,
        },
        "parquet": {
            "write_rows_per_s": round(len(rows) / write_s),
            "read_rows_per_s": round(len(rows) / read_s),
            "bytes_per_row": round(size / len(rows), 2),
        },
        "machine": machine(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
