"""Every decoder fed truncated, corrupted or random bytes raises only kubetape's own errors."""

from __future__ import annotations

import contextlib
import functools
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.formats.assemble import assemble_window, simkube_to_trace
from pipeline.formats.inspect import inspect_file
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import SEGMENT_FORMAT_VERSION, decode_segment_header
from pipeline.formats.simkube import read_simkube_trace
from pipeline.formats.wire.codec import decode_event, encode_event
from pipeline.model.errors import FormatError, KubetapeError
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from tests.unit.test_model_events import JSON

DECODERS: dict[str, Callable[[bytes], Any]] = {
    "event": decode_event,
    "segment": decode_segment,
    "segment header": decode_segment_header,
    "simkube trace": read_simkube_trace,
    "simkube trace as kubetape": lambda b: simkube_to_trace(read_simkube_trace(b)),
}


def _samples(simkube_traces: Path) -> dict[str, bytes]:
    cronjob = (simkube_traces / "cronjob.sktrace").read_bytes()
    obj = read_simkube_trace(cronjob).events[1].applied_objs[0]
    trace = assemble_window(None, [Event.applied(1_000, key_of(obj), obj, 1)], 0, 10_000)
    return {
        "event": encode_event(trace.events[0]),
        "segment": encode_segment(trace),
        "simkube trace": cronjob,
        "bare pods": (simkube_traces / "bare-pods.sktrace").read_bytes(),
        "json trace": (simkube_traces / "simkube-trace.json").read_bytes(),
    }


def _only_our_errors(decoder: Callable[[bytes], Any], data: bytes) -> None:
    """Decoding may succeed (a damaged byte can still be valid) or fail, but only with our errors."""
    with contextlib.suppress(KubetapeError):
        decoder(data)


@pytest.mark.parametrize("decoder", list(DECODERS))
def test_every_truncation_of_every_sample_raises_only_our_errors(simkube_traces: Path, decoder: str) -> None:
    for data in _samples(simkube_traces).values():
        for cut in range(len(data)):
            _only_our_errors(DECODERS[decoder], data[:cut])


@pytest.mark.parametrize(
    ("decoder", "sample"),
    [
        ("event", "event"),
        ("segment", "segment"),
        ("simkube trace", "simkube trace"),
        ("simkube trace", "bare pods"),
    ],
)
def test_no_truncated_file_is_mistaken_for_a_whole_one(
    simkube_traces: Path, decoder: str, sample: str
) -> None:
    data = _samples(simkube_traces)[sample]
    for cut in range(len(data)):
        with pytest.raises(FormatError):
            DECODERS[decoder](data[:cut])


def test_a_segment_header_reads_from_a_prefix_or_fails(simkube_traces: Path) -> None:
    data = _samples(simkube_traces)["segment"]
    header = decode_segment(data).header
    for cut in range(len(data)):
        with contextlib.suppress(FormatError):
            assert decode_segment_header(data[:cut]) == header


@settings(max_examples=400)
@given(st.data())
def test_corrupted_bytes_raise_only_our_errors(simkube_traces: Path, data: st.DataObject) -> None:
    samples = _samples(simkube_traces)
    blob = bytearray(samples[data.draw(st.sampled_from(sorted(samples)))])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(blob) - 1))
        blob[position] = data.draw(st.integers(0, 255))
    for decoder in DECODERS.values():
        _only_our_errors(decoder, bytes(blob))


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_our_errors(blob: bytes) -> None:
    for decoder in DECODERS.values():
        _only_our_errors(decoder, blob)


@settings(max_examples=100)
@given(st.data())
def test_inspect_never_lets_a_traceback_out(
    tmp_path_factory: pytest.TempPathFactory, simkube_traces: Path, data: st.DataObject
) -> None:
    samples = _samples(simkube_traces)
    blob = bytearray(samples[data.draw(st.sampled_from(sorted(samples)))])
    blob = blob[: data.draw(st.integers(0, len(blob)))]
    if blob:
        blob[data.draw(st.integers(0, len(blob) - 1))] ^= data.draw(st.integers(1, 255))
    path = tmp_path_factory.mktemp("fuzz") / "damaged.bin"
    path.write_bytes(bytes(blob))
    message = str(path)  # a damaged file may still be readable; then there is nothing to check
    try:
        inspect_file(path)
    except FormatError as exc:
        message = str(exc)
    assert str(path) in message


# ---- damage behind valid checksums (a buggy writer, not a flipped bit) ------------------------------
def _with_body(data: bytes, body: Any) -> bytes:
    """``data`` with its body replaced by ``body``, checksums recomputed."""
    header_len = struct.unpack_from(">I", data, 6)[0]
    compressed: bytes = zstandard.ZstdCompressor().compress(msgpack.packb(body, use_bin_type=True))
    return data[: 14 + header_len] + struct.pack(">II", len(compressed), zlib.crc32(compressed)) + compressed


def _with_header(data: bytes, header: Any) -> bytes:
    header_len = struct.unpack_from(">I", data, 6)[0]
    packed: bytes = msgpack.packb(header, use_bin_type=True)
    return data[:6] + struct.pack(">II", len(packed), zlib.crc32(packed)) + packed + data[14 + header_len :]


@functools.cache
def _segment_of(path: Path, format_version: int = SEGMENT_FORMAT_VERSION) -> bytes:
    return encode_segment(simkube_to_trace(read_simkube_trace(path)), format_version=format_version)


def _body_of(data: bytes) -> Any:
    header_len = struct.unpack_from(">I", data, 6)[0]
    raw = zstandard.ZstdDecompressor().decompress(data[14 + header_len + 8 :])
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


COLUMNS = ["n", "type", "ts", "key", "uid", "rv", "hash", "obj", "owner", "pod_hash", "start", "end", "gap"]
WEIRD = JSON | st.binary(max_size=8) | st.lists(JSON, max_size=3)


def _damaged_wires(blob: bytes, data: st.DataObject) -> Any:
    """A version-2 event list cut, extended, or replaced by any value."""
    how = data.draw(st.sampled_from(["cut", "extend", "replace", "event"]))
    if how == "cut":
        return blob[: data.draw(st.integers(0, max(len(blob) - 1, 0)))]
    if how == "extend":
        return blob + data.draw(st.binary(min_size=1, max_size=16))
    if how == "event":  # one more well-formed msgpack value that is no event
        return blob[: len(blob) // 2] + msgpack.packb(data.draw(WEIRD), use_bin_type=True)
    return data.draw(WEIRD)


@settings(max_examples=300)
@given(st.data())
@pytest.mark.parametrize("format_version", [1, 2])
def test_well_checksummed_but_malformed_bodies_raise_format_errors(
    simkube_traces: Path, format_version: int, data: st.DataObject
) -> None:
    original = _segment_of(simkube_traces / "bare-pods.sktrace", format_version)
    body = _body_of(original)
    target = data.draw(st.sampled_from(["events", "keyframe", "config", "body"]))
    if target == "body":
        body = data.draw(WEIRD)
    elif target == "events" and format_version == 1:
        column = data.draw(st.sampled_from(COLUMNS))
        body["events"][column] = data.draw(WEIRD)
    elif target == "events":
        body["events"] = _damaged_wires(body["events"], data)
    else:
        body[target] = data.draw(
            WEIRD
            | st.fixed_dictionaries(
                {"at_ms": st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1), "objects": WEIRD}
            )
        )
    message = "damaged.kts: (decoded: the damage happened to be valid)"
    try:
        decode_segment(_with_body(original, body), "damaged.kts")
    except FormatError as exc:
        message = str(exc)
    assert message.startswith("damaged.kts: ")


@settings(max_examples=200)
@given(st.data())
def test_well_checksummed_but_malformed_headers_raise_format_errors(
    simkube_traces: Path, data: st.DataObject
) -> None:
    original = _segment_of(simkube_traces / "cronjob.sktrace")
    header = {
        "v": SEGMENT_FORMAT_VERSION,
        "kind": "trace",
        "start_ms": 0,
        "end_ms": 1,
        "partitions": [],
        "counts": [0, 0, 0, 0],
        "keyframe": [None, 0, 0],
    }
    field = data.draw(st.sampled_from(sorted(header)))
    header[field] = data.draw(WEIRD)
    with pytest.raises(FormatError):
        decode_segment(_with_header(original, header), "damaged.kts")
