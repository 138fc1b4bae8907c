"""SimKube trace files (``.sktrace``): a reader and a writer faithful to SimKube v2.

A v2 trace is a msgpack map (``rmp_serde::to_vec_named`` of SimKube's ``Trace``)::

    {version: 2, config: {trackedObjects: {...}}, events: [{ts, applied_objs, deleted_objs}],
     index: {GVK: {"ns/name": u64 spec hash}},
     pod_lifecycles: {[GVK, "ns/name"]: {u64 pod-spec hash: [{"Running": s} | {"Finished": [s, e]}]}}}

``ts`` and lifecycle times are whole Unix seconds. Lifecycle owner keys are 2-element arrays used as map
keys (tuples here) and hash keys are u64; both are preserved, so reading then writing a trace gives
the same trace (for SimKube's own files, the same bytes). JSON v2 traces (SimKube's test fixtures) are
read too. Version 1 traces (SimKube ≤ 1.1.1: a 4-element array, index and lifecycles keyed by
``ns/name`` only) are upgraded to v2 when every key's kind can be found in the trace, else rejected.

The reader applies the rules SimKube's deserializer and ``normalize`` apply, so a trace this module
writes (it validates before writing) is one SimKube reads. Every problem raises
:class:`~pipeline.model.errors.FormatError` (or ``UnknownVersionError``) naming the source and the place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import orjson

from pipeline.model.errors import ConfigError, FormatError, UnknownVersionError
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import KNOWN_POD_SPEC_TEMPLATE_PATHS, TracerConfig

SIMKUBE_TRACE_VERSION = 2
"""The SimKube trace format version this module writes."""

U64_MAX = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

SimkubeOwner = tuple[str, str]
"""A ``pod_lifecycles`` key: (owner GVK string, owner ``namespace/name``)."""


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
    """A SimKube trace, field for field. ``config`` is kept as stored (use :meth:`tracer_config`)."""

    version: int
    config: dict[str, Any]
    events: list[SimkubeEvent]
    index: dict[str, dict[str, int]]
    pod_lifecycles: dict[SimkubeOwner, dict[int, list[SimkubeLifecycle]]]
    read_from_version: int = field(default=SIMKUBE_TRACE_VERSION, compare=False)

    def tracer_config(self, source: str = "<trace config>") -> TracerConfig:
        """The trace's config, normalized as SimKube does on import (raises ConfigError)."""
        return TracerConfig.from_mapping(self.config, source)


# ---- reading -------------------------------------------------------------------------------------
def _pairs_hook(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    try:
        return dict(pairs)
    except TypeError:  # list keys (pod_lifecycles owners) are unhashable: make them tuples
        return {tuple(k) if isinstance(k, list) else k: v for k, v in pairs}


def read_simkube_trace(data: bytes | Path, source: str | None = None) -> SimkubeTrace:
    """Read a SimKube trace from bytes or a file; ``source`` names it in errors (default: the path)."""
    if isinstance(data, Path):
        source = source or str(data)
        try:
            data = data.read_bytes()
        except OSError as exc:
            raise FormatError(f"{source}: cannot read the file ({exc.strerror or exc})") from None
    where = source or "SimKube trace"
    if not data:
        raise FormatError(f"{where}: empty file, not a SimKube trace")
    raw = _decode_raw(data, where)
    if isinstance(raw, list):
        return _upgrade_v1(raw, where)
    if not isinstance(raw, dict):
        raise FormatError(f"{where}: not a SimKube trace (top level is a {type(raw).__name__}, not a map)")
    return _parse_v2(raw, where)


def _decode_raw(data: bytes, where: str) -> Any:
    if data.lstrip()[:1] == b"{":
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise FormatError(f"{where}: invalid JSON trace ({exc})") from None
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, object_pairs_hook=_pairs_hook)
    except Exception as exc:  # msgpack raises several unrelated types for corrupt or truncated input
        raise FormatError(
            f"{where}: not a readable msgpack trace, truncated or corrupt ({type(exc).__name__}: {exc})"
        ) from None


def _is_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _parse_v2(raw: dict[Any, Any], where: str) -> SimkubeTrace:
    version = raw.get("version")
    if not _is_int(version, 0, 0xFFFF):
        raise FormatError(f"{where}: 'version' must be a u16, got {version!r}")
    assert isinstance(version, int)
    if version != SIMKUBE_TRACE_VERSION:
        raise UnknownVersionError(
            f"{where}: SimKube trace format version {version} is not supported "
            f"(kubetape reads versions 1 and {SIMKUBE_TRACE_VERSION})"
        )
    missing = [k for k in ("config", "events", "index", "pod_lifecycles") if k not in raw]
    if missing:
        raise FormatError(f"{where}: missing field(s) {', '.join(missing)}")
    config = _parse_config(raw["config"], where)
    events = _parse_events(raw["events"], where)
    index = _parse_index(raw["index"], where)
    lifecycles = _parse_lifecycles(raw["pod_lifecycles"], where)
    return SimkubeTrace(version, config, events, index, lifecycles)


def _parse_config(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("trackedObjects"), dict):
        raise FormatError(f"{where}: config must be a map with trackedObjects")
    try:
        TracerConfig.from_mapping(value, "(embedded)")
    except ConfigError as exc:
        raise FormatError(f"{where}: {exc}") from None
    return value


def _non_json(value: Any) -> str | None:
    """The type name of the first value in ``value`` that JSON (and so SimKube) cannot hold, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return "non-string map key"
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif not (item is None or isinstance(item, str | int | float)):
            return type(item).__name__
    return None


def _check_object(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise FormatError(f"{where}: an object must be a map, got {type(obj).__name__}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise FormatError(f"{where}: object has no metadata.name")
    if not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        raise FormatError(f"{where}: object {meta['name']!r} has no apiVersion/kind")
    bad = _non_json(obj)
    if bad is not None:
        raise FormatError(f"{where}: object {meta['name']!r} holds a {bad}, which is not JSON")
    return obj


def _parse_events(value: Any, where: str) -> list[SimkubeEvent]:
    if not isinstance(value, list):
        raise FormatError(f"{where}: events must be a list")
    events = []
    for i, raw in enumerate(value):
        here = f"{where}: events[{i}]"
        if not isinstance(raw, dict):
            raise FormatError(f"{here}: must be a map with ts, applied_objs, deleted_objs")
        ts, applied, deleted = raw.get("ts"), raw.get("applied_objs"), raw.get("deleted_objs")
        if not _is_int(ts, I64_MIN, I64_MAX):
            raise FormatError(f"{here}: ts must be an i64 of Unix seconds, got {ts!r}")
        if not isinstance(applied, list) or not isinstance(deleted, list):
            raise FormatError(f"{here}: applied_objs and deleted_objs must be lists")
        assert isinstance(ts, int)
        events.append(
            SimkubeEvent(
                ts,
                [_check_object(o, f"{here}.applied_objs[{j}]") for j, o in enumerate(applied)],
                [_check_object(o, f"{here}.deleted_objs[{j}]") for j, o in enumerate(deleted)],
            )
        )
    return events


def _parse_gvk(text: Any, where: str) -> str:
    """``text`` if it is a GVK string; FormatError naming ``where`` and the value otherwise (a float
    ``1.5`` is not a GVK even though its repr would parse as one)."""
    if not isinstance(text, str):
        raise FormatError(
            f"{where} {text!r} is a {type(text).__name__}, not a GVK string (group/version.Kind)"
        )
    try:
        GroupVersionKind.parse(text)
    except FormatError as exc:
        raise FormatError(f"{where}: {exc}") from None
    return text


def _parse_index(value: Any, where: str) -> dict[str, dict[str, int]]:
    if not isinstance(value, dict):
        raise FormatError(f"{where}: index must be a map GVK → (namespace/name → hash)")
    for gvk, names in value.items():
        _parse_gvk(gvk, f"{where}: index key")
        if not isinstance(names, dict):
            raise FormatError(f"{where}: index[{gvk}] must be a map namespace/name → hash")
        for name, spec_hash in names.items():
            if not isinstance(name, str) or not _is_int(spec_hash, 0, U64_MAX):
                raise FormatError(f"{where}: index[{gvk}][{name!r}] must map a name to a u64 hash")
    return value


def _parse_lifecycle(value: Any, where: str) -> SimkubeLifecycle:
    if value == "Empty":
        return SimkubeLifecycle(None)
    if isinstance(value, dict) and len(value) == 1:
        ((tag, body),) = value.items()
        if tag == "Running" and _is_int(body, I64_MIN, I64_MAX):
            return SimkubeLifecycle(body)
        if (
            tag == "Finished"
            and isinstance(body, list | tuple)
            and len(body) == 2
            and all(_is_int(t, I64_MIN, I64_MAX) for t in body)
        ):
            return SimkubeLifecycle(body[0], body[1])
    raise FormatError(f"{where}: expected {{Running: start}} or {{Finished: [start, end]}}, got {value!r}")


def _parse_lifecycles(value: Any, where: str) -> dict[SimkubeOwner, dict[int, list[SimkubeLifecycle]]]:
    if not isinstance(value, dict):
        raise FormatError(f"{where}: pod_lifecycles must be a map")
    out: dict[SimkubeOwner, dict[int, list[SimkubeLifecycle]]] = {}
    for owner, by_hash in value.items():
        if not (isinstance(owner, tuple) and len(owner) == 2 and all(isinstance(p, str) for p in owner)):
            raise FormatError(f"{where}: pod_lifecycles key {owner!r} must be [GVK, namespace/name]")
        _parse_gvk(owner[0], f"{where}: pod_lifecycles key")
        if not isinstance(by_hash, dict):
            raise FormatError(f"{where}: pod_lifecycles[{owner}] must map pod-spec hashes to lifecycles")
        parsed: dict[int, list[SimkubeLifecycle]] = {}
        for pod_hash, lifecycles in by_hash.items():
            here = f"{where}: pod_lifecycles[{owner}][{pod_hash!r}]"
            if not _is_int(pod_hash, 0, U64_MAX) or not isinstance(lifecycles, list):
                raise FormatError(f"{here}: must map a u64 pod-spec hash to a list of lifecycles")
            parsed[pod_hash] = [_parse_lifecycle(lc, here) for lc in lifecycles]
        out[(owner[0], owner[1])] = parsed
    return out


# ---- version 1 ----------------------------------------------------------------------------------
def _upgrade_v1(raw: list[Any], where: str) -> SimkubeTrace:
    if len(raw) != 4:
        raise FormatError(
            f"{where}: not a SimKube trace (a top-level array of {len(raw)} items; version 1 traces have 4)"
        )
    config_raw, events_raw, index_raw, lifecycles_raw = raw
    here = f"{where} (SimKube v1 trace)"
    config = _parse_config(config_raw, here)
    events = _parse_events(events_raw, here)
    kinds: dict[str, set[str]] = {}
    for event in events:
        for obj in event.applied_objs + event.deleted_objs:
            gvk = GroupVersionKind.from_api_version(obj["apiVersion"], obj["kind"]).format()
            meta = obj["metadata"]
            name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
            kinds.setdefault(name, set()).add(gvk)
    tracked = list(config["trackedObjects"])

    def kind_of(name: str, what: str) -> str:
        found = kinds.get(name, set())
        if len(found) == 1:
            return next(iter(found))
        if not found and len(tracked) == 1:
            return _parse_gvk(tracked[0], here)
        raise FormatError(
            f"{here}: cannot tell the kind of {what} {name!r} (v1 traces do not record it); "
            "re-export the trace with SimKube ≥ 2.0"
        )

    if not isinstance(index_raw, dict) or not isinstance(lifecycles_raw, dict):
        raise FormatError(f"{here}: index and lifecycle data must be maps keyed by namespace/name")
    index: dict[str, dict[str, int]] = {}
    for name, spec_hash in index_raw.items():
        if not isinstance(name, str):
            raise FormatError(f"{here}: index key {name!r} must be a namespace/name string")
        index.setdefault(kind_of(name, "index entry"), {})[name] = spec_hash
    lifecycles_v2 = {
        (kind_of(owner, "lifecycle owner"), owner) if isinstance(owner, str) else owner: data
        for owner, data in lifecycles_raw.items()
    }
    return SimkubeTrace(
        SIMKUBE_TRACE_VERSION,
        config,
        events,
        _parse_index(index, here),
        _parse_lifecycles(lifecycles_v2, here),
        read_from_version=1,
    )


# ---- writing -------------------------------------------------------------------------------------
def simkube_to_wire(trace: SimkubeTrace) -> dict[str, Any]:
    """The plain structure :func:`write_simkube_trace` packs (field order as SimKube writes it)."""
    return {
        "version": trace.version,
        "config": trace.config,
        "events": [
            {"ts": e.ts, "applied_objs": e.applied_objs, "deleted_objs": e.deleted_objs} for e in trace.events
        ],
        "index": trace.index,
        "pod_lifecycles": {
            owner: {h: [lc.to_wire() for lc in lcs] for h, lcs in by_hash.items()}
            for owner, by_hash in trace.pod_lifecycles.items()
        },
    }


def write_simkube_trace(trace: SimkubeTrace) -> bytes:
    """The msgpack bytes of ``trace`` in SimKube v2 format; raises FormatError if SimKube would refuse it.

    Objects are written as given: they must hold JSON values only (as every object decoded from a watch
    or from a trace does). The output is not read back to check it, which used to double the cost of
    an export; ``tests/unit/test_formats_simkube.py`` reads what this writes by SimKube's rules."""
    problems = simkube_compatibility_problems(trace)
    if problems:
        raise FormatError(f"refusing to write a SimKube trace SimKube cannot read: {'; '.join(problems)}")
    data: bytes = msgpack.packb(simkube_to_wire(trace), use_bin_type=True)
    return data


def simkube_compatibility_problems(trace: SimkubeTrace) -> list[str]:
    """Why SimKube (≥ 2.0, current) would refuse ``trace``; ``[]`` when it reads it.

    Beyond the structure checked on reading, SimKube's ``normalize`` refuses unknown kinds without
    ``podSpecTemplatePaths`` and only reads version 2.
    """
    problems = []
    if trace.version != SIMKUBE_TRACE_VERSION:
        problems.append(f"version is {trace.version}, SimKube reads {SIMKUBE_TRACE_VERSION}")
    tracked = trace.config.get("trackedObjects", {})
    for gvk_text, settings in tracked.items() if isinstance(tracked, dict) else []:
        try:
            gvk = GroupVersionKind.parse(gvk_text)
        except FormatError as exc:
            problems.append(str(exc))
            continue
        paths = (settings or {}).get("podSpecTemplatePaths") or (settings or {}).get("podSpecTemplatePath")
        if not paths and gvk not in KNOWN_POD_SPEC_TEMPLATE_PATHS:
            problems.append(f"config: {gvk_text} has no podSpecTemplatePaths and is not a built-in kind")
    if any(b.ts < a.ts for a, b in zip(trace.events, trace.events[1:], strict=False)):
        problems.append("events are not sorted by ts")
    return problems
