"""Delta-coded segments (format version 3): exact to the byte, older versions still read, hostile
deltas and padded bodies refused before they cost memory."""

from __future__ import annotations

import dataclasses
import struct
import uuid
import zlib
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.formats.segment import delta, delta_decode, delta_patch
from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.decode import EventWires, decode_segment, read_segment
from pipeline.formats.segment.encode import concatenated_wires, encode_segment
from pipeline.formats.segment.header import SEGMENT_FORMAT_VERSION, decode_segment_header
from pipeline.formats.wire.codec import encode_event
from pipeline.model.errors import FormatError
from pipeline.model.events import Event, EventType
from pipeline.model.keys import key_of, object_key
from pipeline.model.tracer_config import TracerConfig
from tests.peak_memory import peak_growth
from tests.unit.test_model_events import JSON, NAMES, events

DATA = Path(__file__).parent / "data"
START = 1_750_000_000_000


def _pod(name: str, phase: str, restarts: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}], "nodeName": "node-1"},
        "status": {"phase": phase, "containerStatuses": [{"name": "c", "restartCount": restarts}]},
    }


def _history() -> list[Event]:
    """A pod written again and again with one field changed, a lifecycle, a delete: what deltas are for."""
    uid = str(uuid.UUID(int=7))
    out = []
    for i, phase in enumerate(["Pending", "Running", "Running", "Running", "Succeeded"]):
        obj = _pod("p", phase, restarts=i)
        out.append(Event.applied(START + i, key_of(obj), obj, 11, resource_version=str(100 + i), uid=uid))
    owner = object_key("apps/v1", "Deployment", "ns", "web")
    for end in (None, START + 9):
        out.append(
            Event.pod_lifecycle(
                START + 9, key_of(obj), owner_key=owner, pod_spec_hash=5, start_ms=START, end_ms=end
            )
        )
    out.append(Event.deleted(START + 10, key_of(obj), obj, 11, uid=uid))
    return out


def _round_trip(evs: list[Event]) -> None:
    seg = build_segment(
        evs,
        start_ms=min((e.ts_ms for e in evs), default=0),
        end_ms=max((e.ts_ms for e in evs), default=0) + 1,
    )
    v2, v3 = EventWires(), EventWires()
    old = decode_segment(encode_segment(seg, format_version=2), wires=v2)
    new = decode_segment(encode_segment(seg, format_version=3), wires=v3)
    assert (new.events, new.keyframe) == (old.events, old.keyframe) == (seg.events, seg.keyframe)
    assert new.header == dataclasses.replace(seg.header, format_version=3)
    assert old.header == seg.header  # format 2 is what writers write by default
    assert (
        [v3.get(e) for e in new.events]
        == [v2.get(e) for e in old.events]
        == [encode_event(e) for e in seg.events]
    )


def test_versions_after_the_first_are_stored_as_patches_and_read_back_exactly() -> None:
    evs = _history()
    _round_trip(evs)
    table = delta.encode_events(concatenated_wires(evs), len(evs), START)
    assert table is not None
    assert "raw" not in table
    patches = [p for p in table["obj"] if type(p) is list]
    assert len(patches) == 4  # every version after the first, and the delete, carry a patch
    whole = len(msgpack.packb(evs[0].obj))
    assert all(len(msgpack.packb(p)) * 2 < whole for p in patches)


@given(st.lists(events(), max_size=12), st.data())
@settings(max_examples=150, deadline=None)
def test_any_history_round_trips_byte_for_byte(evs: list[Event], data: st.DataObject) -> None:
    """Events whose later versions repeat an earlier key with a changed object, as deltas are coded."""
    more = list(evs)
    for e in evs:
        if e.type is EventType.APPLIED and data.draw(st.booleans()):
            obj = dict(e.obj or {})
            obj[data.draw(st.sampled_from(["spec", "status", "metadata"]))] = data.draw(JSON)
            more.append(
                dataclasses.replace(
                    e,
                    ts_ms=e.ts_ms + 1,
                    obj=obj,
                    resource_version=data.draw(
                        st.sampled_from(["", "0", "007", "12", "99999999999999999999"])
                    ),
                )
            )
    _round_trip(more)


def _typed(value: Any) -> Any:
    """``value`` with the type of every part (and a float's bits): what msgpack tells apart and Python's
    ``==`` does not (``False == 0 == 0.0 == -0.0``)."""
    if type(value) is dict:
        return ("map", [(k, _typed(v)) for k, v in value.items()])
    if type(value) is list:
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, value.hex() if type(value) is float else value)


def _hides_a_type_change(base: Any, new: Any) -> bool:
    """Whether a part of ``new`` equals its place in ``base`` for Python but differs in type or float
    bits: :func:`~pipeline.formats.segment.delta_patch.diff` compares only the top types (see
    ``_same``), and leaves such a part to the encoder's byte check of every row, which keeps the row
    raw."""
    if type(base) is not type(new):
        return False
    if base == new:
        return bool(_typed(base) != _typed(new))
    if type(base) is dict:
        return any(_hides_a_type_change(base[k], v) for k, v in new.items() if k in base)
    if type(base) is list and len(base) == len(new):
        return any(_hides_a_type_change(x, y) for x, y in zip(base, new, strict=True))
    return False


@given(JSON, JSON)
def test_a_patch_rebuilds_the_new_value_exactly(a: Any, b: Any) -> None:
    for base, new in ((a, b), ({"k": a, "x": 1}, {"k": b, "x": 1}), ([a, 1, 2], [b, 1, 2])):
        got = delta_patch.apply_patch(base, delta_patch.diff(base, new), "test")
        assert got == new
        if not _hides_a_type_change(base, new):
            assert msgpack.packb(got) == msgpack.packb(new)


def test_a_change_of_type_alone_is_left_to_the_encoders_check_of_the_row() -> None:
    """``[False]`` and ``[0]`` are equal for Python: the patch keeps the base's, and the row that would
    rebuild to other bytes is stored raw, so the segment still reads back byte for byte."""
    base, new = [[False, None]], [[0, None]]
    assert delta_patch.apply_patch(base, delta_patch.diff(base, new), "test") == [[False, None]]
    key = object_key("v1", "ConfigMap", "ns", "c")
    versions = [{"kind": "ConfigMap", "data": value} for value in (base, new)]
    evs = [Event.applied(START + i, key, obj, 1) for i, obj in enumerate(versions)]
    table = _table(evs)
    assert table["op"][1] == 0  # the second version raw
    assert _decode(table, 2) == concatenated_wires(evs)


def test_bytes_another_encoder_wrote_are_kept_as_they_are() -> None:
    """Non-canonical msgpack (a small int as a uint64, text that is not UTF-8) is stored raw, not rebuilt."""
    e = _history()[0]
    fields = [1, 1, e.ts_ms, e.key, e.uid, e.resource_version, e.obj]
    odd = b"\x98" + b"".join(msgpack.packb(f) for f in fields) + b"\xcf" + struct.pack(">Q", 11)
    table = delta.encode_events(odd, 1, START)
    assert table is not None
    assert table["raw"] == [odd]
    assert delta_decode.decode_events(msgpack.packb(table), 1, START, len(odd), "t") == odd
    assert delta.encode_events(b"\x91\xa1\xff", 1, START) is None  # invalid UTF-8: the blob is kept whole
    true_version = b"\x98\xc3" + b"".join(msgpack.packb(f) for f in [*fields[1:], 11])  # True, not 1
    table = delta.encode_events(true_version, 1, START)
    assert table is not None
    assert table["raw"] == [true_version]
    upper = msgpack.packb([1, 1, e.ts_ms, e.key, e.uid.upper() or "A" * 36, "0", None, 1])
    table = delta.encode_events(upper, 1, START)
    assert table is not None
    assert delta_decode.decode_events(msgpack.packb(table), 1, START, len(upper), "t") == upper


def _table(evs: list[Event]) -> dict[str, Any]:
    table = delta.encode_events(concatenated_wires(evs), len(evs), START)
    assert table is not None
    return table


def _decode(table: dict[str, Any], n: int, max_bytes: int = 1 << 20) -> bytes:
    return delta_decode.decode_events(msgpack.packb(table), n, START, max_bytes, "seg: event")


def test_a_patch_naming_a_missing_base_is_refused_before_it_is_applied() -> None:
    evs = _history()[:2]
    table = _table(evs)
    table["op"][0] |= delta_decode._F_OBJ_PATCH << 3  # the first version claims to patch a base
    with pytest.raises(
        FormatError, match=r"seg: event #0: a delta of 'core/Pod/ns/p' names a base the segment does not hold"
    ):
        _decode(table, 2)


def test_a_reference_to_a_later_or_unknown_key_is_refused_so_no_cycle_can_be_written() -> None:
    """Bases are implicit (the latest earlier row of the key): a row can only name keys met before it."""
    evs = _history()[:2]
    table = _table(evs)
    table["key"][0] = 1  # the first row pointing at itself / the next row
    with pytest.raises(FormatError, match=r"#0: key reference 1 names no earlier key \(0 known\)"):
        _decode(table, 2)


def test_a_patch_that_does_not_fit_its_base_is_refused() -> None:
    evs = _history()[:2]
    table = _table(evs)
    table["obj"][1] = [1, {}, ["no-such-field"]]
    with pytest.raises(FormatError, match="deletes key 'no-such-field', which the base lacks"):
        _decode(table, 2)
    table["obj"][1] = [2, {0: [0, 1]}]
    with pytest.raises(FormatError, match="a list patch does not apply to a base dict"):
        _decode(table, 2)
    deep_base: Any = 0
    deep: list[Any] = [0, 1]
    for _ in range(delta_patch.MAX_PATCH_DEPTH + 2):
        deep_base, deep = {"spec": deep_base}, [1, {"spec": deep}, []]
    with pytest.raises(FormatError, match="nested deeper than 64 levels"):
        delta_patch.apply_patch(deep_base, deep, "deep")


def test_a_lifecycle_stores_its_owner_as_a_key_its_hash_once_and_its_times_as_offsets() -> None:
    evs = _history()
    table = _table(evs)
    assert table["psh"] == [[5], 0]  # the second lifecycle names the first one's hash
    assert table["st"] == [9, 9]  # both seen 9 ms after the start
    assert table["en"] == [None, 0]  # the second at the end
    assert table["own"] == [evs[5].owner_key, 1]  # the owner is met as a key, then named by its index
    assert _decode(table, len(evs)) == concatenated_wires(evs)


def test_a_lifecycle_naming_an_unknown_owner_or_hash_is_refused() -> None:
    evs = _history()[5:7]
    for column, value, message in (
        ("own", [3, 1], r"#0: key reference 3 names no earlier key \(1 known\)"),
        ("psh", [2, 0], r"#0: spec hash reference 2 names no earlier hash \(0 known\)"),
        ("psh", [[True], 0], r"#0: spec hash reference \[True\] names no earlier hash"),
        ("en", [None, (1 << 64) - 1], r"#1: a lifecycle time offset 18446744073709551615 is not a whole"),
    ):
        table = _table(evs)
        table[column] = value
        with pytest.raises(FormatError, match=message):
            _decode(table, 2)


def test_rows_that_rebuild_to_more_than_the_header_declares_are_refused_as_they_grow() -> None:
    """An absurd size: a few bytes of "same as the base" rows repeating a large object."""
    big = _pod("p", "Running")
    big["spec"]["blob"] = "x" * 100_000
    evs = [Event.applied(START, key_of(big), big, 1)]
    table = _table(evs)
    n = 1000
    table.update(n=n, op=table["op"] * n, ts=table["ts"] + [0] * (n - 1), key=table["key"] + [0] * (n - 1))
    table["op"][1:] = [
        1 | (delta_decode._F_OBJ_SAME | delta_decode._F_SH_SAME | delta_decode._F_UID_SAME) << 3
    ] * (n - 1)
    table["rv"] = table["rv"] * n
    with pytest.raises(
        FormatError, match=r"rebuild to more than the 1000000 bytes the header declares \(at row #9\)"
    ):
        _decode(table, n, max_bytes=1_000_000)


def _file(header: dict[str, Any], body: bytes, version: int) -> bytes:
    raw: bytes = msgpack.packb(header)
    return b"".join(
        (
            struct.pack(">4sHII", b"KTSG", version, len(raw), zlib.crc32(raw)),
            raw,
            struct.pack(">II", len(body), zlib.crc32(body)),
            body,
        )
    )


@pytest.mark.parametrize("version", [2, 3])
def test_a_padded_body_is_refused_before_it_costs_more_than_the_file(version: int, tmp_path: Path) -> None:
    """A 67 KB file: a body inflating to 50 MB of tiny items, padded with random bytes so that the ratio
    stays under the limit. It used to inflate and peak at 445 MiB before it was refused. Measured in a
    process of its own (tests/peak_memory.py): this one peaked at 400 MB building the bomb."""
    import random

    bomb = msgpack.packb({"events": [0] * 50_000_000, "pad": random.Random(1).randbytes(60_000)})
    body = zstandard.ZstdCompressor(level=19, write_content_size=True).compress(bomb)
    header = {
        "v": version,
        "kind": "segment",
        "start_ms": 0,
        "end_ms": 1,
        "partitions": [],
        "counts": [3, 0, 0, 0],
        "keyframe": [None, 0, 0],
    }
    if version == 3:
        header["sizes"] = [900, 0]
    data = _file(header, body, version)
    assert 60_000 < len(data) < 70_000
    assert len(bomb) < 1000 * len(body)  # under the ratio limit
    (tmp_path / "padded.kseg").write_bytes(data)
    decoding = peak_growth(
        'decode_segment(data, "padded")',
        prepare=f"""
            from pathlib import Path
            from pipeline.formats.segment.decode import decode_segment
            data = Path({str(tmp_path / "padded.kseg")!r}).read_bytes()
        """,
    )
    expected = "more than its header declares" if version == 3 else "exceeds max_array_len"
    assert decoding.error.startswith("FormatError: "), decoding
    assert expected in decoding.error, decoding
    # the 50 MB inflated at most, never its items
    assert decoding.grown_kib < (60 << 10 if version == 2 else 4 << 10), decoding


def test_more_events_than_the_header_counts_stop_the_reading_at_once() -> None:
    evs = _history()
    seg = build_segment(evs, start_ms=START, end_ms=START + 11)
    data = encode_segment(seg, format_version=2)
    header = {
        "v": 2,
        "kind": "segment",
        "start_ms": START,
        "end_ms": START + 11,
        "partitions": [],
        "counts": [1, 0, 0, 0],
        "keyframe": [None, 0, 0],
    }
    body = zstandard.ZstdCompressor(write_content_size=True).compress(
        msgpack.packb({"events": concatenated_wires(evs), "config": None})
    )
    with pytest.raises(FormatError, match="more events than the 1 the header counts"):
        decode_segment(_file(header, body, 2), "many")
    assert decode_segment(data).events == seg.events


def test_older_segments_still_read_and_inspect_shows_the_encoding() -> None:
    old = read_segment(DATA / "segment-v2.kseg")
    assert old.header.format_version == 2
    rewritten = decode_segment(encode_segment(old, format_version=SEGMENT_FORMAT_VERSION))
    assert rewritten.header.format_version == SEGMENT_FORMAT_VERSION == 3
    assert (rewritten.events, rewritten.keyframe, rewritten.config) == (old.events, old.keyframe, old.config)
    header = decode_segment_header(encode_segment(old, format_version=3))
    assert header.event_bytes == len(concatenated_wires(old.events))


def test_inspect_reports_the_encoding_and_the_ratio(tmp_path: Path) -> None:
    from pipeline.formats.inspect import inspect_file

    evs = _history()
    path = tmp_path / "s.kseg"
    path.write_bytes(
        encode_segment(
            build_segment(evs, start_ms=START, end_ms=START + 11, config=TracerConfig.default()),
            format_version=3,
        )
    )
    details = inspect_file(path).to_json()["details"]
    assert details["encoding"] == "delta"
    assert details["event_bytes"] == len(concatenated_wires(evs))
    assert 0 < details["size_vs_events"] < 1


def test_names_keep_their_order_and_new_keys_append() -> None:
    """A map whose keys are reordered is replaced, not patched (the order is part of the bytes)."""
    a, b = {"x": 1, "y": 2}, {"y": 2, "x": 1}
    assert delta_patch.diff(a, b) == [0, b]
    assert delta_patch.diff(a, {"x": 1, "y": 2, "z": 3}) == [1, {"z": [0, 3]}, []]
    # True is not 1 here
    assert delta_patch.diff({"x": 1, "y": True}, {"x": 1, "y": 1}) == [1, {"y": [0, 1]}, []]


@given(st.lists(NAMES, min_size=1, max_size=5))
def test_keys_met_again_are_referenced_by_index(names: list[str]) -> None:
    evs = [
        Event.applied(START + i, key_of(_pod(n, "Running")), _pod(n, "Running"), 1)
        for i, n in enumerate(names)
    ]
    table = _table(evs)
    assert [k for k in table["key"] if type(k) is str] == list(dict.fromkeys(e.key for e in evs))
    assert _decode(table, len(evs)) == concatenated_wires(evs)
