"""Simulation runs as data: one directory per run, labelled with its parameters.

A run directory holds:

* ``run.json`` — :class:`RunInfo`: format version, name, trace, speed, node pools, repetition, labels,
  and ``config``, the parameter set without the repetition (runs sharing it are repetitions);
* ``timeline.parquet`` / ``pods.parquet`` — the simulated cluster's per-second state and pod times,
  in trace seconds since the trace start (:mod:`pipeline.analytics.timeline`);
* ``recorded.parquet`` / ``recorded-pods.parquet`` — the same fold over the trace itself, so a run
  carries its own reference for fidelity;
* ``report.json`` — the replayer's fidelity report (``ReplayReport.to_json()``), kept as is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.analytics.timeline_rows import PodTimes, TimelineRow
from pipeline.analytics.timeline_store import read_pod_times, read_timeline, write_pod_times, write_timeline
from pipeline.model.errors import ConfigError, FormatError, UnknownVersionError

RUN_FORMAT = "kubetape.run"
RUN_VERSION = 1
RUN_FILE = "run.json"
TIMELINE_FILE, PODS_FILE = "timeline.parquet", "pods.parquet"
RECORDED_FILE, RECORDED_PODS_FILE = "recorded.parquet", "recorded-pods.parquet"
REPORT_FILE = "report.json"


@dataclass(frozen=True, slots=True)
class NodePool:
    """Virtual nodes of one skeleton: its name, how many, and what each offers."""

    skeleton: str
    count: int
    cpu_m: float = 0.0
    memory_bytes: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "skeleton": self.skeleton,
            "count": self.count,
            "cpu_m": self.cpu_m,
            "memory_bytes": self.memory_bytes,
        }


@dataclass(frozen=True, slots=True)
class RunInfo:
    name: str
    trace: str
    speed: float
    node_pools: tuple[NodePool, ...] = ()
    repetition: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    timeline_source: str = "replay-sampler"
    """How the simulated cluster was observed (see services/sweep.py)."""

    @property
    def config(self) -> str:
        """The parameters without the repetition: runs with the same config are repetitions."""
        pools = "+".join(f"{p.skeleton}:{p.count}" for p in self.node_pools) or "no-nodes"
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return f"{Path(self.trace).name} speed={self.speed:g} nodes={pools}" + (f" {extra}" if extra else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": RUN_FORMAT,
            "version": RUN_VERSION,
            "name": self.name,
            "trace": self.trace,
            "speed": self.speed,
            "node_pools": [p.to_json() for p in self.node_pools],
            "repetition": self.repetition,
            "labels": dict(self.labels),
            "config": self.config,
            "timeline_source": self.timeline_source,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> RunInfo:
        if doc.get("format") != RUN_FORMAT:
            raise FormatError(f"{where}: not a kubetape run description (format {doc.get('format')!r})")
        if doc.get("version") != RUN_VERSION:
            raise UnknownVersionError(
                f"{where}: run format version {doc.get('version')!r} is not supported (this build reads "
                f"{RUN_VERSION}); use a matching kubetape"
            )
        try:
            return cls(
                name=str(doc["name"]),
                trace=str(doc["trace"]),
                speed=float(doc["speed"]),
                node_pools=tuple(
                    NodePool(str(p["skeleton"]), int(p["count"]), float(p["cpu_m"]), float(p["memory_bytes"]))
                    for p in doc["node_pools"]
                ),
                repetition=int(doc["repetition"]),
                labels={str(k): str(v) for k, v in doc["labels"].items()},
                timeline_source=str(doc.get("timeline_source", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"{where}: malformed run description ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True, slots=True)
class Run:
    """A run directory, loaded."""

    path: Path
    info: RunInfo
    timeline: list[TimelineRow]
    pods: list[PodTimes]
    recorded: list[TimelineRow]
    recorded_pods: list[PodTimes]
    report: Mapping[str, Any]


def write_run(
    path: Path,
    info: RunInfo,
    *,
    timeline: Sequence[TimelineRow],
    pods: Sequence[PodTimes],
    recorded: Sequence[TimelineRow],
    recorded_pods: Sequence[PodTimes],
    report: Mapping[str, Any],
) -> None:
    """Write a run directory; ``run.json`` last, so a directory with it is complete."""
    path.mkdir(parents=True, exist_ok=True)
    write_timeline(path / TIMELINE_FILE, timeline)
    write_pod_times(path / PODS_FILE, pods)
    write_timeline(path / RECORDED_FILE, recorded)
    write_pod_times(path / RECORDED_PODS_FILE, recorded_pods)
    _write_json(path / REPORT_FILE, report)
    _write_json(path / RUN_FILE, info.to_json())


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    with temp.open("w") as handle:
        json.dump(doc, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    temp.replace(path)


def read_run(path: Path) -> Run:
    run_file = path / RUN_FILE
    try:
        doc = json.loads(run_file.read_text())
        report = json.loads((path / REPORT_FILE).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: not a complete run directory ({exc.filename} is missing)") from None
    except (OSError, ValueError) as exc:
        raise FormatError(f"{path}: unreadable run files ({exc})") from None
    return Run(
        path=path,
        info=RunInfo.from_json(doc, str(run_file)),
        timeline=read_timeline(path / TIMELINE_FILE),
        pods=read_pod_times(path / PODS_FILE),
        recorded=read_timeline(path / RECORDED_FILE),
        recorded_pods=read_pod_times(path / RECORDED_PODS_FILE),
        report=report,
    )


def find_runs(paths: Iterable[Path]) -> list[Path]:
    """Run directories among ``paths``: each path is a run, or a directory of runs (a sweep's output)."""
    found: list[Path] = []
    for path in paths:
        if (path / RUN_FILE).is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(child for child in path.iterdir() if (child / RUN_FILE).is_file()))
        else:
            raise ConfigError(f"{path}: no such run directory (expected a directory with {RUN_FILE})")
    if not found and paths:
        raise ConfigError(
            f"no runs found in {', '.join(map(str, paths))}: a run is a directory with {RUN_FILE} "
            f"(made by `kubetape sweep`)"
        )
    return found
