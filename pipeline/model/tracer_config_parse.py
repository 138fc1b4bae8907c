"""Validating and normalizing a parsed tracer config (what :meth:`.TracerConfig.from_mapping` and
:func:`.load_tracer_config` run): every field checked, errors naming the source and the offending path,
SimKube's normalization of template paths applied.

Apart from :mod:`.tracer_config` because checking the input field by field is a concern of its own;
the model module holds what a config is and does (its lookups, its filters, the redactions it implies,
its written forms).
"""

from __future__ import annotations

from typing import Any

from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.keys import GroupVersionKind
from pipeline.model.pointer import parse_pointer
from pipeline.model.selectors import LabelSelector, parse_label_selector
from pipeline.model.tracer_config import (
    KNOWN_POD_SPEC_TEMPLATE_PATHS,
    RedactionRule,
    TracerConfig,
    TrackedKind,
)

_TRACKED_FIELDS = {"podSpecTemplatePaths", "podSpecTemplatePath", "trackLifecycle", "skipOwned"}
_TOP_FIELDS = {
    "trackedObjects",
    "namespaces",
    "labels",
    "excludeDaemonSetOwned",
    "redact",
    "redactEnv",
    "redactArgs",
}


def _fail(source: str, where: str, problem: str) -> ConfigError:
    return ConfigError(f"tracer config {source}: {where}: {problem}")


def _str_list(value: Any, source: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(source, where, f"must be a list of strings, got {value!r}")
    return tuple(value)


def _bool(value: Any, source: str, where: str, *, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _fail(source, where, f"must be true or false, got {value!r}")
    return value


def _parse_config(data: Any, source: str) -> TracerConfig:
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ConfigError(f"tracer config {source}: must be a mapping with trackedObjects, got {kind}")
    unknown = sorted(set(map(str, data)) - _TOP_FIELDS)
    if unknown:
        raise _fail(source, unknown[0], f"unknown field; expected one of {', '.join(sorted(_TOP_FIELDS))}")
    tracked_raw = data.get("trackedObjects") or {}
    if not isinstance(tracked_raw, dict):
        raise _fail(source, "trackedObjects", "must map group/version.Kind to settings")
    tracked: list[TrackedKind] = []
    for gvk_text, settings in tracked_raw.items():
        entry = _parse_tracked(gvk_text, settings, source)
        if any(t.gvk == entry.gvk for t in tracked):
            raise _fail(source, f"trackedObjects.{gvk_text}", f"{entry.gvk} is listed twice")
        tracked.append(entry)
    ns_allow, ns_deny = _allow_deny(data.get("namespaces"), source, "namespaces", _str_list)
    lbl_allow, lbl_deny = _allow_deny(data.get("labels"), source, "labels", _selectors)
    return TracerConfig(
        tracked=tuple(tracked),
        namespace_allow=ns_allow,
        namespace_deny=ns_deny,
        label_allow=lbl_allow,
        label_deny=lbl_deny,
        exclude_daemonset_owned=_bool(
            data.get("excludeDaemonSetOwned"), source, "excludeDaemonSetOwned", default=True
        ),
        redactions=_redactions(data.get("redact"), source),
        redact_env=_bool(data.get("redactEnv"), source, "redactEnv", default=True),
        redact_args=_bool(data.get("redactArgs"), source, "redactArgs", default=True),
        source=source,
    )


def _parse_tracked(gvk_text: Any, settings: Any, source: str) -> TrackedKind:
    where = f"trackedObjects.{gvk_text}"
    try:
        gvk = GroupVersionKind.parse(str(gvk_text))
    except FormatError as exc:
        raise _fail(source, where, str(exc)) from None
    settings = settings or {}
    if not isinstance(settings, dict):
        raise _fail(source, where, "must be a mapping (podSpecTemplatePaths, trackLifecycle, skipOwned)")
    unknown = sorted(set(map(str, settings)) - _TRACKED_FIELDS)
    if unknown:
        expected = ", ".join(sorted(_TRACKED_FIELDS))
        raise _fail(source, f"{where}.{unknown[0]}", f"unknown field; expected {expected}")
    paths = _str_list(settings.get("podSpecTemplatePaths"), source, f"{where}.podSpecTemplatePaths")
    singular = settings.get("podSpecTemplatePath")
    if singular is not None:
        if not isinstance(singular, str):
            raise _fail(source, f"{where}.podSpecTemplatePath", "must be a string")
        if not paths:  # SimKube: the deprecated field is ignored when the plural is set
            paths = (singular,)
    for i, path in enumerate(paths):
        try:
            parse_pointer(path)
        except ValueError as exc:
            raise _fail(source, f"{where}.podSpecTemplatePaths[{i}]", str(exc)) from None
    default = KNOWN_POD_SPEC_TEMPLATE_PATHS.get(gvk)
    if paths and default is not None and paths != default:
        raise _fail(
            source,
            f"{where}.podSpecTemplatePaths",
            f"{gvk} is a built-in kind whose template paths are {list(default)}; SimKube rejects others",
        )
    return TrackedKind(
        gvk=gvk,
        pod_spec_template_paths=paths or default or (),
        track_lifecycle=_bool(
            settings.get("trackLifecycle"), source, f"{where}.trackLifecycle", default=False
        ),
        skip_owned=_bool(settings.get("skipOwned"), source, f"{where}.skipOwned", default=False),
    )


def _selectors(value: Any, source: str, where: str) -> tuple[LabelSelector, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(source, where, "must be a list of label selectors")
    try:
        return tuple(parse_label_selector(v, f"{where}[{i}]") for i, v in enumerate(value))
    except ConfigError as exc:
        raise ConfigError(f"tracer config {source}: {exc}") from None


def _allow_deny(value: Any, source: str, where: str, parse: Any) -> tuple[Any, Any]:
    if value is None:
        return (), ()
    if not isinstance(value, dict) or set(map(str, value)) - {"allow", "deny"}:
        raise _fail(source, where, "must be a mapping with 'allow' and/or 'deny' lists")
    allow = parse(value.get("allow"), source, f"{where}.allow")
    return allow, parse(value.get("deny"), source, f"{where}.deny")


def _redactions(value: Any, source: str) -> tuple[RedactionRule, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(source, "redact", "must be a list of rules {kinds, paths, action}")
    rules = []
    for i, rule in enumerate(value):
        where = f"redact[{i}]"
        if not isinstance(rule, dict) or set(map(str, rule)) - {"kinds", "paths", "action"}:
            raise _fail(source, where, "must be a mapping with paths, and optionally kinds and action")
        paths = _str_list(rule.get("paths"), source, f"{where}.paths")
        if not paths:
            raise _fail(source, f"{where}.paths", "needs at least one JSON pointer")
        for j, path in enumerate(paths):
            try:
                if not parse_pointer(path):
                    raise ValueError("redacting the whole object is not allowed; drop the kind instead")
            except ValueError as exc:
                raise _fail(source, f"{where}.paths[{j}]", str(exc)) from None
        kinds: list[GroupVersionKind] = []
        for j, text in enumerate(_str_list(rule.get("kinds"), source, f"{where}.kinds")):
            if text == "*":
                kinds = []
                break
            try:
                kinds.append(GroupVersionKind.parse(text))
            except FormatError as exc:
                raise _fail(source, f"{where}.kinds[{j}]", str(exc)) from None
        action = rule.get("action", "remove")
        if action not in ("remove", "mask"):
            raise _fail(source, f"{where}.action", f"must be 'remove' or 'mask', got {action!r}")
        rules.append(RedactionRule(paths=paths, kinds=tuple(kinds), action=str(action)))
    return tuple(rules)
