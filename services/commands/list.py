"""``kubetape list STORE``: the recordings a segment store holds, one row per cluster (segments, bytes,
the time range covered, keyframes, gaps, the topic recorded from). ``kubetape list --simulations``: the
Simulations in a cluster (name, phase, speed, source, progress). ``--json`` for machines; ``kubetape
describe`` for one recording or Simulation in detail."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.model.errors import ConfigError
from services.flags import add_kubeconfig_flags
from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class ListSettings:
    store: str | None = None
    simulations: bool = False
    json: bool = False
    kubeconfig: Path | None = None
    context: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", nargs="?", help="a segment store: a directory or an s3:// URL")
    parser.add_argument(
        "--simulations", action="store_true", help="list the Simulations in a cluster instead of a store"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_kubeconfig_flags(
        parser,
        what="with --simulations, the simulation cluster",
        default="$KUBECONFIG, else in-cluster credentials",
    )
    parser.set_defaults(settings=from_flags(ListSettings), func=_run)


def _run(args: ListSettings) -> int:
    if args.simulations == (args.store is not None):
        raise ConfigError("kubetape list: give a STORE (a directory or s3:// URL) or --simulations, not both")
    if args.simulations:
        sims = asyncio.run(list_simulations(args.kubeconfig, args.context))
        rows = [simulation_summary(s) for s in sims]
        print(json.dumps(rows, indent=2) if args.json else table(rows, _SIM_COLUMNS))
        return 0
    from pipeline.store.summary import summarize_fleet

    assert args.store is not None
    summaries = summarize_fleet(args.store)
    if args.json:
        print(json.dumps([s.to_json() for s in summaries], indent=2))
        return 0
    if not summaries:
        print(f"{args.store}: no recordings")
        return 0
    print(table([recording_row(s.to_json()) for s in summaries], _STORE_COLUMNS))
    return 0


_STORE_COLUMNS = ("cluster", "segments", "size", "from", "to", "keyframes", "gaps", "topic")
_SIM_COLUMNS = ("name", "phase", "speed", "source", "progress")


def recording_row(summary: dict[str, Any]) -> dict[str, Any]:
    """A store summary's row of the table: sizes and times for people."""
    return {
        "cluster": summary["cluster"],
        "segments": summary["segments"],
        "size": human_bytes(summary["bytes"]),
        "from": _time(summary["start_ms"]),
        "to": _time(summary["end_ms"]),
        "keyframes": summary["keyframes"],
        "gaps": summary["gaps"],
        "topic": ", ".join(summary["sources"] or summary["topics"]) or "-",
    }


def table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """Columns padded to their widest cell, headers in capitals."""
    cells = [[c.upper() for c in columns], *([str(row.get(c, "")) for c in columns] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells
    )


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _time(ms: int | None) -> str:
    from pipeline.model.timespec import format_time

    return "-" if ms is None else format_time(ms)


# ---- Simulations ---------------------------------------------------------------------------------
async def list_simulations(kubeconfig: Path | None, context: str | None) -> list[dict[str, Any]]:
    from services.simulation_api import API_VERSION, KIND, call_simulation_api, simulation_cluster

    async with simulation_cluster(kubeconfig, context) as kube:
        found: list[dict[str, Any]] = await call_simulation_api(
            kube.list_objects(API_VERSION, KIND), "list Simulations"
        )
    return sorted(found, key=lambda s: str(s["metadata"]["name"]))


def simulation_summary(sim: dict[str, Any]) -> dict[str, Any]:
    """What a person asks of a Simulation: its phase, speed, where its events come from, how far it is."""
    spec, status = sim.get("spec") or {}, sim.get("status") or {}
    return {
        "name": sim["metadata"]["name"],
        "phase": status.get("phase", "Pending"),
        "speed": "max" if spec.get("maxSpeed") else f"{spec.get('speed', 1):g}x",
        "source": simulation_source(spec.get("source") or {}),
        "progress": f"{status.get('completedRepetitions', 0)}/{spec.get('repetitions', 1)} repetitions",
        "message": status.get("message", ""),
    }


def simulation_source(source: dict[str, Any]) -> str:
    if "traceURL" in source:
        return f"trace {source['traceURL']}"
    for kind in ("segments", "topic"):
        if kind in source:
            part = source[kind]
            where = (
                part.get("url")
                or part.get("topic")
                or "/".join(str(part[k]) for k in ("claimName", "path") if k in part)
            )
            return f"{kind} {where} [{part.get('from', '?')}, {part.get('to', '?')})"
    return "-"
