"""Export: a time range of the segment store as one self-contained trace file.

The window ``[A, B)`` is rebuilt from the catalog (keyframe at or before A plus later segments, see
:mod:`pipeline.store.history`), filtered the way SimKube's tracer filters an export (excluded namespaces,
excluded label selectors, DaemonSet-owned objects, objects owned by another exported object), then
assembled with the state at A folded into the first events, so the file replays on its own. Output is a
kubetape trace (a ``TRACE`` segment) or a SimKube v2 ``.sktrace``.

On request (``ExportRequest.from_first_event``, what ``kubetape export`` asks), a range that starts
before anything was recorded starts at its first event instead (see :func:`recorded_start`); its end
is kept as asked.
"""

from __future__ import annotations

import contextlib
import enum
import gc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pipeline.formats.assemble import assemble_window, trace_to_simkube
from pipeline.formats.segment.content import Keyframe, Segment
from pipeline.formats.segment.decode import EventWires
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import SIMKUBE_TRACE_VERSION, with_version, write_simkube_trace
from pipeline.model.errors import ConfigError
from pipeline.model.events import Event
from pipeline.model.keys import parse_object_key
from pipeline.model.selectors import LabelSelector, parse_selector_text
from pipeline.model.tracer_config import TracerConfig
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.history import Window, rebuild_window
from pipeline.store.segment_store import SegmentStore
from pipeline.store.usage_history import stored_usage

EXPORT_ZSTD_LEVEL = 3
"""zstd level of kubetape exports: level 9 (the codec default) costs ~0.7 s more per 100k events for a
few percent of size, and exports are usually read once."""


class ExportFormat(enum.Enum):
    KUBETAPE = "kubetape"
    SIMKUBE = "simkube"


@dataclass(frozen=True, slots=True)
class ExportFilters:
    """Which objects an export keeps. SimKube's filters: ``excluded_namespaces``, ``excluded_labels``,
    ``suppress_owned`` (drop objects owned by another exported object: their owner recreates them on
    replay) and ``exclude_daemonset_owned``. kubetape's additions: ``included_namespaces`` (only these; a
    Namespace object counts as in itself, other cluster-scoped objects are kept), ``included_labels``
    (only objects some selector matches), ``included_kinds`` and ``excluded_kinds`` (``Kind`` or
    ``Kind.group``, e.g. ``Deployment.apps``). An object is kept when every given filter keeps it; pod
    lifecycles (no labels of their own) pass the label filters."""

    excluded_namespaces: tuple[str, ...] = ()
    excluded_labels: tuple[LabelSelector, ...] = ()
    suppress_owned: bool = True
    exclude_daemonset_owned: bool = True
    included_namespaces: tuple[str, ...] = ()
    included_labels: tuple[LabelSelector, ...] = ()
    included_kinds: tuple[str, ...] = ()
    excluded_kinds: tuple[str, ...] = ()

    def excludes(self, e: Event) -> bool:
        """Whether ``e`` is filtered out of the export (checks ordered cheapest first: runs per event)."""
        if self.excluded_namespaces or self.included_namespaces or self.included_kinds or self.excluded_kinds:
            key = parse_object_key(e.key)
            if self._excludes_key(key.group, key.kind, key.namespace, key.name):
                return True
        if e.obj is None:
            return False
        meta = e.obj.get("metadata") or {}
        if self.exclude_daemonset_owned:
            owners = meta.get("ownerReferences")
            if owners and any(isinstance(o, dict) and o.get("kind") == "DaemonSet" for o in owners):
                return True
        if not self.excluded_labels and not self.included_labels:
            return False
        labels = meta.get("labels") or {}
        if self.included_labels and not any(selector.matches(labels) for selector in self.included_labels):
            return True
        return any(selector.matches(labels) for selector in self.excluded_labels)

    def excludes_key(self, key: str) -> bool:
        """Whether the object of ``key`` is filtered out by its name alone (namespace and kind filters)."""
        parsed = parse_object_key(key)
        return self._excludes_key(parsed.group, parsed.kind, parsed.namespace, parsed.name)

    def _excludes_key(self, group: str, kind: str, namespace: str | None, name: str) -> bool:
        if namespace is None and kind == "Namespace" and not group:
            namespace = name  # a Namespace goes with the objects in it
        if namespace is not None:
            if namespace in self.excluded_namespaces:
                return True
            if self.included_namespaces and namespace not in self.included_namespaces:
                return True
        if self.included_kinds and not any(kind_matches(k, group, kind) for k in self.included_kinds):
            return True
        return any(kind_matches(k, group, kind) for k in self.excluded_kinds)


def kind_matches(pattern: str, group: str, kind: str) -> bool:
    """``Deployment`` matches the kind in any group; ``Deployment.apps`` only in group ``apps``
    (``Pod.`` or ``Pod.core``: the core group). Kind names compare case-insensitively, as kubectl's."""
    name, dot, pattern_group = pattern.partition(".")
    if name.lower() != kind.lower():
        return False
    return not dot or pattern_group == group or (pattern_group in ("", "core") and not group)


@dataclass(frozen=True, slots=True)
class ExportRequest:
    start_ms: int
    end_ms: int
    format: ExportFormat = ExportFormat.KUBETAPE
    filters: ExportFilters = field(default_factory=ExportFilters)
    config: TracerConfig | None = None
    simkube_version: int = SIMKUBE_TRACE_VERSION
    """The SimKube trace format version to write (2, what released SimKube reads, or 3)."""
    from_first_event: bool = False
    """Start at the window's first event when nothing the export keeps was in the state at its start
    (:func:`recorded_start`). Off, the file covers ``[start_ms, end_ms)`` exactly, as SimKube's tracer
    API does."""


@dataclass(frozen=True, slots=True)
class ExportResult:
    """The file bytes, how many events it holds and the span it covers, both as ``kubetape inspect``
    counts them (a SimKube trace's events are its changes grouped by second, its span theirs), and the
    warnings (skipped corrupt segments)."""

    data: bytes
    events: int
    warnings: tuple[str, ...]
    start_ms: int
    end_ms: int


def export_window(
    catalog: SegmentCatalog,
    request: ExportRequest,
    warn: Callable[[str], None] | None = None,
    *,
    usage: SegmentStore | None = None,
    decode_bodies: bool = False,
) -> ExportResult:
    """Build the export file for ``request`` (CPU-bound: run it in a thread from async code); with the
    recorded load of the ``usage`` sub-store (:mod:`pipeline.store.usage_history`) in the window.

    A kubetape file is written from the stored bytes of its events, their bodies never decoded unless
    the C scan cannot vouch for the bytes (see :class:`EventWires`); ``decode_bodies`` decodes every
    body (the same file, slower: the definition the faster path is tested against)."""
    if request.start_ms >= request.end_ms:
        raise ConfigError(
            f"export range is empty: from {request.start_ms} ms is not before to {request.end_ms} ms"
        )
    with _cyclic_gc_paused():
        return _export(catalog, request, warn, usage, decode_bodies=decode_bodies)


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """An export builds a few hundred thousand containers that all stay alive until the file is
    written; the cyclic collector would rescan them over and over (measured: 80 % of the decoding time
    of 100k events, 2.7 s vs 0.5 s). Nothing an export builds is cyclic garbage, so it is paused."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def window_trace(
    catalog: SegmentCatalog,
    request: ExportRequest,
    warn: Callable[[str], None] | None = None,
    *,
    usage: SegmentStore | None = None,
) -> Segment:
    """The trace ``request`` selects, assembled as an export assembles it but not encoded: a replay of a
    store's range uses it as it is, so the range replays as its exported file would."""
    if request.start_ms >= request.end_ms:
        raise ConfigError(
            f"replay range is empty: from {request.start_ms} ms is not before to {request.end_ms} ms"
        )
    with _cyclic_gc_paused():
        trace, _window = _assemble(catalog, request, warn, None, usage)
    return trace


def _assemble(
    catalog: SegmentCatalog,
    request: ExportRequest,
    warn: Callable[[str], None] | None,
    wires: EventWires | None,
    usage: SegmentStore | None = None,
) -> tuple[Segment, Window]:
    window = rebuild_window(catalog, request.start_ms, request.end_ms, warn, wires=wires)
    keyframe, events = _filtered(window, request)
    samples = [] if usage is None else stored_usage(usage, request.end_ms, warn)
    excludes = request.filters.excludes_key  # an owner's load goes where the owner goes
    samples = [s for s in samples if not excludes(s.owner_key)]
    trace = assemble_window(
        keyframe,
        events,
        recorded_start(keyframe, events) if request.from_first_event else request.start_ms,
        request.end_ms,
        config=request.config or TracerConfig.default(),
        suppress_owned=request.filters.suppress_owned,
        usage=samples,
        wires=wires,
    )
    return trace, window


def _export(
    catalog: SegmentCatalog,
    request: ExportRequest,
    warn: Callable[[str], None] | None,
    usage: SegmentStore | None,
    *,
    decode_bodies: bool,
) -> ExportResult:
    # Only a kubetape file is written from the stored bytes; a SimKube one needs no event's bytes.
    # Of a body, the filters read the owners and the labels, assembly the owners and the namespace.
    filters = request.filters
    wires = (
        EventWires(bodies=decode_bodies, labels=bool(filters.excluded_labels or filters.included_labels))
        if request.format is ExportFormat.KUBETAPE
        else None
    )
    trace, window = _assemble(catalog, request, warn, wires, usage)
    span = (trace.header.start_ms, trace.header.end_ms)
    if request.format is ExportFormat.SIMKUBE:
        if trace.usage and warn is not None:  # SimKube's trace has no place for load
            warn(
                f"the SimKube trace leaves out the {len(trace.usage)} usage samples of the recorded load "
                "(SimKube replays no load); export the kubetape format to keep them"
            )
        simkube = trace_to_simkube(trace, request.config or TracerConfig.default())
        data = write_simkube_trace(with_version(simkube, request.simkube_version))
        if simkube.events:  # a SimKube trace spans its events' seconds (it states no end of its own)
            span = (simkube.events[0].ts * 1000, simkube.events[-1].ts * 1000)
        return ExportResult(data, len(simkube.events), tuple(window.skipped), *span)
    data = encode_segment(trace, EXPORT_ZSTD_LEVEL, wires=wires)
    return ExportResult(data, len(trace.events), tuple(window.skipped), *span)


def recorded_start(keyframe: Keyframe, events: list[Event]) -> int:
    """Where the export of a window starts: at the window's start, unless nothing the export keeps
    (no object, no pod lifecycle) was in the state there; then at its first event, or at the earliest
    pod start an event carries if that is sooner. Such a lead-in holds nothing: the range started
    before the recording did (or before anything the filters keep existed), and replaying it would
    only wait. The end needs no such rule
    the store could apply: a quiet stretch writes no segment, so a recording that stopped and one
    that saw nothing change look alike, and a replay simulates the quiet rest of a range."""
    if keyframe.objects or keyframe.lifecycles or not events:
        return keyframe.at_ms
    # A pod's start is its creationTimestamp, whole seconds, so it can lie before the first event
    # that saw it; starting there keeps every recorded start as it was, never moved to the trace's.
    earliest = min(
        min(event.ts_ms, event.pod_start_ms if event.pod_start_ms is not None else event.ts_ms)
        for event in events
    )
    return max(keyframe.at_ms, earliest)


def _filtered(window: Window, request: ExportRequest) -> tuple[Keyframe, list[Event]]:
    """The state at the window start and the window's events, without what the filters exclude."""
    excludes = request.filters.excludes  # bound once: called for every event of the window
    state = window.state.keyframe(request.start_ms)
    keyframe = Keyframe(
        request.start_ms,
        {k: e for k, e in state.objects.items() if not excludes(e)},
        {k: e for k, e in state.lifecycles.items() if not excludes(e)},
    )
    return keyframe, [e for e in window.events if not excludes(e)]


def filters_from_json(body: dict[str, Any], where: str) -> ExportFilters:
    """Filters from SimKube's JSON form: ``{excluded_namespaces: [...], excluded_labels: [selector]}``."""
    from pipeline.model.selectors import parse_label_selector

    namespaces = body.get("excluded_namespaces") or []
    labels = body.get("excluded_labels") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise ConfigError(f"{where}: excluded_namespaces must be a list of strings")
    if not isinstance(labels, list):
        raise ConfigError(f"{where}: excluded_labels must be a list of label selectors")
    return ExportFilters(
        excluded_namespaces=tuple(namespaces),
        excluded_labels=tuple(
            parse_label_selector(s, f"{where}.excluded_labels[{i}]") for i, s in enumerate(labels)
        ),
        suppress_owned=bool(body.get("suppress_owned", True)),
    )


def selectors_from_strings(texts: Iterable[str]) -> tuple[LabelSelector, ...]:
    """Label selectors in kubectl's syntax (``app=web,tier!=db``, ``env in (a,b)``, ``!spot``; the
    requirements of one string are ANDed), as the CLI takes them."""
    return tuple(parse_selector_text(text, f"label filter {text!r}") for text in texts)
