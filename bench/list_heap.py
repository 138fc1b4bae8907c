"""What the watcher holds while it lists every pod of a cluster (its start, or a re-list after 410 Gone),
by structure, with tracemalloc: the parsed list items, then the records and shaper state shaping them
adds. ``Watcher._relist`` kept every item of every page until the last was shaped, so the items were what
grew with the cluster; it now shapes each page as it arrives (:mod:`bench.relist_heap` measures its peak
both ways). Prints one JSON document.

Input: the pods and their owners of a real cluster, as kubectl writes them::

    kubectl get pods -n NS -o json > pods.json
    kubectl get rs,deploy -n NS -o json > owners.json
    .venv/bin/python -m bench.list_heap pods.json owners.json

(:mod:`bench.bench_record` ``--keep DIR`` leaves such a cluster's recording, not its pods: take the dumps
while it runs.)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import load_tracer_config
from pipeline.watch.shaper import Shaped, Shaper

TRACER_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "tracer.yaml"
MIB = 1024 * 1024


class DumpedOwners:
    """The cluster reads the shaper's owner lookups make, answered from the owners' dump."""

    def __init__(self, owners: list[dict[str, Any]]) -> None:
        self._by_kind_name = {(o["kind"], o["metadata"]["name"]): o for o in owners}

    async def resolve(self, gvk: GroupVersionKind) -> Any:
        return gvk

    async def get_object(self, res: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self._by_kind_name.get((res.kind, name))


async def measure(pods_json: bytes, owners: list[dict[str, Any]]) -> dict[str, Any]:
    shaper = Shaper(load_tracer_config(TRACER_CONFIG), DumpedOwners(owners))  # type: ignore[arg-type]
    for owner in owners:
        if owner["kind"] == "Deployment":
            shaper.observe_object("ADDED", {**owner, "apiVersion": "apps/v1"}, 1)
    gc.collect()
    tracemalloc.start()
    items = orjson.loads(pods_json)["items"]
    for item in items:  # as the client fills them in
        item["apiVersion"], item["kind"] = "v1", "Pod"
    listed, _ = tracemalloc.get_traced_memory()
    out = Shaped()
    for item in items:
        out.extend(await shaper.observe_pod("ADDED", item, 2))
    shaped, _ = tracemalloc.get_traced_memory()
    del items
    gc.collect()
    kept, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    pods = len(shaper.pods)
    payload = sum(len(r.value or b"") + len(r.key or "") for r in out.records)
    return {
        "pods": pods,
        "listed_items_mib": round(listed / MIB, 1),
        "listed_kib_per_pod": round(listed / max(pods, 1) / 1024, 2),
        "records_and_shaper_state_mib": round(kept / MIB, 1),
        "records_and_shaper_state_kib_per_pod": round(kept / max(pods, 1) / 1024, 2),
        "held_at_once_mib": round(shaped / MIB, 1),
        "records": len(out.records),
        "record_payload_mib": round(payload / MIB, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("pods", type=Path, help="kubectl get pods -o json")
    parser.add_argument("owners", type=Path, help="kubectl get rs,deploy -o json")
    args = parser.parse_args()
    owners = orjson.loads(args.owners.read_bytes())["items"]
    print(json.dumps(asyncio.run(measure(args.pods.read_bytes(), owners)), indent=2))


if __name__ == "__main__":
    main()
