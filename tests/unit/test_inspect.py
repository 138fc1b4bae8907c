"""``kubetape inspect``: summaries of SimKube traces and kubetape segments, and errors that name the file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline.formats.assemble import assemble_window
from pipeline.formats.inspect import inspect_file
from pipeline.formats.segment.content import Keyframe, build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import PartitionRange
from pipeline.model.errors import FormatError
from pipeline.model.events import Event
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import key_of, kind_key, object_key
from pipeline.model.tracer_config import TracerConfig
from tests.peak_memory import peak_growth


def test_cronjob_trace_summary(simkube_traces: Path) -> None:
    report = inspect_file(simkube_traces / "cronjob.sktrace")
    summary = report.to_json()
    assert summary["format"] == "SimKube trace"
    assert summary["version"] == 2
    assert summary["span_ms"] == 205_000
    assert summary["kinds"] == {"batch/v1.CronJob": {"applied": 1, "deleted": 1}}
    assert summary["objects"] == 1
    assert summary["lifecycles"] == {"owners": 1, "running": 0, "finished": 3}
    assert summary["hashes"]["spec"] == {"checked": 1, "mismatched": [], "unchecked": 0}
    assert summary["warnings"] == []
    json.dumps(summary)  # --json output must serialize
    text = report.render_text()
    assert "cronjob.sktrace: SimKube trace, version 2" in text
    assert "spec hashes:      1 checked, all match" in text
    assert "lifecycle keys:   1 not checked: they belong to owners whose pods the trace does not hold" in text


def test_bare_pods_index_hashes_of_the_recorded_pods_are_explained_not_warned(simkube_traces: Path) -> None:
    """SimKube's own bare-pods example: its index holds SimKube's exact hash of each pod's spec as
    recorded, with ``serviceAccount(Name): default``; the pods were stripped of those fields afterwards.
    Nothing a replay reads is wrong, so inspect says what happened in a note and warns of nothing."""
    report = inspect_file(simkube_traces / "bare-pods.sktrace")
    assert report.lifecycle_hashes.checked == 4
    assert report.lifecycle_hashes.mismatched == ()
    assert report.spec_hashes.checked == 4
    assert len(report.spec_hashes.mismatched) == 4  # not the hash of the pods as they are now
    assert report.spec_hashes.explained == 4  # but of the pods before the service account was removed
    assert report.spec_hashes.unchecked == 12  # index entries of pods not in the window's events
    assert report.warnings == ()
    assert report.notes == (
        "4 index hash(es) are SimKube's hash of the object as recorded, before spec.serviceAccount and "
        "spec.serviceAccountName were removed (edited after recording, as a sanitiser does); replays use "
        "the objects, not these hashes",
    )
    text = report.render_text()
    assert "warning" not in text
    assert "4 checked, 0 match, 4 are of the object before an edit (see the note)" in text
    assert (report.lifecycles_running, report.lifecycles_finished) == (1, 3)


def test_json_traces_are_inspected(simkube_traces: Path) -> None:
    report = inspect_file(simkube_traces / "simkube-trace.json")
    assert report.format == "SimKube trace (JSON)"
    assert report.kinds == {"apps/v1.Deployment": {"applied": 1, "deleted": 1}}


def test_v3_traces_say_their_hashes_are_not_stored(simkube_traces: Path) -> None:
    report = inspect_file(simkube_traces / "simkube-v3-trace.json")
    assert report.version == 3
    assert report.to_json()["hashes"]["spec"] == {"checked": 0, "mismatched": [], "unchecked": 1}
    assert "tracked objects: 1" in report.render_text()


def test_segment_summary(tmp_path: Path) -> None:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "w", "namespace": "d"},
        "spec": {},
    }
    good = Event.applied(5_000, key_of(obj), obj, object_spec_hash(obj))
    stale = Event.applied(6_000, key_of(obj), obj, 12345)
    lifecycle = Event.pod_lifecycle(
        7_000,
        object_key("v1", "Pod", "d", "w-1"),
        owner_key=key_of(obj),
        pod_spec_hash=1,
        start_ms=7_000,
        end_ms=None,
    )
    gap = Event.gap(8_000, kind_key("apps/v1", "Deployment"), reason="410 Gone", from_rv="1", to_rv="9")
    seg = build_segment(
        [good, stale, lifecycle, gap],
        start_ms=1_000,
        end_ms=10_000,
        partitions=[PartitionRange("kubetape.events", 2, 40, 43)],
        keyframe=Keyframe(1_000, {good.key: good}),
        config=TracerConfig.default(),
    )
    path = tmp_path / "p2-40.kts"
    path.write_bytes(encode_segment(seg))
    report = inspect_file(path)
    assert report.format == "kubetape segment"
    assert (report.start_ms, report.end_ms, report.events) == (1_000, 10_000, 4)
    assert report.kinds["apps/v1.Deployment"] == {"applied": 2}
    assert report.spec_hashes.mismatched == ("apps/Deployment/d/w",)
    assert report.details["partitions"] == "kubetape.events[2] 40..43"
    assert "gap marker" in report.render_text()
    assert report.to_json()["lifecycles"] == {"owners": 1, "running": 1, "finished": 0}


def test_assembled_trace_is_labelled_as_trace(tmp_path: Path) -> None:
    path = tmp_path / "window.kts"
    path.write_bytes(encode_segment(assemble_window(None, [], 0, 1000)))
    assert inspect_file(path).format == "kubetape trace"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"hello world", "not a readable msgpack trace"),
        (b"KTSG\x00", "truncated"),
        (b'{"version": 2', "invalid JSON trace"),
        (b"\x93\x01\x02\x03", "not a SimKube trace"),
    ],
)
def test_bad_files_raise_format_errors_naming_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.sktrace"
    path.write_bytes(content)
    with pytest.raises(FormatError, match=message) as info:
        inspect_file(path)
    assert str(info.value).startswith(str(path))


def test_truncated_shared_trace_is_named(tmp_path: Path, simkube_traces: Path) -> None:
    path = tmp_path / "cut.sktrace"
    path.write_bytes((simkube_traces / "cronjob.sktrace").read_bytes()[:900])
    with pytest.raises(FormatError, match=r"cut.sktrace: not a readable msgpack trace, truncated or corrupt"):
        inspect_file(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read the file"):
        inspect_file(tmp_path / "absent.sktrace")
    with pytest.raises(FormatError, match="is a directory"):
        inspect_file(tmp_path)


def _crafted(header: dict[str, object], body: bytes = b"") -> bytes:
    """A segment file around ``header`` with valid checksums (what an attacker can write)."""
    import struct
    import zlib

    import msgpack

    raw: bytes = msgpack.packb(header)
    return (
        struct.pack(">4sHII", b"KTSG", 2, len(raw), zlib.crc32(raw))
        + raw
        + struct.pack(">II", len(body), zlib.crc32(body))
        + body
    )


@pytest.mark.parametrize(
    ("start_ms", "end_ms"),
    [(-(2**63), 0), (0, 2**63 + 5), (0, 10**18), ("0", 5)],
)
def test_a_crafted_header_is_a_clear_format_error_not_a_traceback(
    tmp_path: Path, start_ms: object, end_ms: object
) -> None:
    header = {
        "v": 2,
        "kind": "segment",
        "start_ms": start_ms,
        "end_ms": end_ms,
        "partitions": [],
        "counts": [0, 0, 0, 0],
        "keyframe": [None, 0, 0],
    }
    path = tmp_path / "crafted.kseg"
    path.write_bytes(_crafted(header))
    if end_ms == 10**18:  # representable: inspected, the span printed as numbers beyond the calendar
        with pytest.raises(FormatError, match=r"crafted\.kseg"):
            inspect_file(path)  # the body is missing
        return
    with pytest.raises(FormatError, match=r"crafted\.kseg: malformed header .*(start_ms|end_ms)"):
        inspect_file(path)


def test_a_span_beyond_the_calendar_is_printed_not_crashed_on() -> None:
    from pipeline.formats.inspect import format_span

    assert "not a calendar date" in format_span(0, 10**18)


def test_a_decompression_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    """A few KB of zstd declaring hundreds of MB: refused from the frame header, nothing allocated
    (measured in a process of its own, tests/peak_memory.py: this worker's own peak hides growth)."""
    import zstandard

    body = zstandard.ZstdCompressor(level=19, write_content_size=True).compress(b"\0" * (256 << 20))
    assert len(body) < 64 << 10
    header = {
        "v": 2,
        "kind": "segment",
        "start_ms": 0,
        "end_ms": 1,
        "partitions": [],
        "counts": [0, 0, 0, 0],
        "keyframe": [None, 0, 0],
    }
    path = tmp_path / "bomb.kseg"
    path.write_bytes(_crafted(header, body))
    inspecting = peak_growth(
        f"inspect_file(Path({str(path)!r}))",
        prepare="from pathlib import Path\nfrom pipeline.formats.inspect import inspect_file",
    )
    assert re.match(
        r"FormatError: .*bomb\.kseg: the body would inflate .* over the limit", inspecting.error
    ), inspecting
    assert inspecting.grown_kib < 64 << 10, inspecting  # far below the 256 MiB the body declares


def test_decode_limits_are_configurable_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.formats.segment.decode import decode_segment
    from pipeline.formats.segment.limits import DecodeLimits
    from pipeline.model.errors import ConfigError

    seg = build_segment(
        [Event.applied(5, key_of(_pod("a")), _pod("a"), 1)],
        start_ms=0,
        end_ms=10,
        config=TracerConfig.default(),
    )
    data = encode_segment(seg)
    assert decode_segment(data) == seg
    with pytest.raises(FormatError, match="over the limit of 100"):
        decode_segment(data, "tiny", limits=DecodeLimits(max_inflated_bytes=100))
    limits = DecodeLimits.from_env({"KUBETAPE_MAX_INFLATED_BYTES": "4096", "KUBETAPE_MAX_INFLATE_RATIO": "7"})
    assert limits == DecodeLimits(4096, 7)
    with pytest.raises(ConfigError, match="KUBETAPE_MAX_INFLATE_RATIO"):
        DecodeLimits.from_env({"KUBETAPE_MAX_INFLATE_RATIO": "lots"})


def _pod(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}, "spec": {}}
