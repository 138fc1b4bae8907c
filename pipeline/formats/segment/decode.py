"""Reading segment files back: checksums, limits, then the body (events, keyframe, tracer config).

Corrupt, truncated or unknown-version bytes raise FormatError / UnknownVersionError naming the source.
"""

from __future__ import annotations

import dataclasses
import gc
import operator
import zlib
from pathlib import Path
from typing import Any, cast

import msgpack
import zstandard

from pipeline.formats.columns import events_from_columns
from pipeline.formats.segment.content import Keyframe, Segment, consistency_problem
from pipeline.formats.segment.delta_decode import decode_events
from pipeline.formats.segment.header import BODY_PREAMBLE, SegmentHeader, split_header
from pipeline.formats.segment.limits import DecodeLimits, default_limits
from pipeline.formats.wire import native
from pipeline.formats.wire.codec import event_from_wire, with_time
from pipeline.formats.wire.probe import EventHead
from pipeline.formats.wire.skeleton import BodySkeleton
from pipeline.model.errors import ConfigError, FormatError
from pipeline.model.events import Event, EventType, prechecked_event
from pipeline.model.tracer_config import TracerConfig
from pipeline.model.usage import CONTAINERS_MAX, NAME_MAX, UsageSample, usage_from_wire


def decode_segment(
    data: bytes,
    source: str = "segment",
    *,
    with_keyframe: bool = True,
    wires: EventWires | None = None,
    limits: DecodeLimits | None = None,
) -> Segment:
    """Decode :func:`~.encode.encode_segment`'s bytes; raises FormatError/UnknownVersionError naming
    ``source``.

    ``with_keyframe=False`` leaves the keyframe out (``Segment.keyframe`` is None whatever the header
    says): readers that start from an earlier state skip the most expensive part of the body.
    ``wires`` collects the bytes of each event (not of keyframe events; version-2 segments only).
    ``limits`` (default: :func:`default_limits`) are checked before the body is inflated, and what a
    format-3 header declares its delta tables rebuild to before they are rebuilt.

    Whatever the bytes, the only errors are FormatError and UnknownVersionError: a field of a type or
    range no check foresaw is reported as a malformed body, not as a crash."""
    limits = limits or default_limits()
    header, offset = split_header(data, source)
    rebuilt = _RebuildAllowance.of(header, limits, len(data), source)
    if len(data) < offset + BODY_PREAMBLE.size:
        raise FormatError(f"{source}: truncated: the body is missing")
    body_len, body_crc = BODY_PREAMBLE.unpack_from(data, offset)
    start = offset + BODY_PREAMBLE.size
    body = data[start : start + body_len]
    if len(body) < body_len:
        raise FormatError(f"{source}: truncated body: {len(body)} of {body_len} bytes present")
    if len(data) > start + body_len:
        raise FormatError(f"{source}: {len(data) - start - body_len} unexpected bytes after the body")
    if zlib.crc32(body) != body_crc:
        raise FormatError(f"{source}: body checksum mismatch: the file is corrupt")
    # Bulk decoding allocates many containers that all survive: the cyclic GC would rescan them again
    # and again for nothing (msgpack's documentation recommends pausing it), so it is paused here.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            declared = limits.check(body, source)
            _check_against_header(declared, header, source)
            raw_body = zstandard.ZstdDecompressor().decompress(body, max_output_size=max(declared, 1))
            raw = _unpack_body(raw_body, header)
        except FormatError:
            raise
        except Exception as exc:  # zstd and msgpack raise their own types for corrupt data
            raise FormatError(f"{source}: undecodable body ({type(exc).__name__}: {exc})") from None
        try:
            segment = _body_from_wire(
                raw, header, source, with_keyframe=with_keyframe, wires=wires, rebuilt=rebuilt
            )
        except (FormatError, MemoryError):
            raise
        except Exception as exc:  # a crafted field no check foresaw: still the reader's error, not a crash
            raise FormatError(f"{source}: malformed body ({type(exc).__name__}: {exc})") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    if not with_keyframe and header.keyframe_at_ms is not None:
        header = dataclasses.replace(
            header,
            keyframe_at_ms=None,
            keyframe_objects=0,
            keyframe_lifecycles=0,
            keyframe_tombstones=0,
            keyframe_offset=None,
            keyframe_time=None,
        )
        segment = dataclasses.replace(segment, header=header)
    problem = consistency_problem(segment)
    if problem:
        raise FormatError(f"{source}: {problem}")
    return segment


_SLACK_BYTES = 1 << 20
"""What a version-3 body may hold beyond the events and keyframe it declares: its tracer config, the
msgpack framing, the delta table's columns (a few bytes per row, counted apart)."""
_SLACK_ITEMS = 1 << 16
"""Items a version-2/3 body may hold outside its event lists (the tracer config's lists and maps)."""


class _RebuildAllowance:
    """What a format-3 body's delta tables may still rebuild to: the bytes its header declares for the
    events, and for the keyframe (its lists share them), each at most the file's budget
    (:meth:`~.limits.DecodeLimits.check_rebuilt`, checked before anything is built)."""

    def __init__(self, events: int, keyframe: int) -> None:
        self.events = events
        self.keyframe = keyframe

    @classmethod
    def of(
        cls, header: SegmentHeader, limits: DecodeLimits, file_size: int, source: str
    ) -> _RebuildAllowance:
        events, keyframe = header.event_bytes or 0, header.keyframe_bytes or 0
        budget = limits.check_rebuilt(events + keyframe, file_size, source)
        return cls(min(events, budget), min(keyframe, budget - events))

    def keyframe_list(self, coded: Any, count: int, start_ms: int, what: str) -> bytes:
        """One keyframe list's delta table rebuilt, within what is left of the keyframe's bytes."""
        blob = decode_events(coded, count, start_ms, self.keyframe, what)
        self.keyframe -= len(blob)
        return blob


def _check_against_header(declared: int, header: SegmentHeader, source: str) -> None:
    """A version-3 header declares what its body holds: a body that would inflate to more is refused
    before it is inflated, however well it compresses (a file padded to look ordinary)."""
    if header.format_version < 3 or header.event_bytes is None:
        return
    rows = (
        header.counts.total
        + header.keyframe_objects
        + header.keyframe_lifecycles
        + header.keyframe_tombstones
    )
    bound = (
        header.event_bytes
        + (header.keyframe_bytes or 0)
        + 16 * rows
        + USAGE_SAMPLE_MAX_BYTES * header.usage_samples
        + _SLACK_BYTES
    )
    if declared > bound:
        raise FormatError(
            f"{source}: the body would inflate to {declared} bytes, more than its header declares "
            f"({header.event_bytes} bytes of {header.counts.total} events, {header.keyframe_bytes} of "
            "keyframe): a crafted or corrupt file; refused"
        )


def _unpack_body(raw_body: bytes, header: SegmentHeader) -> Any:
    """The body's map. Version 2 and 3 bodies keep events in bins and their outer map holds only the
    tracer config besides, so its lists and maps are bounded tightly: a body of millions of tiny items
    (a pointer each, 8 bytes for every byte inflated) is refused at the first list's header, before
    any item is built. Version 1 bodies (columns of events) are bounded by the ratio limit only."""
    if header.format_version == 1:
        return msgpack.unpackb(raw_body, raw=False, strict_map_key=False)
    return msgpack.unpackb(
        raw_body,
        raw=False,
        strict_map_key=False,
        max_array_len=_SLACK_ITEMS,
        max_map_len=_SLACK_ITEMS,
        max_ext_len=0,
    )


def _body_from_wire(
    raw: Any,
    header: SegmentHeader,
    source: str,
    *,
    with_keyframe: bool,
    wires: EventWires | None,
    rebuilt: _RebuildAllowance,
) -> Segment:
    if not isinstance(raw, dict):
        raise FormatError(f"{source}: malformed body (not a map)")
    v1 = header.format_version == 1
    if v1:
        events = tuple(events_from_columns(raw.get("events"), header.start_ms, f"{source}: event"))
    elif header.format_version >= 3 and "delta" in raw:
        blob = decode_events(
            raw["delta"], header.counts.total, header.start_ms, rebuilt.events, f"{source}: event"
        )
        events = tuple(_events_from_wires(blob, header.counts.total, f"{source}: event", wires))
    else:
        events = tuple(_events_from_wires(raw.get("events"), header.counts.total, f"{source}: event", wires))
    keyframe = None
    kf = raw.get("keyframe")
    if kf is not None and with_keyframe:
        at_ms = kf.get("at_ms") if isinstance(kf, dict) else None
        if type(at_ms) is not int:
            raise FormatError(f"{source}: malformed keyframe (no time)")
        if v1:
            objects = events_from_columns(kf.get("objects"), at_ms, f"{source}: keyframe object")
            lifecycles = events_from_columns(kf.get("lifecycles"), at_ms, f"{source}: keyframe lifecycle")
        else:
            # without bodies, keyframe objects need their bytes too: they are written moved
            kf_wires = wires if wires is not None and not wires.bodies else None
            objects = _keyframe_list(
                kf,
                "objects",
                header.keyframe_objects,
                header,
                f"{source}: keyframe object",
                rebuilt=rebuilt,
                wires=kf_wires,
            )
            lifecycles = _keyframe_list(
                kf,
                "lifecycles",
                header.keyframe_lifecycles,
                header,
                f"{source}: keyframe lifecycle",
                rebuilt=rebuilt,
                wires=kf_wires,
            )
        tombstones = (
            _keyframe_list(
                kf,
                "tombstones",
                header.keyframe_tombstones,
                header,
                f"{source}: keyframe tombstone",
                rebuilt=rebuilt,
            )
            if header.keyframe_tombstones and not v1
            else []
        )
        keyframe = Keyframe(
            at_ms,
            {e.key: e for e in objects},
            {e.key: e for e in lifecycles},
            {e.key: e for e in tombstones},
        )
    config = None
    if raw.get("config") is not None:
        try:
            config = TracerConfig.from_mapping(raw["config"], "(embedded)")
        except ConfigError as exc:
            raise FormatError(f"{source}: {exc}") from None
    return Segment(header, events, keyframe, config, _usage_from_body(raw, header, source))


USAGE_SAMPLE_MAX_BYTES = CONTAINERS_MAX * (NAME_MAX + 24) + 2 * NAME_MAX + 128
"""The most bytes one usage sample's wire form takes (64 containers with the longest names)."""


def _usage_from_body(raw: dict[str, Any], header: SegmentHeader, source: str) -> tuple[UsageSample, ...]:
    """The body's usage samples, as many as the header declares (none in segments written before
    them); the bin is bounded by that count before it is unpacked."""
    count = header.usage_samples
    if not count:
        return ()
    blob = raw.get("usage")
    if not isinstance(blob, bytes) or len(blob) > USAGE_SAMPLE_MAX_BYTES * count:
        raise FormatError(f"{source}: the header declares {count} usage samples, the body has no such list")
    try:
        wires = msgpack.unpackb(
            blob, raw=False, max_array_len=max(count, CONTAINERS_MAX), max_map_len=16, max_ext_len=0
        )
    except Exception as exc:  # msgpack raises several unrelated classes for bad bytes
        raise FormatError(f"{source}: malformed usage samples ({type(exc).__name__}: {exc})") from None
    if not isinstance(wires, list) or len(wires) != count:
        raise FormatError(f"{source}: the header declares {count} usage samples, the body holds others")
    samples = []
    for i, wire in enumerate(wires):
        try:
            samples.append(usage_from_wire(wire))
        except FormatError as exc:
            raise FormatError(f"{source}: usage sample {i}: {exc}") from None
    return tuple(samples)


def _keyframe_list(
    kf: dict[Any, Any],
    name: str,
    count: int,
    header: SegmentHeader,
    what: str,
    *,
    rebuilt: _RebuildAllowance,
    wires: EventWires | None = None,
) -> list[Event]:
    """One of a keyframe's event lists: its wire bytes, or (version 3) its delta table rebuilt to them."""
    coded = kf.get(f"{name}_delta") if header.format_version >= 3 else None
    if coded is None:
        return _events_from_wires(kf.get(name), count, what, wires)
    blob = rebuilt.keyframe_list(coded, count, header.keyframe_at_ms or 0, what)
    return _events_from_wires(blob, count, what, wires)


def _events_from_wires(blob: Any, count: int, what: str, wires: EventWires | None = None) -> list[Event]:
    """The ``count`` events of a version-2 event list (their wire bytes, concatenated); each event's
    bytes are remembered in ``wires`` if given.

    The sink checks messages without decoding their object bodies (see
    :class:`~pipeline.formats.wire.probe.WireProbe`), so a body may hold what msgpack encodes but Python
    cannot decode as it is: text that is not UTF-8, a map key that is a list or a map. No kubetape
    watcher writes such a body (they come from JSON). Rather than losing the whole segment, such a
    list is read again tolerantly: invalid text with U+FFFD, unhashable keys as their ``repr``."""
    if type(blob) is not bytes:
        raise FormatError(f"{what}s: malformed (expected the events' bytes)")
    if wires is not None and not wires.bodies:
        events = _light_events(blob, count, wires)
        if events is not None:
            return events
    try:
        return _decode_wires(blob, count, what, wires, tolerant=False)
    except FormatError:
        raise
    except Exception:  # see the docstring: read again tolerantly
        pass
    try:
        return _decode_wires(blob, count, what, wires, tolerant=True)
    except FormatError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for corrupt data
        raise FormatError(f"{what}s: undecodable ({type(exc).__name__}: {exc})") from None


def _light_events(blob: bytes, count: int, wires: EventWires) -> list[Event] | None:
    """The events of a list with skeletons for bodies where the C scan vouches for the bytes (see
    :class:`EventWires`); the others decoded whole, each as :func:`_decode_wires` decodes it. None when
    the list or any of its events is not valid: the caller decodes it all again, which says what is
    wrong exactly as before."""
    result = native.light(blob, count, wires.labels)
    if result is None:
        return None
    events, pieces, undecided = result
    for i in undecided:
        try:
            events[i] = _decoded_whole(pieces[i])
        except Exception:  # FormatError or msgpack's: the full decoding reports it
            return None
    decoded = cast("list[Event]", events)  # no None left
    wires.add_all(decoded, pieces)
    return decoded


def _decoded_whole(piece: bytes) -> Event:
    """One event's bytes decoded whole, as :func:`_decode_wires` decodes an event of its list: strictly
    (by the C scan's head when it accepts the event), else tolerantly."""
    try:
        value = msgpack.unpackb(piece, raw=False, strict_map_key=False)
    except Exception:  # see _events_from_wires: read again tolerantly
        value = msgpack.unpackb(
            piece,
            raw=False,
            strict_map_key=False,
            unicode_errors="replace",
            object_pairs_hook=_tolerant_map,
        )
        return event_from_wire(value)
    head = native.scan([piece])[0][0]
    return event_from_wire(value) if head is None else _prechecked(head.type, value)


def _decode_wires(
    blob: bytes, count: int, what: str, wires: EventWires | None, *, tolerant: bool
) -> list[Event]:
    out: list[Event] = []
    ends: list[int] = []
    unpacker = (
        msgpack.Unpacker(
            raw=False,
            strict_map_key=False,
            max_buffer_size=max(len(blob), 1),
            unicode_errors="replace",
            object_pairs_hook=_tolerant_map,
        )
        if tolerant
        else msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(blob), 1))
    )
    unpacker.feed(blob)
    values: list[Any] = []
    too_many = False
    for value in unpacker:  # streaming is as fast as one unpackb and tells where each event ends
        if len(ends) == count:  # refused at once: a crafted list of many more values is never built
            too_many = True
            break
        ends.append(unpacker.tell())
        values.append(value)
    pieces = [blob[a:b] for a, b in zip([0, *ends], ends, strict=False)]
    # The C scan checks each event's bytes by the ingest rules, stricter than the Event's own: the
    # events it accepts are built without checking them again; the rest as any decoded event.
    heads: list[EventHead | None] = (
        [None] * len(values) if tolerant else native.scan(cast("list[bytes | None]", pieces))[0]
    )
    for value, head in zip(values, heads, strict=True):
        if head is not None:
            out.append(_prechecked(head.type, value))
            continue
        try:
            out.append(event_from_wire(value))
        except FormatError:
            event_from_wire(value, f"{what} #{len(out)}")  # raises again, naming the event
            raise
    if too_many:
        raise FormatError(f"{what}s: more events than the {count} the header counts")
    if len(out) != count or (ends[-1] if ends else 0) != len(blob):
        raise FormatError(f"{what}s: {len(out)} events where the header counts {count}")
    if wires is not None:
        wires.add_all(out, pieces)
    return out


def _prechecked(event_type: EventType, value: list[Any]) -> Event:
    """The event of a wire list the C scan accepted (``event_type`` is the one it read)."""
    if len(value) == 8 or event_type is EventType.POD_LIFECYCLE:
        return prechecked_event(event_type, *value[2:])
    _, _, ts_ms, key, uid, rv, obj, spec_hash, from_rv, to_rv, reason = value
    return prechecked_event(
        event_type, ts_ms, key, uid, rv, obj, spec_hash, None, 0, None, None, from_rv, to_rv, reason
    )


def _tolerant_map(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    return {k if isinstance(k, str | int | float | bool | None) else repr(k): v for k, v in pairs}


class EventWires:
    """The wire bytes of decoded events, by identity, so that an encoder can reuse what a decoder read
    (an export writes most events exactly as the segments held them; re-encoding their object bodies
    was a third of an export's time). Holds the events, so an identity is never reused meanwhile.

    ``bodies=False``: the events the C scan vouches for are built with a
    :class:`~pipeline.formats.wire.skeleton.BodySkeleton` instead of their body (``labels``: with the
    labels in it), keyframe events included, for a reader that only copies bodies (the export). Such
    an event is written from its bytes; :meth:`moved` moves one to another time with its bytes."""

    def __init__(self, *, bodies: bool = True, labels: bool = True) -> None:
        self.bodies = bodies
        self.labels = labels
        self._by_id: dict[int, bytes] = {}
        self._alive: list[Event] = []

    def add_all(self, events: list[Event], wires: list[bytes]) -> None:
        """Remember ``wires[i]`` as the bytes of ``events[i]``."""
        self._alive += events
        self._by_id.update(zip(map(id, events), wires, strict=True))

    def get(self, e: Event) -> bytes | None:
        return self._by_id.get(id(e))

    def moved(self, e: Event, ts_ms: int) -> Event | None:
        """``e`` moved to ``ts_ms`` with its bytes (the time spliced into them) if it holds a skeleton,
        else None (it holds its body: move it as any event)."""
        if type(e.obj) is not BodySkeleton:
            return None
        moved = prechecked_event(e.type, ts_ms, *_fields_after_time(e))
        self.add_all([moved], [with_time(self._by_id[id(e)], ts_ms)])
        return moved


_fields_after_time = operator.attrgetter(*(f.name for f in dataclasses.fields(Event)[2:]))
"""An event's fields after ``type`` and ``ts_ms``, in the order :func:`prechecked_event` takes them."""


def read_segment(path: Path) -> Segment:
    """Decode the segment file at ``path``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return decode_segment(data, str(path))
