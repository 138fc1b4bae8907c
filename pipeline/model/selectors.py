"""Kubernetes label selectors (``matchLabels`` / ``matchExpressions``) as frozen values.

Parsed once when a config loads, so an invalid selector fails there (SimKube panics at export time).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.model.errors import ConfigError

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One ``matchExpressions`` entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement (Kubernetes semantics)."""
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A ``metav1.LabelSelector``: all ``match_labels`` and all ``match_expressions`` must hold."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with ``labels`` is selected."""
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            req.matches(labels) for req in self.match_expressions
        )

    def to_mapping(self) -> dict[str, Any]:
        """The Kubernetes form, as accepted by :func:`parse_label_selector`."""
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            out["matchExpressions"] = [
                {"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
                for r in self.match_expressions
            ]
        return out


def _fail(where: str, problem: str) -> ConfigError:
    return ConfigError(f"{where}: {problem}")


def parse_label_selector(value: Any, where: str) -> LabelSelector:
    """Parse a ``{matchLabels, matchExpressions}`` mapping; raises ConfigError naming ``where``."""
    if not isinstance(value, dict):
        raise _fail(where, "a label selector must be a mapping with matchLabels and/or matchExpressions")
    unknown = set(value) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise _fail(where, f"unknown field(s) {sorted(unknown)}; expected matchLabels, matchExpressions")
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise _fail(f"{where}.matchLabels", "must map label names to string values")
    exprs = value.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise _fail(f"{where}.matchExpressions", "must be a list")
    reqs = tuple(_parse_requirement(e, f"{where}.matchExpressions[{i}]") for i, e in enumerate(exprs))
    if not labels and not reqs:
        raise _fail(where, "an empty selector would match every object; give matchLabels or matchExpressions")
    return LabelSelector(tuple(sorted(labels.items())), reqs)


def _parse_requirement(value: Any, where: str) -> LabelRequirement:
    if not isinstance(value, dict) or set(value) - {"key", "operator", "values"}:
        raise _fail(where, "must be a mapping with key, operator and (for In/NotIn) values")
    key, op, values = value.get("key"), value.get("operator"), value.get("values") or []
    if not isinstance(key, str) or not key:
        raise _fail(f"{where}.key", "must be a non-empty string")
    if op not in OPERATORS:
        raise _fail(f"{where}.operator", f"must be one of {', '.join(OPERATORS)}, got {op!r}")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise _fail(f"{where}.values", "must be a list of strings")
    if op in ("In", "NotIn") and not values:
        raise _fail(f"{where}.values", f"operator {op} needs at least one value")
    if op in ("Exists", "DoesNotExist") and values:
        raise _fail(f"{where}.values", f"operator {op} takes no values")
    return LabelRequirement(key, str(op), tuple(values))


# kubectl's selector syntax, one requirement at a time: commas inside "in (a,b)" do not split requirements.
_REQUIREMENT = re.compile(
    r"\s*(?:"
    r"(?P<set_key>[^\s!=,()]+)\s+(?P<set_op>in|notin)\s*\((?P<set_values>[^()]*)\)"
    r"|(?P<key>[^\s!=,()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=,()]*)"
    r"|(?P<not>!)?\s*(?P<exists>[^\s!=,()]+)"
    r")\s*(?:,|$)"
)


def parse_selector_text(text: str, where: str = "label selector") -> LabelSelector:
    """A selector in kubectl's syntax (``app=web,tier!=db``, ``env in (a,b)``, ``env notin (c)``, ``gpu``,
    ``!spot``); all requirements must hold. Raises ConfigError naming ``where`` and the text."""
    labels: list[tuple[str, str]] = []
    requirements: list[LabelRequirement] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _REQUIREMENT.match(text, position)
        if match is None or match.end() == position:
            raise _fail(
                where,
                f"cannot read {text!r} at {text[position:]!r}: expected key=value, key!=value, "
                "key in (a,b), key notin (a,b), key or !key, separated by commas",
            )
        position = match.end()
        if match["set_key"]:
            values = tuple(v.strip() for v in match["set_values"].split(",") if v.strip())
            if not values:
                raise _fail(where, f"{match['set_key']} {match['set_op']} () needs at least one value")
            operator = "In" if match["set_op"] == "in" else "NotIn"
            requirements.append(LabelRequirement(match["set_key"], operator, values))
        elif match["key"]:
            if match["op"] == "!=":
                requirements.append(LabelRequirement(match["key"], "NotIn", (match["value"],)))
            else:
                labels.append((match["key"], match["value"]))
        else:
            operator = "DoesNotExist" if match["not"] else "Exists"
            requirements.append(LabelRequirement(match["exists"], operator))
    if not labels and not requirements:
        raise _fail(where, "an empty selector would match every object")
    return LabelSelector(tuple(sorted(labels)), tuple(requirements))
