"""Reading SimKube trace files (``.sktrace``, or JSON like SimKube's fixtures): versions 1, 2 and 3.

A v2 trace is a msgpack map (``rmp_serde::to_vec_named`` of SimKube's ``Trace``)::

    {version: 2, config: {trackedObjects: {...}}, events: [{ts, applied_objs, deleted_objs}],
     index: {GVK: {"ns/name": u64 spec hash}},
     pod_lifecycles: {[GVK, "ns/name"]: {u64 pod-spec hash: [{"Running": s} | {"Finished": [s, e]}]}}}

A v3 trace replaces ``index`` by ``tracked_objects: {GVK: {"ns/name": {}}}`` (see :mod:`.model`).
``ts`` and lifecycle times are whole Unix seconds. Lifecycle owner keys are 2-element arrays used as map
keys (tuples here) and hash keys are u64; both are preserved, so reading then writing a trace gives
the same trace (for SimKube's own files, the same bytes). Version 1 traces (SimKube ≤ 1.1.1: a 4-element
array, index and lifecycles keyed by ``ns/name`` only) are upgraded to v2 when every key's kind can be
found in the trace, else rejected.

The reader applies the rules SimKube's deserializer and ``normalize`` apply. Every problem raises
:class:`~pipeline.model.errors.FormatError` (or ``UnknownVersionError``, naming the versions kubetape
reads) naming the source and the place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import orjson

from pipeline.formats.simkube.model import (
    I64_MAX,
    I64_MIN,
    READABLE_VERSIONS,
    SIMKUBE_TRACE_VERSION,
    SIMKUBE_V3,
    U64_MAX,
    SimkubeEvent,
    SimkubeLifecycle,
    SimkubeOwner,
    SimkubeTrace,
    index_from_events,
    versions_text,
)
from pipeline.model.errors import ConfigError, FormatError, UnknownVersionError
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import TracerConfig


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
    if version not in READABLE_VERSIONS or version == 1:  # v1 is an array, never a map
        raise UnknownVersionError(
            f"{where}: SimKube trace format version {version} is not supported "
            f"(kubetape reads versions {versions_text()})"
        )
    objects_field = "index" if version == SIMKUBE_TRACE_VERSION else "tracked_objects"
    missing = [k for k in ("config", "events", objects_field, "pod_lifecycles") if k not in raw]
    if missing:
        raise FormatError(f"{where}: missing field(s) {', '.join(missing)} (SimKube v{version} trace)")
    config = _parse_config(raw["config"], where)
    events = _parse_events(raw["events"], where)
    if version == SIMKUBE_V3:
        index = index_from_events(events, _parse_tracked_objects(raw["tracked_objects"], where))
    else:
        index = _parse_index(raw["index"], where)
    lifecycles = _parse_lifecycles(raw["pod_lifecycles"], where)
    return SimkubeTrace(version, config, events, index, lifecycles, read_from_version=version)


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


def _parse_tracked_objects(value: Any, where: str) -> dict[str, list[str]]:
    """v3's ``tracked_objects``: GVK → namespace/name → metadata map (empty as SimKube writes it)."""
    if not isinstance(value, dict):
        raise FormatError(f"{where}: tracked_objects must be a map GVK → (namespace/name → metadata)")
    names: dict[str, list[str]] = {}
    for gvk, entries in value.items():
        _parse_gvk(gvk, f"{where}: tracked_objects key")
        if not isinstance(entries, dict):
            raise FormatError(f"{where}: tracked_objects[{gvk}] must be a map namespace/name → metadata")
        for name, metadata in entries.items():
            if not isinstance(name, str) or not isinstance(metadata, dict):
                raise FormatError(f"{where}: tracked_objects[{gvk}][{name!r}] must map a name to a map")
        names[gvk] = list(entries)
    return names


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
