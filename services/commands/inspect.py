"""``kubetape inspect FILE``: summarise any trace or segment file (``--json`` for machines); a segment in an
object store is named by its URL, ``s3://bucket/prefix/segments/p0000/p0000-000000000000000.kseg``.
``kubetape inspect --clusters STORE`` lists the clusters of a fleet a segment store holds, one a line."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from services.settings import from_flags


@dataclass(frozen=True, slots=True)
class InspectSettings:
    file: str
    json: bool = False
    clusters: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a file, or the s3:// URL of a segment in a segment store")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--clusters",
        action="store_true",
        help="FILE is a segment store (directory or s3:// URL): list the clusters it holds, one a line "
        "(the values of --cluster for export, replay --segments and validate)",
    )
    parser.set_defaults(settings=from_flags(InspectSettings), func=_run)


def _run(args: InspectSettings) -> int:
    from pipeline.formats.inspect import inspect_bytes, inspect_file
    from pipeline.store.store_url import stored_clusters

    if args.clusters:
        clusters = stored_clusters(args.file)
        print(json.dumps(clusters) if args.json else "\n".join(clusters))
        return 0
    if args.file.startswith("s3://"):
        report = inspect_bytes(*_fetch_segment(args.file))
    else:
        report = inspect_file(Path(args.file))
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print(report.render_text())
    return 0


def _fetch_segment(url: str) -> tuple[bytes, str]:
    """The bytes of the segment at ``url``: the store is the URL up to ``segments/`` (or up to the name)."""
    from pipeline.model.errors import ConfigError
    from pipeline.store.segment_store import SegmentName, parse_segment_name
    from pipeline.store.store_url import open_segment_store

    base, _, name = url.rstrip("/").rpartition("/")
    if parse_segment_name(name) is None:
        raise ConfigError(
            f"{url}: not a segment URL; name one segment, e.g. "
            "s3://bucket/prefix/segments/p0000/p0000-000000000000000.kseg"
        )
    head, sep, _ = base.rpartition("/segments/")
    store = open_segment_store(head if sep else base)
    return store.get(SegmentName(name)), store.describe(SegmentName(name))
