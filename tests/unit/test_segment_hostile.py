"""Hostile segment files (issue 43): a format-3 delta table that rebuilds to far more than the file
holds is refused before it is built, and whatever the bytes, a reader meets only kubetape's own
FormatError (the CLI's exit 2 with the file named), never a crash."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
import zlib
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.formats.segment import delta, delta_decode
from pipeline.formats.segment.content import Keyframe, Segment, build_segment
from pipeline.formats.segment.decode import EventWires, decode_segment
from pipeline.formats.segment.encode import _file_bytes, concatenated_wires, encode_segment
from pipeline.formats.segment.header import BODY_PREAMBLE, MAGIC, PREAMBLE
from pipeline.formats.segment.limits import DecodeLimits
from pipeline.model.errors import FormatError
from pipeline.model.events import Event
from pipeline.model.keys import key_of, object_key
from tests.peak_memory import REPO_ROOT, peak_growth

START = 1_750_000_000_000
_SAME_AS_BASE = 1 | (delta_decode._F_OBJ_SAME | delta_decode._F_SH_SAME | delta_decode._F_UID_SAME) << 3
"""An APPLIED row whose UID, spec hash and object are its base's: a few bytes whatever the object."""


def _delta_file(evs: list[Event], table: dict[str, Any], *, rows: int, event_bytes: int) -> bytes:
    """A format-3 file of ``table`` (``rows`` APPLIED rows), written by the encoder's own framing."""
    seg = build_segment(evs, start_ms=START, end_ms=START + len(evs))
    header = dataclasses.replace(
        seg.header,
        format_version=3,
        counts=dataclasses.replace(seg.header.counts, applied=rows),
        event_bytes=event_bytes,
        keyframe_bytes=0,
    )
    body = {"delta": msgpack.packb(table, use_bin_type=True), "keyframe": None, "config": None}
    return _file_bytes(header, body, 19)


def _delta_bomb(rows: int) -> bytes:
    """``rows`` rows that each say "the same object as the base", a 100 KB ConfigMap; the header
    declares honestly what they rebuild to."""
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "big", "namespace": "ns"},
        "data": {"blob": "x" * 100_000},
    }
    base = Event.applied(START, key_of(obj), obj, 1)
    table = delta.encode_events(concatenated_wires([base]), 1, START)
    assert table is not None
    more = rows - 1
    table.update(
        n=rows,
        op=table["op"] + [_SAME_AS_BASE] * more,
        ts=table["ts"] + [0] * more,
        key=table["key"] + [0] * more,
        rv=table["rv"] * rows,
    )
    return _delta_file([base], table, rows=rows, event_bytes=len(concatenated_wires([base])) * rows)


def test_a_delta_bomb_is_refused_before_it_is_rebuilt(tmp_path: Path) -> None:
    """A file of a few hundred bytes declaring 200 MB of events: it used to be rebuilt whole (the
    decoder grew by 785 MiB). Measured in a process of its own (tests/peak_memory.py), after its
    imports, at the default limits."""
    path = tmp_path / "bomb.kseg"
    path.write_bytes(_delta_bomb(2000))
    assert len(path.read_bytes()) < 1000
    decoding = peak_growth(
        f"decode_segment(data, {str(path)!r}, limits=DecodeLimits())",
        prepare=f"""
            from pathlib import Path
            from pipeline.formats.segment.decode import decode_segment
            from pipeline.formats.segment.limits import DecodeLimits
            data = Path({str(path)!r}).read_bytes()
        """,
    )
    assert decoding.error.startswith(
        f"FormatError: {path}: the header declares events and keyframe of 200"
    ), decoding
    assert "over the limit of 1000x" in decoding.error
    assert "$KUBETAPE_MAX_INFLATE_RATIO" in decoding.error
    assert decoding.grown_kib < 60 << 10, decoding


def test_a_trace_over_the_rebuild_budget_reads_once_the_limit_named_is_raised() -> None:
    """What the error says to do works: a small bomb (2 MB from a few hundred bytes) is refused at the
    defaults and read with the ratio raised; the size limit is named when it is the one exceeded."""
    data = _delta_bomb(20)
    with pytest.raises(FormatError, match=r"bomb: the header declares .* over the limit of 1000x"):
        decode_segment(data, "bomb", limits=DecodeLimits())
    raised = DecodeLimits.from_env({"KUBETAPE_MAX_INFLATE_RATIO": "100000"})
    assert len(decode_segment(data, "bomb", limits=raised).events) == 20
    small = DecodeLimits(max_inflated_bytes=1 << 20, max_ratio=100_000)
    with pytest.raises(FormatError, match=r"over the limit of 1048576 \(raise \$KUBETAPE_MAX_INFLATED_BYTES"):
        decode_segment(data, "bomb", limits=small)


def _time_step_overflow() -> bytes:
    """Two ConfigMaps whose second row steps the time by 2**64-1 (no event time is that large)."""
    objs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": "ns"}}
        for i in range(2)
    ]
    evs = [Event.applied(START + i, key_of(o), o, 1) for i, o in enumerate(objs)]
    table = delta.encode_events(concatenated_wires(evs), 2, START)
    assert table is not None
    table["ts"][1] = (1 << 64) - 1
    return _delta_file(evs, table, rows=2, event_bytes=len(concatenated_wires(evs)))


TRANSFORM = REPO_ROOT / "examples" / "transforms" / "obfuscate-names.yaml"


@pytest.mark.parametrize("command", [["validate"], ["transform", str(TRANSFORM), "-o", "out.kseg"]])
def test_a_time_step_out_of_range_is_a_clear_error_of_the_cli(tmp_path: Path, command: list[str]) -> None:
    """It escaped as an OverflowError: a traceback and exit 1."""
    path = tmp_path / "step.kseg"
    path.write_bytes(_time_step_overflow())
    child = subprocess.run(
        [sys.executable, "-m", "services.cli", command[0], str(path), *command[1:]],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == 2, child.stderr
    assert "Traceback" not in child.stderr
    assert f"{path}: event #1: event time step '18446744073709551615'" in child.stderr


# ---- whatever the bytes: a Segment or a FormatError --------------------------------------------------


def _valid_segment() -> Segment:
    """Events of every type, versions of one object (patched rows), a keyframe with every list."""
    uid = str(uuid.UUID(int=7))
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]},
            "status": {"phase": phase, "restarts": [i, i + 1]},
        }
        for i, phase in enumerate(["Pending", "Running", "Running"])
    ]
    key = key_of(pods[0])
    owner = object_key("apps/v1", "Deployment", "ns", "web")
    evs = [
        Event.applied(START + i, key, p, 11, uid=uid, resource_version=str(100 + i))
        for i, p in enumerate(pods)
    ]
    evs += [
        Event.pod_lifecycle(START + 3, key, owner_key=owner, pod_spec_hash=5, start_ms=START, end_ms=None),
        Event.pod_lifecycle(
            START + 4, key, owner_key=owner, pod_spec_hash=5, start_ms=START, end_ms=START + 4
        ),
        Event.gap(START + 5, key, reason="relist", from_rv="100", to_rv="102"),
        Event.deleted(START + 6, key, pods[-1], 11, uid=uid),
    ]
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}
    lifecycle = Event.pod_lifecycle(
        START - 1, key, owner_key=owner, pod_spec_hash=5, start_ms=START - 9, end_ms=None
    )
    keyframe = Keyframe(
        START,
        {key_of(other): Event.applied(START - 1, key_of(other), other, 3, uid=uid)},
        {key: lifecycle},
        {key_of(other): Event.deleted(START - 2, key_of(other), other, 3)},
    )
    return build_segment(evs, start_ms=START, end_ms=START + 7, keyframe=keyframe)


VALID = {version: encode_segment(_valid_segment(), format_version=version) for version in (2, 3)}


def _parts(data: bytes) -> tuple[int, bytes, bytes]:
    """A valid file's format version, header bytes and inflated body."""
    _, version, header_len, _ = PREAMBLE.unpack_from(data)
    header = data[PREAMBLE.size : PREAMBLE.size + header_len]
    body = data[PREAMBLE.size + header_len + BODY_PREAMBLE.size :]
    return version, header, zstandard.ZstdDecompressor().decompress(body)


def _file(version: int, header: bytes, raw_body: bytes) -> bytes:
    """A file of these parts with lengths and checksums that match: a mutation reaches the decoder."""
    body = zstandard.ZstdCompressor(write_content_size=True).compress(raw_body)
    return b"".join(
        (
            PREAMBLE.pack(MAGIC, version, len(header), zlib.crc32(header)),
            header,
            BODY_PREAMBLE.pack(len(body), zlib.crc32(body)),
            body,
        )
    )


def _mutated(data: bytes, draw: st.DataObject) -> bytes:
    """``data`` with a few bytes replaced, inserted or removed, or cut short."""
    out = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4), label="edits")):
        if not out:
            break
        at = draw.draw(st.integers(0, max(len(out) - 1, 0)), label="at")
        edit = draw.draw(st.sampled_from(["replace", "insert", "delete", "truncate", "flip"]), label="edit")
        if edit == "replace":
            out[at] = draw.draw(st.integers(0, 255), label="byte")
        elif edit == "flip":
            out[at] ^= 1 << draw.draw(st.integers(0, 7), label="bit")
        elif edit == "insert":
            out[at:at] = draw.draw(st.binary(min_size=1, max_size=9), label="inserted")
        elif edit == "delete":
            del out[at : at + draw.draw(st.integers(1, 9), label="deleted")]
        else:
            del out[at:]
    return bytes(out)


def _decodes_or_refuses(data: bytes) -> None:
    """Read as every reader reads: whole, and as the export does (bodies left to the C scan's
    skeletons, ``pipeline/formats/wire/_wirescan.c``)."""
    for wires in (None, EventWires(bodies=False)):
        try:
            decode_segment(data, "fuzzed", wires=wires)
        except FormatError as exc:
            message = str(exc)
        else:
            continue
        assert message.startswith("fuzzed"), message  # the file is named


_FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_N", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@_FUZZ
@given(version=st.sampled_from([2, 3]), part=st.sampled_from(["file", "header", "body"]), data=st.data())
def test_mutated_bytes_of_a_valid_segment_only_ever_raise_format_error(
    version: int, part: str, data: st.DataObject
) -> None:
    """``file``: the bytes as stored (most end at a checksum); ``header`` and ``body``: the header or
    the inflated body mutated behind valid lengths and checksums, so the mutation is decoded."""
    valid = VALID[version]
    if part == "file":
        _decodes_or_refuses(_mutated(valid, data))
        return
    v, header, body = _parts(valid)
    if part == "header":
        header = _mutated(header, data)
    else:
        body = _mutated(body, data)
    _decodes_or_refuses(_file(v, header, body))


_EDGES = st.sampled_from([-(1 << 63), -1, 0, 1, 1 << 32, (1 << 63) - 1, (1 << 64) - 1])
_INTS = _EDGES | st.integers(-(1 << 63), (1 << 64) - 1)
"""Integers msgpack packs, and their edges."""
_MSGPACK_VALUES = st.recursive(
    _INTS | st.none() | st.booleans() | st.floats() | st.text(max_size=8) | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4) | _INTS, inner, max_size=4)
    ),
    max_leaves=12,
)


_WHERE = st.sampled_from(["delta"] * 3 + ["objects_delta", "lifecycles_delta", "tombstones_delta"])
"""The events' table three times out of four: the keyframe's lists are read by the same code."""
_CHANGES = st.lists(
    st.tuples(
        _WHERE,
        st.sampled_from(["n", *delta_decode._COLUMNS]),
        st.none() | st.integers(0, 15),  # a row's value (modulo the column's length), or the column whole
        st.one_of(_EDGES, _MSGPACK_VALUES),
    ),
    min_size=1,
    max_size=3,
)


@_FUZZ
@given(changes=_CHANGES)
@example(changes=[("delta", "ts", 1, (1 << 64) - 1)])  # escaped as an OverflowError
@example(changes=[("lifecycles_delta", "st", 0, -(1 << 63))])
def test_any_value_in_any_delta_column_only_ever_raises_format_error(
    changes: list[tuple[str, str, int | None, Any]],
) -> None:
    """Values of another type or range where a delta table's rows read them, a few at a time; a column
    the table does not have is added."""
    version, header, raw_body = _parts(VALID[3])
    body = msgpack.unpackb(raw_body, raw=False, strict_map_key=False)
    kf = body["keyframe"]
    places = {"delta": body, **{name: kf for name in kf if name.endswith("_delta")}}  # map holding each
    tables: dict[str, dict[Any, Any]] = {}
    for where, column, row, value in changes:
        table = tables.setdefault(
            where, msgpack.unpackb(places[where][where], raw=False, strict_map_key=False)
        )
        cell = table.get(column)
        if row is None or type(cell) is not list or not cell:
            table[column] = value
        else:
            cell[row % len(cell)] = value
    for where, table in tables.items():
        places[where][where] = msgpack.packb(table, use_bin_type=True)
    _decodes_or_refuses(_file(version, header, msgpack.packb(body, use_bin_type=True)))
