"""Segment bodies are compressed with tuned zstd parameters (``ZSTD_MIN_MATCH``, ``ZSTD_WINDOW_LOG``).

The parameters change only how the compressor searches: the body stays one standard zstd frame, so
files written with them read back through :func:`decode_segment`, files written before them (plain
``ZstdCompressor(level=...)``) still read, and a default streaming zstd decoder reads the frame within
its window limit.
"""

from __future__ import annotations

import random
import struct
import uuid
import zlib

import pytest
import zstandard

from pipeline.formats.segment.content import Keyframe, Segment, build_segment, build_wire_segment
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import (
    ZSTD_LEVEL,
    ZSTD_MIN_MATCH,
    ZSTD_WINDOW_LOG,
    encode_segment,
    encode_wire_segment,
)
from pipeline.formats.wire.codec import encode_event
from pipeline.formats.wire.probe import WireProbe
from pipeline.model.events import Event
from pipeline.model.keys import key_of, object_key
from pipeline.model.tracer_config import TracerConfig

START = 1_750_000_000_000
SINK_LEVEL = 3  # SinkSettings.zstd_level
DEFAULT_DECODER_MAX_WINDOW_LOG = 27  # zstd's ZSTD_WINDOWLOG_LIMIT_DEFAULT
_PREAMBLE = struct.Struct(">4sHII")  # the layout in segment.py's docstring
_BODY_PREAMBLE = struct.Struct(">II")


def _deployment(ns: str, name: str, replicas: int, tag: int) -> dict[str, object]:
    labels = {"app": name, "team": ns}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": {}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": name,
                            "image": f"registry.example.com/{ns}/{name}:1.{tag}.0",
                            "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(6)],
                            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                        }
                    ],
                    "restartPolicy": "Always",
                },
            },
        },
    }


def _events(deployments: int, updates: int, seed: int = 3) -> list[Event]:
    """Deployment updates and their pods' lifecycles, in a shape close to the sink's input."""
    rng = random.Random(seed)
    out: list[Event] = []
    for d in range(deployments):
        ns, name = f"team-{d % 5}", f"svc-{d}"
        ts = START + rng.randint(0, 10_000)
        for tag in range(updates):
            obj = _deployment(ns, name, rng.randint(1, 4), tag)
            out.append(Event.applied(ts, key_of(obj), obj, rng.getrandbits(63)))
            for p in range(2):
                start = ts + rng.randint(100, 2_000)
                out.append(
                    Event.pod_lifecycle(
                        start,
                        object_key("v1", "Pod", ns, f"{name}-{tag}-{p}"),
                        owner_key=key_of(obj),
                        pod_spec_hash=rng.getrandbits(63),
                        start_ms=start,
                        end_ms=None,
                        uid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                    )
                )
            ts += rng.randint(1_000, 30_000)
    return sorted(out, key=lambda e: e.ts_ms)


def _segment(deployments: int = 40, updates: int = 6) -> Segment:
    events = _events(deployments, updates)
    base = _deployment("team-0", "base", 1, 0)
    keyframe = Keyframe(START - 1, {key_of(base): Event.applied(START - 1, key_of(base), base, 7)})
    return build_segment(
        events,
        start_ms=START - 1,
        end_ms=events[-1].ts_ms + 1,
        keyframe=keyframe,
        config=TracerConfig.default(),
    )


def _body(data: bytes) -> tuple[int, bytes]:
    """Where a segment file's body starts and the body (one zstd frame)."""
    start = _PREAMBLE.size + _PREAMBLE.unpack_from(data)[2] + _BODY_PREAMBLE.size
    return start, data[start:]


def _with_body(data: bytes, body: bytes) -> bytes:
    """``data`` with its body replaced (length and CRC-32 updated), as another writer would produce it."""
    start, _ = _body(data)
    preamble = start - _BODY_PREAMBLE.size
    return data[:preamble] + _BODY_PREAMBLE.pack(len(body), zlib.crc32(body)) + body


def _plain(level: int) -> zstandard.ZstdCompressor:
    """How segment bodies were compressed before the tuned parameters."""
    return zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True)


def _assert_same(a: Segment, b: Segment) -> None:
    assert (a.header, a.events, a.keyframe, a.config) == (b.header, b.events, b.keyframe, b.config)


def test_the_parameters_are_valid_zstd_parameters() -> None:
    assert 3 <= ZSTD_MIN_MATCH <= 7  # ZSTD_MINMATCH_MIN / MAX
    assert ZSTD_WINDOW_LOG <= DEFAULT_DECODER_MAX_WINDOW_LOG


@pytest.mark.parametrize("level", [1, SINK_LEVEL, ZSTD_LEVEL, 19])
def test_a_segment_written_with_the_tuned_parameters_round_trips(level: int) -> None:
    seg = _segment()
    data = encode_segment(seg, level)
    _assert_same(decode_segment(data), seg)
    _, body = _body(data)
    frame = zstandard.get_frame_parameters(body)
    assert frame.has_checksum
    raw = zstandard.ZstdDecompressor().decompress(body)
    assert frame.content_size == len(raw)
    # the tuned parameters are in use: the same body compresses differently with the plain level
    assert body != _plain(level).compress(raw)


def test_the_sink_path_round_trips_with_the_tuned_parameters() -> None:
    seg = _segment()
    probe = WireProbe()
    heads = [probe.head(encode_event(e)) for e in seg.events]
    wire = build_wire_segment(heads, start_ms=seg.header.start_ms, end_ms=seg.header.end_ms)
    data = encode_wire_segment(wire, SINK_LEVEL)
    back = decode_segment(data)
    assert back.events == seg.events
    assert back.header == wire.header


@pytest.mark.parametrize("level", [SINK_LEVEL, ZSTD_LEVEL])
def test_a_segment_written_with_the_previous_parameters_still_decodes(level: int) -> None:
    seg = _segment()
    new = encode_segment(seg, level)
    _, body = _body(new)
    raw = zstandard.ZstdDecompressor().decompress(body)
    old = _with_body(new, _plain(level).compress(raw))
    assert old != new
    _assert_same(decode_segment(old, "old.kseg"), seg)
    _assert_same(
        decode_segment(old, "old.kseg", with_keyframe=False), decode_segment(new, with_keyframe=False)
    )


def test_the_tuned_parameters_make_a_realistic_body_smaller_at_the_sink_level() -> None:
    """Sizes only (times are measured side by side in ``bench/bench_codec.py``). The parameters were
    chosen on version-2 bodies (events whole); on delta-coded ones they are within 1 % of the plain
    level either way (``bench/bench_codec.py`` reports both)."""
    data = encode_segment(_segment(deployments=120, updates=8), SINK_LEVEL, format_version=2)
    _, body = _body(data)
    raw = zstandard.ZstdDecompressor().decompress(body)
    assert len(body) < len(_plain(SINK_LEVEL).compress(raw))


def test_a_body_larger_than_the_window_is_read_by_a_window_limited_streaming_decoder() -> None:
    """Bodies over 2**ZSTD_WINDOW_LOG bytes declare that window: what a streaming decoder must buffer."""
    events = _events(deployments=400, updates=30)
    seg = build_segment(events, start_ms=START, end_ms=events[-1].ts_ms + 1)
    data = encode_segment(seg, SINK_LEVEL, format_version=2)  # events whole: a body this large quickly
    _, body = _body(data)
    frame = zstandard.get_frame_parameters(body)
    assert frame.content_size > 1 << ZSTD_WINDOW_LOG
    assert frame.window_size == 1 << ZSTD_WINDOW_LOG
    limited = zstandard.ZstdDecompressor(max_window_size=1 << ZSTD_WINDOW_LOG)
    assert limited.stream_reader(body).read() == zstandard.ZstdDecompressor().decompress(body)
    assert decode_segment(data).events == seg.events
