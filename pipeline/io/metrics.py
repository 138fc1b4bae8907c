"""A small Prometheus text-format registry: counters and gauges with labels, no global state.

Each service owns one :class:`Metrics`; ``/metrics`` renders it. Kept dependency-free on purpose:
the services expose a handful of series and need nothing of a full client library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

LabelKey = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class _Family:
    name: str
    help: str
    kind: str  # "counter" or "gauge"
    values: dict[LabelKey, float] = field(default_factory=dict)


class Metrics:
    """Named metric families; ``inc`` for counters, ``set`` for gauges."""

    def __init__(self, prefix: str = "kubetape") -> None:
        self._prefix = prefix
        self._families: dict[str, _Family] = {}

    def counter(self, name: str, help_text: str) -> None:
        self._families.setdefault(name, _Family(f"{self._prefix}_{name}", help_text, "counter"))

    def gauge(self, name: str, help_text: str) -> None:
        self._families.setdefault(name, _Family(f"{self._prefix}_{name}", help_text, "gauge"))

    def inc(self, name: str, amount: float = 1.0, labels: Mapping[str, str] | None = None) -> None:
        family = self._family(name)
        key = _label_key(labels)
        family.values[key] = family.values.get(key, 0.0) + amount

    def set(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        self._family(name).values[_label_key(labels)] = value

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        return self._family(name).values.get(_label_key(labels), 0.0)

    def _family(self, name: str) -> _Family:
        try:
            return self._families[name]
        except KeyError:
            raise KeyError(f"metric {name!r} is not declared; call counter()/gauge() first") from None

    def render(self) -> str:
        lines: list[str] = []
        for family in self._families.values():
            lines.append(f"# HELP {family.name} {family.help}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            if not family.values:
                lines.append(f"{family.name} 0")
            for key, value in sorted(family.values.items()):
                lines.append(f"{family.name}{_render_labels(key)} {_render_value(value)}")
        return "\n".join(lines) + "\n"


def _label_key(labels: Mapping[str, str] | None) -> LabelKey:
    return tuple(sorted((labels or {}).items()))


def _render_labels(key: LabelKey) -> str:
    if not key:
        return ""
    escaped = (f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"' for k, v in key)
    return "{" + ",".join(escaped) + "}"


def _render_value(value: float) -> str:
    number = float(value)  # callers may pass ints; Prometheus text wants one canonical form
    return str(int(number)) if number.is_integer() else repr(number)
