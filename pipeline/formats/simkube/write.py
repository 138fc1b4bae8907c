"""Writing SimKube traces: v2 (what released SimKube reads) or v3 (SimKube's next format), msgpack or JSON.

The writer validates before writing (:func:`simkube_compatibility_problems`), so a trace it writes is one
SimKube reads; the output is not read back to check it, which used to double the cost of an export
(``tests/unit/test_formats_simkube.py`` reads what this writes by SimKube's rules).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack

from pipeline.formats.simkube.model import SIMKUBE_V3, WRITABLE_VERSIONS, SimkubeTrace, versions_text
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.keys import GroupVersionKind
from pipeline.model.tracer_config import KNOWN_POD_SPEC_TEMPLATE_PATHS


def check_writable_version(version: int) -> None:
    """ConfigError naming the versions kubetape writes and reads unless ``version`` is one it writes."""
    if version not in WRITABLE_VERSIONS:
        raise ConfigError(
            f"SimKube trace format version {version} cannot be written; kubetape writes versions "
            f"{versions_text(WRITABLE_VERSIONS)} (and reads {versions_text()})"
        )


def with_version(trace: SimkubeTrace, version: int) -> SimkubeTrace:
    """``trace`` to be written as format ``version`` (2 or 3); ConfigError naming the versions otherwise.

    Nothing else changes: v3 keeps the index's names, v2 its hashes (recomputed when read from v3)."""
    check_writable_version(version)
    return trace if trace.version == version else dataclasses.replace(trace, version=version)


def simkube_to_wire(trace: SimkubeTrace) -> dict[str, Any]:
    """The plain structure :func:`write_simkube_trace` packs (field order as SimKube writes it)."""
    objects: tuple[str, Any] = (
        ("tracked_objects", trace.tracked_objects())
        if trace.version == SIMKUBE_V3
        else ("index", trace.index)
    )
    return {
        "version": trace.version,
        "config": trace.config,
        "events": [
            {"ts": e.ts, "applied_objs": e.applied_objs, "deleted_objs": e.deleted_objs} for e in trace.events
        ],
        objects[0]: objects[1],
        "pod_lifecycles": {
            owner: {h: [lc.to_wire() for lc in lcs] for h, lcs in by_hash.items()}
            for owner, by_hash in trace.pod_lifecycles.items()
        },
    }


def write_simkube_trace(trace: SimkubeTrace) -> bytes:
    """The msgpack bytes of ``trace`` in its format version; raises FormatError if SimKube would refuse it.

    Objects are written as given: they must hold JSON values only (as every object decoded from a watch
    or from a trace does)."""
    problems = simkube_compatibility_problems(trace)
    if problems:
        raise FormatError(f"refusing to write a SimKube trace SimKube cannot read: {'; '.join(problems)}")
    data: bytes = msgpack.packb(simkube_to_wire(trace), use_bin_type=True)
    return data


def simkube_compatibility_problems(trace: SimkubeTrace) -> list[str]:
    """Why SimKube would refuse ``trace``; ``[]`` when it reads it.

    Beyond the structure checked on reading, SimKube's ``normalize`` refuses unknown kinds without
    ``podSpecTemplatePaths``; a SimKube release reads one version only (2 today, 3 once PR #263 lands).
    """
    problems = []
    if trace.version not in WRITABLE_VERSIONS:
        problems.append(f"version is {trace.version}, SimKube reads {versions_text(WRITABLE_VERSIONS)}")
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
