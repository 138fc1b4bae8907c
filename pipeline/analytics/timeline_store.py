"""Timeline rows and pod times ↔ Parquet files (``timeline.parquet``, ``pods.parquet``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.analytics.timeline_rows import TIMELINE_COLUMNS, PodTimes, TimelineRow
from pipeline.io.parquet import read_columns, write_columns

TIMELINE_FORMAT, TIMELINE_VERSION = "kubetape.timeline", 3
"""Version 2 added ``desired``, version 3 the recorded load (``cpu_used_m``, ``memory_used_bytes``,
``usage_pods``); older files still read (what they lack is None in them)."""
_ADDED_SINCE_V1 = ("desired", "cpu_used_m", "memory_used_bytes", "usage_pods")
PODS_FORMAT, PODS_VERSION = "kubetape.pod-times", 1

TIMELINE_TYPES = {
    "second": "int64",
    "owner": "string",
    "pending": "int64",
    "running": "int64",
    "succeeded": "int64",
    "failed": "int64",
    "cpu_requested_m": "float64",
    "memory_requested_bytes": "float64",
    "nodes": "int64",
    "nodes_used": "int64",
    "desired": "int64",
    "cpu_used_m": "float64",
    "memory_used_bytes": "float64",
    "usage_pods": "int64",
}
assert tuple(TIMELINE_TYPES) == TIMELINE_COLUMNS
_POD_TYPES = {"pod": "string", "owner": "string", "created_s": "float64", "running_s": "float64"}


def write_timeline(path: Path, rows: Sequence[TimelineRow]) -> None:
    columns = {name: [getattr(row, name) for row in rows] for name in TIMELINE_COLUMNS}
    write_columns(path, columns, TIMELINE_TYPES, format_name=TIMELINE_FORMAT, version=TIMELINE_VERSION)


def read_timeline(path: Path) -> list[TimelineRow]:
    columns = read_columns(path, format_name=TIMELINE_FORMAT, version=TIMELINE_VERSION, also_reads=(1, 2))
    count = len(columns["second"])
    for name in _ADDED_SINCE_V1:
        columns.setdefault(name, [None] * count)
    return [TimelineRow(**{name: columns[name][i] for name in TIMELINE_COLUMNS}) for i in range(count)]


def write_pod_times(path: Path, pods: Sequence[PodTimes]) -> None:
    columns = {name: [getattr(pod, name) for pod in pods] for name in _POD_TYPES}
    write_columns(path, columns, _POD_TYPES, format_name=PODS_FORMAT, version=PODS_VERSION)


def read_pod_times(path: Path) -> list[PodTimes]:
    columns = read_columns(path, format_name=PODS_FORMAT, version=PODS_VERSION)
    return [
        PodTimes(columns["pod"][i], columns["owner"][i], columns["created_s"][i], columns["running_s"][i])
        for i in range(len(columns["pod"]))
    ]
