"""What validation reports: rules (code, name, explanation), findings, and the repairs offered for them.

A :class:`Finding` points at one object in one event of a trace (event index, Unix seconds, object
identity) and at the JSON pointers inside it that cause the problem. Each finding offers one or more
:class:`Fix` es, expressed as operations of the transform language (:mod:`pipeline.validate.transform`);
the first fix is the recommended one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Severity(enum.Enum):
    """An ``ERROR`` stops a replay from working (pods never start); a ``WARNING`` degrades it."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Rule:
    """One validation rule: a stable code, a short name and what it means for a replay."""

    code: str
    name: str
    severity: Severity
    summary: str
    explanation: str


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The identity of an object inside a trace (namespace ``None`` for cluster-scoped objects)."""

    api_version: str
    kind: str
    namespace: str | None
    name: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        """The identity of a trace object; tolerant of malformed objects (validation reports, never fails)."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        ns = meta.get("namespace")
        return cls(
            str(obj.get("apiVersion", "")),
            str(obj.get("kind", "")),
            str(ns) if ns else None,
            str(meta.get("name", "")),
        )

    def describe(self) -> str:
        """``Kind namespace/name`` (``Kind name`` when cluster-scoped)."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"

    def selector(self) -> dict[str, str]:
        """The transform ``select`` block that picks exactly this object."""
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        return out


@dataclass(frozen=True, slots=True)
class Fix:
    """One way to repair a finding: a one-line summary and the transform operations doing it."""

    summary: str
    operations: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in one object of one event."""

    rule: Rule
    event_index: int
    ts: int
    obj: ObjectRef
    paths: tuple[str, ...]
    message: str
    fixes: tuple[Fix, ...] = field(default=())
    repeated_at: tuple[int, ...] = ()
    """Later events where the same object has the same problem (reported once, at its first event)."""

    @property
    def code(self) -> str:
        """The rule code (``E0002``)."""
        return self.rule.code

    @property
    def severity(self) -> Severity:
        """The rule's severity."""
        return self.rule.severity

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form, for ``kubetape validate --format json``."""
        return {
            "code": self.rule.code,
            "rule": self.rule.name,
            "severity": self.rule.severity.value,
            "event_index": self.event_index,
            "ts": self.ts,
            "object": {
                "apiVersion": self.obj.api_version,
                "kind": self.obj.kind,
                "namespace": self.obj.namespace,
                "name": self.obj.name,
            },
            "paths": list(self.paths),
            "repeated_at_events": list(self.repeated_at),
            "message": self.message,
            "fixes": [{"summary": f.summary, "operations": list(f.operations)} for f in self.fixes],
        }
