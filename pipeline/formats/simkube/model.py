"""SimKube's trace, field for field, and the format versions kubetape reads and writes.

Versions 2 and 3 share everything but one field: v2 has ``index`` (GVK → ``ns/name`` → u64 spec hash),
v3 has ``tracked_objects`` (GVK → ``ns/name`` → ``{}``, a metadata map SimKube leaves empty for now).
:class:`SimkubeTrace` always holds an ``index`` with hashes: read from v3, they are recomputed from the
events (:func:`index_from_events`), since v3 no longer stores them; written as v3, only the names are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import TracerConfig

SIMKUBE_TRACE_VERSION = 2
"""The SimKube trace format version kubetape writes by default (the one released SimKube reads)."""
SIMKUBE_V3 = 3
"""SimKube's next format (``tracked_objects`` instead of ``index``), written on request."""
WRITABLE_VERSIONS = (SIMKUBE_TRACE_VERSION, SIMKUBE_V3)
READABLE_VERSIONS = (1, *WRITABLE_VERSIONS)
"""Version 1 (SimKube ≤ 1.1.1) is read and upgraded to 2; it is never written."""

U64_MAX = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

SimkubeOwner = tuple[str, str]
"""A ``pod_lifecycles`` key: (owner GVK string, owner ``namespace/name``)."""


def versions_text(versions: Iterable[int] = READABLE_VERSIONS) -> str:
    """``1, 2 and 3``: for messages naming the versions kubetape handles."""
    items = [str(v) for v in versions]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


@dataclass(frozen=True, slots=True)
class SimkubeLifecycle:
    """SimKube's ``PodLifecycleData`` in seconds: Running(start) if ``end`` is None, else Finished.

    ``start`` None is SimKube's ``Empty`` (never stored by SimKube, accepted for completeness).
    """

    start: int | None
    end: int | None = None

    def to_wire(self) -> Any:
        """serde's externally tagged form."""
        if self.start is None:
            return "Empty"
        if self.end is None:
            return {"Running": self.start}
        return {"Finished": [self.start, self.end]}


@dataclass(frozen=True, slots=True)
class SimkubeEvent:
    """One ``TraceEvent``: objects applied and deleted at ``ts`` (Unix seconds)."""

    ts: int
    applied_objs: list[dict[str, Any]] = field(default_factory=list)
    deleted_objs: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SimkubeTrace:
    """A SimKube trace. ``config`` is kept as stored (use :meth:`tracer_config`); ``version`` is the
    format it was read from or will be written as (2 or 3)."""

    version: int
    config: dict[str, Any]
    events: list[SimkubeEvent]
    index: dict[str, dict[str, int]]
    pod_lifecycles: dict[SimkubeOwner, dict[int, list[SimkubeLifecycle]]]
    read_from_version: int = field(default=SIMKUBE_TRACE_VERSION, compare=False)

    def tracer_config(self, source: str = "<trace config>") -> TracerConfig:
        """The trace's config, normalized as SimKube does on import (raises ConfigError)."""
        return TracerConfig.from_mapping(self.config, source)

    def tracked_objects(self) -> dict[str, dict[str, dict[str, Any]]]:
        """v3's ``tracked_objects``: the index's names with empty metadata."""
        return {gvk: {name: {} for name in names} for gvk, names in self.index.items()}


def namespaced_name(obj: dict[str, Any]) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object: how SimKube names objects."""
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace"), meta.get("name")
    return f"{ns}/{name}" if ns else str(name)


def index_from_events(
    events: Iterable[SimkubeEvent], names: Mapping[str, Iterable[str]] | None = None
) -> dict[str, dict[str, int]]:
    """A v2 index for ``events``: each object's spec hash as of its last event (a delete keeps the hash
    of the version last applied, as kubetape's exporter writes it).

    With ``names`` (v3's tracked objects), the index lists exactly those names: a name the events never
    show gets hash 0, since its hash is not recorded anywhere."""
    hashes: dict[tuple[str, str], int] = {}
    for event in events:
        for obj, deleted in [(o, False) for o in event.applied_objs] + [
            (o, True) for o in event.deleted_objs
        ]:
            gvk = GroupVersionKind.from_api_version(str(obj["apiVersion"]), str(obj["kind"])).format()
            key = (gvk, namespaced_name(obj))
            if not (deleted and key in hashes):
                hashes[key] = object_spec_hash(obj)
    index: dict[str, dict[str, int]] = {}
    if names is None:
        for (gvk, name), spec_hash in hashes.items():
            index.setdefault(gvk, {})[name] = spec_hash
        return index
    for gvk, gvk_names in names.items():
        entries = index.setdefault(gvk, {})
        for name in gvk_names:
            entries[name] = hashes.get((gvk, name), 0)
    return index
