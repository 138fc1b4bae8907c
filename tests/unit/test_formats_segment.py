"""kubetape segment files: round trips, cheap headers, invariants and clear errors."""

from __future__ import annotations

import dataclasses
import gc
import json
import struct
import zlib
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.formats.segment.content import Keyframe, Segment, build_segment, build_wire_segment
from pipeline.formats.segment.decode import decode_segment, read_segment
from pipeline.formats.segment.encode import encode_segment, encode_wire_segment
from pipeline.formats.segment.header import (
    DEFAULT_WRITE_VERSION,
    SEGMENT_FORMAT_VERSION,
    EventCounts,
    PartitionRange,
    SegmentHeader,
    SegmentKind,
    decode_segment_header,
    read_segment_header,
)
from pipeline.formats.wire.codec import event_to_wire
from pipeline.formats.wire.probe import EventHead, WireProbe
from pipeline.model.errors import FormatError, UnknownVersionError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import key_of, object_key
from pipeline.model.tracer_config import TracerConfig
from tests.unit.test_model_events import events

START, END = 1_700_000_000_000, 1_700_000_600_000


def _deployment(name: str, replicas: int) -> Event:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "annotations": {}},
        "spec": {"replicas": replicas},
    }
    return Event.applied(START + replicas * 1000, key_of(obj), obj, replicas)


def _segment() -> Segment:
    kf_obj = _deployment("base", 0)
    lifecycle = Event.pod_lifecycle(
        START - 5,
        object_key("v1", "Pod", "default", "base-1"),
        owner_key=kf_obj.key,
        pod_spec_hash=3,
        start_ms=START - 10,
        end_ms=None,
    )
    return build_segment(
        [_deployment("b", 2), _deployment("a", 1), _deployment("c", 3)],
        start_ms=START,
        end_ms=END,
        partitions=[PartitionRange("kubetape.events", 3, 100, 102)],
        keyframe=Keyframe(START, {kf_obj.key: kf_obj}, {lifecycle.key: lifecycle}),
        config=TracerConfig.default(),
    )


def test_segment_round_trips_with_sorted_events_keyframe_and_config() -> None:
    seg = _segment()
    assert [e.ts_ms for e in seg.events] == sorted(e.ts_ms for e in seg.events)
    decoded = decode_segment(encode_segment(seg), "seg")
    assert decoded == seg
    assert decoded.config == TracerConfig.default()


def test_header_holds_time_range_offsets_and_counts_and_reads_cheaply(tmp_path: Path) -> None:
    data = encode_segment(_segment())
    header = decode_segment_header(data[:200])  # the body is not needed
    assert header.format_version == DEFAULT_WRITE_VERSION
    assert (header.start_ms, header.end_ms) == (START, END)
    assert header.partitions == (PartitionRange("kubetape.events", 3, 100, 102),)
    assert header.counts == EventCounts(applied=3)
    assert (header.keyframe_at_ms, header.keyframe_objects, header.keyframe_lifecycles) == (START, 1, 1)
    path = tmp_path / "p3-100.kts"
    path.write_bytes(data)
    assert read_segment_header(path) == header
    assert read_segment(path) == decode_segment(data)


def test_segment_is_compressed() -> None:
    many = [_deployment(f"web-{i}", i % 50) for i in range(500)]
    seg = build_segment(many, start_ms=START, end_ms=END)
    raw_size = sum(len(str(e.obj)) for e in many)
    assert len(encode_segment(seg)) < raw_size / 5


def test_build_segment_refuses_events_outside_the_range() -> None:
    with pytest.raises(FormatError, match="not before end_ms"):
        build_segment([_deployment("a", 1)], start_ms=START, end_ms=START + 1000)
    with pytest.raises(FormatError, match="start before start_ms"):
        build_segment([_deployment("a", 1)], start_ms=START + 5000, end_ms=END)
    late = Keyframe(START + 1)
    with pytest.raises(FormatError, match="keyframe at"):
        build_segment([], start_ms=START, end_ms=END, keyframe=late)


def test_encoder_refuses_unsorted_events() -> None:
    seg = _segment()
    shuffled = Segment(seg.header, tuple(reversed(seg.events)), seg.keyframe)
    with pytest.raises(FormatError, match="not sorted"):
        encode_segment(shuffled)


def test_unknown_segment_version_is_rejected() -> None:
    data = bytearray(encode_segment(_segment()))
    struct.pack_into(">H", data, 4, SEGMENT_FORMAT_VERSION + 1)
    with pytest.raises(
        UnknownVersionError, match=f"seg.kts: segment format version {SEGMENT_FORMAT_VERSION + 1}"
    ):
        decode_segment(bytes(data), "seg.kts")


def test_corruption_and_truncation_are_named() -> None:
    data = encode_segment(_segment())
    with pytest.raises(FormatError, match="seg: truncated body"):
        decode_segment(data[:-10], "seg")
    with pytest.raises(FormatError, match="unexpected bytes after the body"):
        decode_segment(data + b"x", "seg")
    flipped = bytearray(data)
    flipped[-20] ^= 0xFF
    with pytest.raises(FormatError, match="body checksum mismatch"):
        decode_segment(bytes(flipped), "seg")
    flipped = bytearray(data)
    flipped[20] ^= 0xFF
    with pytest.raises(FormatError, match="header checksum mismatch"):
        decode_segment(bytes(flipped), "seg")
    with pytest.raises(FormatError, match="not a kubetape segment"):
        decode_segment(b"PK\x03\x04" + data[4:], "seg")


def test_header_counts_must_match_the_body() -> None:
    """A consistent checksum does not excuse a lying header (e.g. written by a buggy producer)."""
    seg = _segment()
    lying = Segment(
        SegmentHeader(SEGMENT_FORMAT_VERSION, SegmentKind.SEGMENT, START, END, (), EventCounts(applied=9)),
        seg.events,
    )
    with pytest.raises(FormatError, match="header counts"):
        encode_segment(lying)


def test_checksums_cover_what_they_claim() -> None:
    data = encode_segment(_segment())
    header_len, header_crc = struct.unpack_from(">II", data, 6)
    assert zlib.crc32(data[14 : 14 + header_len]) == header_crc


# ---- random segments ------------------------------------------------------------------------------
@st.composite
def segments(draw: st.DrawFn) -> Segment:
    start = draw(st.integers(0, 2**41))
    end = start + draw(st.integers(1, 10**7))
    in_range = st.integers(start, end - 1)
    evs = draw(st.lists(events(ts=in_range), max_size=8))
    keyframe = None
    if draw(st.booleans()):
        objs = [
            e
            for e in draw(st.lists(events(ts=st.integers(0, start)), max_size=4))
            if e.type is EventType.APPLIED
        ]
        lcs = [
            e
            for e in draw(st.lists(events(ts=st.integers(0, start)), max_size=4))
            if e.type is EventType.POD_LIFECYCLE
        ]
        keyframe = Keyframe(draw(st.integers(0, start)), {e.key: e for e in objs}, {e.key: e for e in lcs})
    partitions = draw(
        st.lists(
            st.builds(
                PartitionRange,
                st.just("kubetape.events"),
                st.integers(0, 63),
                st.integers(0, 2**40),
                st.integers(0, 2**40),
            ),
            max_size=3,
        )
    )
    kind = draw(st.sampled_from([SegmentKind.SEGMENT, SegmentKind.TRACE]))  # a GAP holds no events
    config = draw(st.none() | st.just(TracerConfig.default()))
    return build_segment(
        evs, start_ms=start, end_ms=end, partitions=partitions, keyframe=keyframe, config=config, kind=kind
    )


@given(segments())
def test_random_segments_round_trip(seg: Segment) -> None:
    data = encode_segment(seg)
    assert decode_segment(data) == seg
    assert decode_segment_header(data) == seg.header


def test_decoding_leaves_the_garbage_collector_as_it_found_it() -> None:
    data = encode_segment(_segment())
    assert gc.isenabled()
    decode_segment(data)
    assert gc.isenabled()
    with pytest.raises(FormatError):
        decode_segment(data[:-1] + bytes([data[-1] ^ 1]))
    assert gc.isenabled()
    gc.disable()
    try:
        decode_segment(data)
        assert not gc.isenabled()
    finally:
        gc.enable()


# ---- format versions ---------------------------------------------------------------------------------
DATA = Path(__file__).parent / "data"


def test_a_version_1_segment_written_by_the_previous_release_still_reads() -> None:
    """segment-v1.kseg was written by the column codec before version 2; its expected content beside it."""
    expected = json.loads((DATA / "segment-v1.expected.json").read_text())
    seg = read_segment(DATA / "segment-v1.kseg")
    assert seg.header.format_version == 1
    assert seg.header.to_json() == expected["header"]
    assert [event_to_wire(e) for e in seg.events] == expected["events"]
    assert seg.keyframe is not None
    assert seg.keyframe.at_ms == expected["keyframe"]["at_ms"]
    assert [event_to_wire(e) for e in seg.keyframe.objects.values()] == expected["keyframe"]["objects"]
    assert [event_to_wire(e) for e in seg.keyframe.lifecycles.values()] == expected["keyframe"]["lifecycles"]
    # the default tracer config of its release: before HorizontalPodAutoscalers were tracked by default
    then = tuple(e for e in TracerConfig.default().tracked if e.gvk.kind != "HorizontalPodAutoscaler")
    assert seg.config == TracerConfig(tracked=then)


def test_a_version_1_segment_rewritten_in_the_current_version_holds_the_same_content() -> None:
    old = read_segment(DATA / "segment-v1.kseg")
    new = decode_segment(encode_segment(old, format_version=SEGMENT_FORMAT_VERSION))
    assert new.header.format_version == SEGMENT_FORMAT_VERSION == 3
    assert (new.events, new.keyframe, new.config) == (old.events, old.keyframe, old.config)
    assert dataclasses.replace(new.header, format_version=1) == old.header


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_version_round_trips_and_the_keyframe_can_be_left_out(version: int) -> None:
    seg = _segment()
    data = encode_segment(seg, format_version=version)
    assert decode_segment_header(data).format_version == version
    back = decode_segment(data)
    assert (back.events, back.keyframe, back.config) == (seg.events, seg.keyframe, seg.config)
    without = decode_segment(data, with_keyframe=False)
    assert without.keyframe is None
    assert without.header.keyframe_at_ms is None
    assert without.events == seg.events


def test_wire_segments_encode_to_the_same_bytes_as_decoded_events() -> None:
    """The sink writes consumed bytes as they are; the file equals the one encode_segment writes."""
    seg = _segment()
    assert seg.keyframe is not None
    heads = [EventHead.of(e) for e in reversed(seg.events)]  # any order: sorted by time when built
    wire = build_wire_segment(
        heads,
        start_ms=seg.header.start_ms,
        end_ms=seg.header.end_ms,
        partitions=seg.header.partitions,
        keyframe=(
            seg.keyframe.at_ms,
            [EventHead.of(e) for e in seg.keyframe.objects.values()],
            [EventHead.of(e) for e in seg.keyframe.lifecycles.values()],
        ),
        config=seg.config,
    )
    assert wire.header == seg.header
    assert encode_wire_segment(wire) == encode_segment(seg)


def test_wire_segments_refuse_events_outside_the_range() -> None:
    seg = _segment()
    with pytest.raises(FormatError, match="not inside"):
        build_wire_segment(
            [EventHead.of(e) for e in seg.events], start_ms=seg.events[-1].ts_ms, end_ms=seg.header.end_ms
        )


def test_a_body_python_cannot_decode_as_is_does_not_cost_its_segment() -> None:
    """The sink stores message bytes after a structural check only, so a body may hold text that is
    not UTF-8 or a list used as a map key; the segment stays readable and the rest intact."""
    seg = _segment()
    heads = [EventHead.of(e) for e in seg.events]
    noted = event_to_wire(seg.events[1])
    noted[6] = {**noted[6], "spec": {**noted[6].get("spec", {}), "note": "Q"}}
    # the note "Q" becomes an invalid UTF-8 byte (not the name: ingest refuses a body whose name is
    # not the one its key names)
    odd = msgpack.packb(noted).replace(b"\xa1Q", b"\xa1\xff", 1)
    weird_key = event_to_wire(seg.events[2])
    weird_key[6] = {**weird_key[6], "spec": {(1, 2): "tuple key"}}
    heads[1] = WireProbe().head(odd)
    heads[2] = WireProbe().head(msgpack.packb(weird_key))
    wire = build_wire_segment(heads, start_ms=seg.header.start_ms, end_ms=seg.header.end_ms)
    back = decode_segment(encode_wire_segment(wire), "odd.kseg")
    assert back.events[0] == seg.events[0]
    assert back.events[1].obj is not None
    assert back.events[1].obj["spec"]["note"] == "\ufffd"
    assert back.events[2].obj is not None
    assert back.events[2].obj["spec"] == {"[1, 2]": "tuple key"}


def test_events_the_c_scan_leaves_to_python_decode_as_the_others() -> None:
    """Decoding builds the events the C scan accepts without checking them again and checks the rest
    in Python: both kinds in one segment come back equal to what was written, bytes included."""
    from pipeline.formats.segment.decode import EventWires
    from pipeline.formats.wire import native

    deep: dict[str, object] = {"leaf": 1}
    for _ in range(70):  # deeper than the C scan reads: the Python rules decide
        deep = {"x": deep}
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}
    nested = {**plain, "metadata": {"name": "b", "namespace": "ns"}, "data": deep}
    written = [
        Event.applied(1_000, key_of(plain), plain, 7),
        Event.applied(1_001, key_of(nested), nested, 8),
        Event.pod_lifecycle(
            1_002,
            object_key("v1", "Pod", "ns", "p"),
            owner_key=key_of(plain),
            pod_spec_hash=3,
            start_ms=1_002,
            end_ms=None,
        ),
    ]
    wires = [msgpack.packb(event_to_wire(e), use_bin_type=True) for e in written]
    if native.NATIVE:
        _heads, undecided = native.scan(wires)
        assert undecided == [1], "the deep object must be left to Python for this test to mean anything"
    seg = build_segment(written, start_ms=1_000, end_ms=2_000)
    known = EventWires()
    got = decode_segment(encode_segment(seg), wires=known)
    assert list(got.events) == written
    assert [known.get(e) for e in got.events] == wires
