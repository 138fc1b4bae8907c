"""The replay document: one replay request, written down (``apiVersion: kubetape.dev/v1``, ``kind:
ReplaySpec``, YAML or JSON). ``kubetape replay --spec FILE`` runs one, ``--print-spec`` writes the one its
flags ask for, and the controller's replayer Jobs read theirs from a ConfigMap.

:data:`FIELDS` is the one list of what a replay request holds: each field's document key, the
``kubetape replay`` flags that set it and the name the parsed flags keep it under (argparse's ``dest``).
The document is read into those parsed values, so a document and the flags reach a
:class:`~pipeline.replay.spec.ReplaySpec` through the same code (``services.commands.replay``); the
controller builds its documents with :func:`replay_document`, which refuses a key missing here. The unit
tests hold the flags and the Simulation resource to this list. The schema is in docs/replay.md.

Here (in the model) because the CLI and the controller both write documents and stages must not import
each other; PyYAML stays out of this module: it reads and writes mappings.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.hooks import HOOK_POINTS, Hook
from pipeline.model.keys import parse_cluster_id
from pipeline.model.lifecycle_delays import parse_delay
from pipeline.model.timespec import format_duration, parse_duration

API_VERSION = "kubetape.dev/v1"
"""The group and version of kubetape's own kinds (as the Simulation's and ReplayRoot's CRDs)."""
KIND = "ReplaySpec"
MAX_SPEED = "max"
LOAD_MODELS = ("conserve", "per-pod")
"""``--load-model``: how the recorded load becomes the simulated pods' usage (the values of
:class:`pipeline.replay.hpa.load.LoadModel`, which a test holds them to through the flag's choices)."""
AUTOSCALERS = ("hpa", "karpenter")
SOURCE_KEYS = ("trace", "segments", "topic")
"""Exactly one of these says where the trace comes from."""

Where = str
"""Where a value sits, for the error message: ``FILE: spec.speed``."""


@dataclass(frozen=True, slots=True)
class Kind:
    """How one field's value looks in the document and in the parsed flags: ``read`` turns the
    document's value into the flags' (raising ConfigError naming ``where``), ``write`` back."""

    read: Callable[[Any, Where, Path | None], Any]
    write: Callable[[Any], Any]
    what: str
    """The value as the schema describes it."""
    choices: tuple[str, ...] = ()
    """The values (or list items) it may take, when it is a choice (as the flag's ``choices``)."""


def _bad(where: Where, value: Any, what: str) -> ConfigError:
    return ConfigError(f"{where}: {value!r} is not {what}")


def _text(value: Any, where: Where, base: Path | None) -> str:
    if not isinstance(value, str):
        raise _bad(where, value, "a string")
    return value


def _flag(value: Any, where: Where, base: Path | None) -> bool:
    if not isinstance(value, bool):
        raise _bad(where, value, "true or false")
    return value


def _count(value: Any, where: Where, base: Path | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _bad(where, value, "a whole number of 1 or more")
    return value


def _number(value: Any, where: Where, base: Path | None) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise _bad(where, value, "a number")
    return float(value)


def _seconds(value: Any, where: Where, base: Path | None) -> float:
    """A number of seconds, or a duration (``90s``, ``10m``)."""
    if isinstance(value, str):
        return parse_duration(value, where)
    seconds = _number(value, where, base)
    if seconds < 0:
        raise _bad(where, value, "a duration of 0 or more (seconds, or e.g. 90s)")
    return seconds


def _path(value: Any, where: Where, base: Path | None) -> Path:
    """A file; a relative one is relative to the document's directory (``base``)."""
    text = _text(value, where, base)
    if not text:
        raise _bad(where, value, "a path")
    path = Path(text)
    return path if base is None or path.is_absolute() else base / path


def _location(value: Any, where: Where, base: Path | None) -> str:
    """A path or a URL (``s3://``, ``https://``): only a relative path is resolved against ``base``."""
    text = _text(value, where, base)
    if "://" in text:
        return text
    return str(_path(text, where, base))


def _speed(value: Any, where: Where, base: Path | None) -> float | str:
    if isinstance(value, str) and value.strip().lower() == MAX_SPEED:
        return MAX_SPEED
    if isinstance(value, str):
        raise _bad(where, value, f"a number (e.g. 10) or '{MAX_SPEED}'")
    return _number(value, where, base)  # its range is checked by the speed rules, with the rest


def _cluster(value: Any, where: Where, base: Path | None) -> str:
    try:
        return parse_cluster_id(_text(value, where, base), where)
    except FormatError as exc:
        raise ConfigError(str(exc)) from None


def _delay(value: Any, where: Where, base: Path | None) -> float:
    return parse_delay(value, where)


def _choice(choices: tuple[str, ...]) -> Callable[[Any, Where, Path | None], str]:
    def read(value: Any, where: Where, base: Path | None) -> str:
        if value not in choices:
            raise _bad(where, value, f"one of {', '.join(choices)}")
        return str(value)

    return read


def _list(item: Callable[[Any, Where, Path | None], Any]) -> Callable[[Any, Where, Path | None], list[Any]]:
    def read(value: Any, where: Where, base: Path | None) -> list[Any]:
        if not isinstance(value, list):
            raise _bad(where, value, "a list")
        return [item(v, f"{where}[{i}]", base) for i, v in enumerate(value)]

    return read


def _node_pool(value: Any, where: Where, base: Path | None) -> str:
    """``{skeleton: node.yaml, count: 10}``, as the flags take it: ``node.yaml:10``."""
    if not isinstance(value, Mapping) or set(value) != {"skeleton", "count"}:
        raise _bad(
            where,
            value,
            "a mapping of skeleton (a Node YAML file) and count, e.g. {skeleton: node.yaml, count: 10}",
        )
    path = _path(value["skeleton"], f"{where}.skeleton", base)
    return f"{path}:{_count(value['count'], f'{where}.count', base)}"


def _write_node_pool(text: str) -> dict[str, Any]:
    path, _, count = text.rpartition(":")
    return {"skeleton": _absolute(path), "count": int(count)}


_HOOK_KEYS = {"point", "command", "ignoreFailure"}


def _hook(value: Any, where: Where, base: Path | None) -> Hook:
    """``{point: preRun, command: [kubectl, get, nodes], ignoreFailure: false}``."""
    if not isinstance(value, Mapping) or not {"point", "command"} <= set(value) <= _HOOK_KEYS:
        raise _bad(
            where,
            value,
            f"a hook: {{point: one of {', '.join(HOOK_POINTS)}, command: [argv…], ignoreFailure}}",
        )
    argv = _list(_text)(value["command"], f"{where}.command", base)
    ignore = _flag(value.get("ignoreFailure", False), f"{where}.ignoreFailure", base)
    try:
        return Hook(_text(value["point"], f"{where}.point", base), tuple(argv), ignore)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _write_hook(hook: Hook) -> dict[str, Any]:
    written: dict[str, Any] = {"point": hook.point, "command": list(hook.argv)}
    if hook.ignore_failure:
        written["ignoreFailure"] = True
    return written


def _absolute(path: str | Path) -> str:
    """A path as the document keeps it: absolute, so the document means the same from any directory."""
    return os.path.abspath(path)


def _write_location(text: str) -> str:
    return text if "://" in text else _absolute(text)


def _same(value: Any) -> Any:
    return value


def _write_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


TEXT = Kind(_text, _same, "string")
FLAG = Kind(_flag, _same, "true or false")
COUNT = Kind(_count, _same, "whole number ≥ 1")
NUMBER = Kind(_number, _same, "number")
SECONDS = Kind(_seconds, _write_number, "seconds: a number, or a duration such as 90s or 10m")
PATH = Kind(_path, _absolute, "path (relative: to the document's directory)")
PATHS = Kind(_list(_path), lambda paths: [_absolute(p) for p in paths], "list of paths")
TEXTS = Kind(_list(_text), list, "list of strings")
LOCATION = Kind(_location, _write_location, "path or URL")
SPEED = Kind(_speed, lambda s: s if s == MAX_SPEED else _write_number(s), f"number above 0, or '{MAX_SPEED}'")
CLUSTER = Kind(_cluster, str, "recorded cluster id")
DELAY = Kind(_delay, format_duration, "duration such as 2s, or whole milliseconds (SimKube's unit)")
NODE_POOLS = Kind(
    _list(_node_pool), lambda pools: [_write_node_pool(p) for p in pools], "list of {skeleton, count}"
)
HOOKS = Kind(
    _list(_hook), lambda hooks: [_write_hook(h) for h in hooks], "list of {point, command, ignoreFailure}"
)
LOAD_MODEL = Kind(_choice(LOAD_MODELS), _same, " or ".join(LOAD_MODELS), LOAD_MODELS)
AUTOSCALER_LIST = Kind(_list(_choice(AUTOSCALERS)), list, f"list of {', '.join(AUTOSCALERS)}", AUTOSCALERS)


@dataclass(frozen=True, slots=True)
class Field:
    """One setting of a replay request: ``key`` in the document, ``flags`` of ``kubetape replay`` (the
    first is the one its help lists), ``dest`` the parsed flags keep it under."""

    key: str
    flags: tuple[str, ...]
    dest: str
    kind: Kind


FIELDS: tuple[Field, ...] = (
    # where the trace comes from (exactly one of trace, segments, topic)
    Field("trace", ("--trace",), "trace", LOCATION),
    Field("segments", ("--segments",), "segments", LOCATION),
    Field("topic", ("--topic",), "topic", TEXT),
    Field("from", ("--from",), "start", TEXT),
    Field("to", ("--to",), "end", TEXT),
    Field("bootstrap", ("--bootstrap",), "bootstrap", TEXT),
    Field("kafkaConfig", ("--kafka-config",), "kafka_config", PATH),
    Field("cluster", ("--cluster",), "cluster", CLUSTER),
    Field("follow", ("--follow",), "follow", FLAG),
    Field("lag", ("--lag",), "lag", SECONDS),
    Field("config", ("--config",), "config", PATH),
    # the simulated cluster
    Field("kubeconfig", ("--kubeconfig",), "kubeconfig", PATH),
    Field("context", ("--context",), "context", TEXT),
    Field("expectProfile", ("--expect-profile",), "expect_profile", TEXT),
    # the replayer
    Field("speed", ("--speed",), "speed", SPEED),
    Field("duration", ("--duration",), "duration", SECONDS),
    Field("maxLag", ("--max-lag",), "max_lag", SECONDS),
    Field("settle", ("--settle",), "settle", SECONDS),
    Field("sampleInterval", ("--sample-interval",), "sample_interval", SECONDS),
    Field("name", ("--name",), "name", TEXT),
    Field("namespacePrefix", ("--namespace-prefix",), "namespace_prefix", TEXT),
    Field("maxInFlight", ("--max-in-flight",), "max_in_flight", COUNT),
    Field("qps", ("--qps",), "qps", NUMBER),
    Field("nodes", ("--nodes",), "nodes", NODE_POOLS),
    Field("crds", ("--crd",), "crd", PATHS),
    Field("keep", ("--keep",), "keep", FLAG),
    Field("imagePullDelay", ("--image-pull-delay",), "image_pull_s", DELAY),
    Field("imagePullJitter", ("--image-pull-jitter",), "image_pull_jitter_s", DELAY),
    Field("podStartupDelay", ("--pod-startup-delay",), "startup_s", DELAY),
    Field("podStartupJitter", ("--pod-startup-jitter",), "startup_jitter_s", DELAY),
    # autoscalers
    Field("autoscalers", ("--autoscaler",), "autoscaler", AUTOSCALER_LIST),
    Field("loadModel", ("--load-model",), "load_model", LOAD_MODEL),
    Field("nodepools", ("--nodepool",), "nodepool", PATHS),
    Field("prices", ("--prices",), "prices", PATH),
    Field("instanceTypes", ("--instance-types",), "instance_types", PATH),
    # hooks
    Field("hooks", ("--hook", "--hook-ignoring-failure"), "hooks", HOOKS),
    Field("hooksFiles", ("--hooks",), "hooks_files", PATHS),
    Field("hookTimeout", ("--hook-timeout",), "hook_timeout", SECONDS),
    Field("hookPassEnv", ("--hook-pass-env",), "hook_pass_env", TEXTS),
    Field("runDir", ("--run-dir",), "run_dir", PATH),
    # the report
    Field("reportJson", ("--report-json",), "report_json", PATH),
    Field("requireFidelity", ("--require-fidelity",), "require_fidelity", FLAG),
)
BY_KEY = {f.key: f for f in FIELDS}


def document_from_values(values: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The document of parsed flags ``values`` (by ``dest``): every field whose value is not its
    ``default`` (so a document says only what differs, and the reader's defaults fill the rest)."""
    spec = {
        f.key: f.kind.write(values[f.dest])
        for f in FIELDS
        if values.get(f.dest) is not None and values[f.dest] != defaults.get(f.dest)
    }
    return {"apiVersion": API_VERSION, "kind": KIND, "spec": spec}


def values_from_document(document: Any, where: str, base: Path | None = None) -> dict[str, Any]:
    """The parsed-flag values (by ``dest``) ``document`` sets; ``where`` (a file name) leads every
    error, ``base`` is the directory relative paths are read from. Refuses another kind or version,
    unknown keys, and a document without exactly one source."""
    if not isinstance(document, Mapping):
        raise ConfigError(f"{where}: a replay document is a mapping of apiVersion, kind and spec")
    unknown = sorted(str(k) for k in document if k not in ("apiVersion", "kind", "spec"))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; a replay document has apiVersion, kind, spec"
        )
    kind, version = document.get("kind"), document.get("apiVersion")
    if kind != KIND:
        raise ConfigError(f"{where}: kind is {kind!r}; a replay document is kind: {KIND}")
    if version != API_VERSION:
        raise ConfigError(
            f"{where}: apiVersion is {version!r}; this kubetape reads apiVersion: {API_VERSION} "
            "(a document from another kubetape version: write it again with `kubetape replay … --print-spec`)"
        )
    spec = document.get("spec")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: spec: missing; it needs at least one of {', '.join(SOURCE_KEYS)}")
    values = read_fields(spec, f"{where}: spec", base)
    sources = [k for k in SOURCE_KEYS if spec.get(k) is not None]
    if len(sources) != 1:
        given = ", ".join(sources) or "no source"
        raise ConfigError(f"{where}: spec has {given}; give exactly one of {', '.join(SOURCE_KEYS)}")
    return values


def read_fields(fields: Mapping[Any, Any], where: str, base: Path | None = None) -> dict[str, Any]:
    """The parsed-flag values (by ``dest``) of document ``fields`` (key: value); ConfigError naming
    ``where``.KEY for an unknown key or a value of the wrong kind."""
    unknown = sorted(str(k) for k in fields if k not in BY_KEY)
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, BY_KEY, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        more = f" (and {', '.join(unknown[1:])})" if unknown[1:] else ""
        raise ConfigError(f"{where}.{key}: unknown key{hint}{more}; the keys are listed in docs/replay.md")
    return {
        BY_KEY[key].dest: BY_KEY[key].kind.read(value, f"{where}.{key}", base)
        for key, value in fields.items()
        if value is not None
    }


def replay_document(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A document of ``spec`` (document keys and values), checked as a reader would read it: for
    writers that know the document's keys (the controller), so a key not in :data:`FIELDS` fails here."""
    document = {"apiVersion": API_VERSION, "kind": KIND, "spec": dict(spec)}
    values_from_document(document, "replay document")
    return document
