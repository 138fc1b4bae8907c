"""Periodic listings of a (simulated) cluster turned into events, so the timeline fold can read them.

A replay's cluster is observed by listing its pods, nodes and pod controllers every trace second or
so. Each listing becomes ``APPLIED`` events (the objects as listed, status included) and ``DELETED``
events for the objects of that kind that were listed last time and are gone now. Namespaces can be
mapped back (a replay runs recorded namespace ``ns`` as ``<prefix>-ns``), so the replay's owners carry
the recording's names and the two timelines compare owner by owner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipeline.model.errors import FormatError
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey, key_of


def strip_prefix(prefix: str) -> Callable[[str], str]:
    """The inverse of the replayer's namespace prefix: ``<prefix>-ns`` → ``ns`` (others unchanged)."""
    head = f"{prefix}-" if prefix else ""

    def unmap(namespace: str) -> str:
        return namespace[len(head) :] if head and namespace.startswith(head) else namespace

    return unmap


class SnapshotEvents:
    """Diffs successive listings per kind into events (see the module docstring)."""

    def __init__(self, unmap_namespace: Callable[[str], str] = str) -> None:
        self._unmap = unmap_namespace
        self._listed: dict[tuple[str, str], dict[ObjectKey, dict[str, Any]]] = {}
        self.skipped = 0

    def observe(
        self, ts_ms: int, api_version: str, kind: str, objects: Iterable[Mapping[str, Any]]
    ) -> list[Event]:
        """Events for one listing of ``kind`` taken at ``ts_ms``."""
        events: list[Event] = []
        now: dict[ObjectKey, dict[str, Any]] = {}
        for listed in objects:
            obj = {**listed, "apiVersion": api_version, "kind": kind}  # list items omit both
            meta = dict(obj.get("metadata") or {})
            if isinstance(meta.get("namespace"), str):
                meta["namespace"] = self._unmap(meta["namespace"])
            obj["metadata"] = meta
            try:
                key = key_of(obj)
                events.append(Event.applied(ts_ms, key, obj, 0))
            except FormatError:
                self.skipped += 1  # an object without a name cannot be followed; count it, go on
                continue
            now[key] = obj
        previous = self._listed.get((api_version, kind), {})
        for key, obj in previous.items():
            if key not in now:
                events.append(Event.deleted(ts_ms, key, obj))
        self._listed[(api_version, kind)] = now
        return events
