"""Parquet files (pyarrow): columns of plain Python values in, columns out; written atomically.

Analysts read these with DuckDB (``SELECT * FROM 'timeline.parquet'``) or pandas
(``pandas.read_parquet``). A file is written to a temporary name, fsynced and renamed, so a reader or a
crash never sees half a file. Each file carries ``kubetape.format`` and ``kubetape.version`` in its schema
metadata; :func:`read_columns` rejects another format or version with a clear error.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.model.errors import FormatError, UnknownVersionError

ColumnType = str
"""``"int64"``, ``"float64"`` or ``"string"``."""

_ARROW_TYPES = {"int64": pa.int64(), "float64": pa.float64(), "string": pa.string()}


def write_columns(
    path: Path,
    columns: Mapping[str, Sequence[Any]],
    types: Mapping[str, ColumnType],
    *,
    format_name: str,
    version: int,
) -> None:
    """Write ``columns`` (equal lengths, in ``types``' order) to ``path`` atomically."""
    schema = pa.schema(
        [pa.field(name, _ARROW_TYPES[kind]) for name, kind in types.items()],
        metadata={b"kubetape.format": format_name.encode(), b"kubetape.version": str(version).encode()},
    )
    table = pa.table({name: list(columns.get(name, ())) for name in types}, schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, temp, compression="zstd")
    with temp.open("rb") as handle:
        os.fsync(handle.fileno())
    temp.replace(path)


def read_columns(
    path: Path, *, format_name: str, version: int, also_reads: Collection[int] = ()
) -> dict[str, list[Any]]:
    """The columns of a file written by :func:`write_columns` with the same format name and ``version``
    (or one of the older versions ``also_reads``: columns added since are then absent)."""
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except (OSError, pa.ArrowException) as exc:
        raise FormatError(f"{path}: not a readable Parquet file ({exc})") from None
    metadata = table.schema.metadata or {}
    found = metadata.get(b"kubetape.format", b"").decode()
    if found != format_name:
        raise FormatError(f"{path}: holds {found or 'no kubetape format'!r}, expected {format_name!r}")
    found_version = metadata.get(b"kubetape.version", b"").decode()
    if found_version not in {str(v) for v in (version, *also_reads)}:
        raise UnknownVersionError(
            f"{path}: {format_name} version {found_version or '?'} is not supported (this build reads "
            f"version {version}); use a matching kubetape"
        )
    columns: dict[str, list[Any]] = table.to_pydict()
    return columns
