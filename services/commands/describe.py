"""``kubetape describe STORE [--cluster ID]``: one recording in detail: per partition its segments,
bytes, offsets, time range and keyframe times, each gap marker with the offsets lost and why, segments
that do not read. ``kubetape describe --simulation NAME``: one Simulation (phase, speed, source, each
repetition's progress). ``--json`` for machines."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.model.errors import ConfigError
from services.commands.list import human_bytes, recording_row, simulation_summary, table
from services.flags import add_kubeconfig_flags
from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class DescribeSettings:
    store: str | None = None
    cluster: str | None = None
    simulation: str | None = None
    json: bool = False
    kubeconfig: Path | None = None
    context: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", nargs="?", help="a segment store: a directory or an s3:// URL")
    parser.add_argument("--cluster", default=None, help="only this cluster of a fleet's store")
    parser.add_argument("--simulation", metavar="NAME", default=None, help="describe this Simulation instead")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_kubeconfig_flags(
        parser,
        what="with --simulation, the simulation cluster",
        default="$KUBECONFIG, else in-cluster credentials",
    )
    parser.set_defaults(settings=from_flags(DescribeSettings), func=_run)


def _run(args: DescribeSettings) -> int:
    if (args.simulation is None) == (args.store is None):
        raise ConfigError("kubetape describe: give a STORE (a directory or s3:// URL) or --simulation NAME")
    if args.simulation is not None:
        sim = asyncio.run(_get_simulation(args.simulation, args.kubeconfig, args.context))
        print(json.dumps(sim, indent=2) if args.json else describe_simulation(sim))
        return 0
    from pipeline.store.summary import summarize_fleet

    assert args.store is not None
    summaries = [s.to_json() for s in summarize_fleet(args.store, args.cluster)]
    print(json.dumps(summaries, indent=2) if args.json else "\n\n".join(map(describe_recording, summaries)))
    return 0


def describe_recording(summary: dict[str, Any]) -> str:
    row = recording_row(summary)
    lines = [
        f"cluster {summary['cluster']} at {summary['location']}",
        f"  recorded from: {row['topic']}",
        f"  covers: {row['from']} .. {row['to']}",
        f"  {summary['segments']} segments, {row['size']}, {summary['events']} events, "
        f"{summary['keyframes']} keyframes, {summary['gaps']} gaps",
    ]
    partitions = [
        {
            "partition": p["partition"],
            "segments": p["segments"],
            "size": human_bytes(p["bytes"]),
            "offsets": f"{p['first_offset']}..{p['last_offset']}",
            "from": recording_row({**summary, "start_ms": p["start_ms"]})["from"],
            "to": recording_row({**summary, "end_ms": p["end_ms"]})["to"],
            "keyframes": len(p["keyframe_times_ms"]),
        }
        for p in summary["partitions"]
    ]
    columns = ("partition", "segments", "size", "offsets", "from", "to", "keyframes")
    lines += ["", *("  " + line for line in table(partitions, columns).splitlines())]
    for p in summary["partitions"]:
        for gap in p["gaps"]:
            lines.append(
                f"  gap: partition {p['partition']} offsets {gap['first_offset']}..{gap['last_offset']} "
                f"lost ({gap['reason'] or 'no reason recorded'})"
            )
    for name, why in summary["unreadable"].items():
        lines.append(f"  unreadable: {name}: {why}")
    return "\n".join(lines)


def describe_simulation(sim: dict[str, Any]) -> str:
    summary = simulation_summary(sim)
    lines = [f"{key}: {value}" for key, value in summary.items() if value != ""]
    for rep in (sim.get("status") or {}).get("repetitions") or []:
        lines.append(
            f"  repetition {rep.get('index')}: {rep.get('phase')}, {rep.get('applied', 0)} applied, "
            f"{rep.get('failed', 0)} failed" + (f" ({rep['message']})" if rep.get("message") else "")
        )
    return "\n".join(lines)


async def _get_simulation(name: str, kubeconfig: Path | None, context: str | None) -> dict[str, Any]:
    from services.simulation_api import API_VERSION, KIND, call_simulation_api, simulation_cluster

    async with simulation_cluster(kubeconfig, context) as kube:
        found: dict[str, Any] | None = await call_simulation_api(
            kube.get(API_VERSION, KIND, None, name), f"get Simulation {name}"
        )
    if found is None:
        raise ConfigError(f"there is no Simulation named {name!r}; `kubetape list --simulations` shows them")
    return found
