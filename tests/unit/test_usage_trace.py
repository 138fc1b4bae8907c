"""The recorded load in traces: usage samples in a segment's body (declared in its header; old segments
read with none), the load at a window's start folded in (against a naive reference), what ``inspect``
says of it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.formats.assemble import assemble_window
from pipeline.formats.inspect import inspect_bytes, usage_summary
from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.decode import decode_segment, read_segment
from pipeline.formats.segment.encode import _file_bytes, encode_segment
from pipeline.formats.segment.header import SEGMENT_FORMAT_VERSION, SegmentKind
from pipeline.formats.usage_window import usage_window
from pipeline.model.errors import FormatError
from pipeline.model.keys import ObjectKey
from pipeline.model.usage import ContainerUsage, UsageSample

WEB = ObjectKey("apps/Deployment/shop/web")
API = ObjectKey("apps/Deployment/shop/api")
DATA = Path(__file__).parent / "data"


def sample(
    ts: int, owner: ObjectKey = WEB, template: str = "a", cpu: int = 100, pods: int = 1
) -> UsageSample:
    containers = (ContainerUsage("app", cpu, 1 << 20),) if pods else ()
    return UsageSample(ts, owner, template, pods, containers)


def gap(ts: int, owner: ObjectKey = WEB, template: str = "a") -> UsageSample:
    return UsageSample(ts, owner, template, 0, (), gap=True)


@pytest.mark.parametrize("version", [2, SEGMENT_FORMAT_VERSION])
def test_usage_samples_round_trip_in_a_segment_and_the_header_counts_them(version: int) -> None:
    usage = [sample(1_500, API, cpu=7), sample(1_000), gap(2_000), sample(1_500)]
    seg = build_segment([], start_ms=1_000, end_ms=3_000, usage=usage, kind=SegmentKind.TRACE)
    assert [s.ts_ms for s in seg.usage] == [1_000, 1_500, 1_500, 2_000]  # sorted by time, owner, hash
    decoded = decode_segment(encode_segment(seg, format_version=version))
    assert decoded.usage == seg.usage
    assert decoded.header.usage_samples == 4


def test_a_segment_written_before_usage_reads_with_none() -> None:
    old = read_segment(DATA / "segment-v1.kseg")
    assert old.usage == ()
    assert old.header.usage_samples == 0
    assert decode_segment(encode_segment(old)).usage == ()


def test_what_cannot_hold_or_does_not_match_usage_is_refused() -> None:
    seg = build_segment([], start_ms=1_000, end_ms=3_000, usage=[sample(1_000)])
    with pytest.raises(ValueError, match="version 1 cannot hold usage"):
        encode_segment(seg, format_version=1)
    with pytest.raises(FormatError, match="not inside the window"):
        build_segment([], start_ms=1_000, end_ms=3_000, usage=[sample(3_000)])
    unsorted = dataclasses.replace(seg, usage=(sample(2_000), sample(1_000)))
    with pytest.raises(FormatError, match="not sorted"):
        encode_segment(dataclasses.replace(unsorted, header=dataclasses.replace(seg.header, usage_samples=2)))
    lying = dataclasses.replace(seg, usage=())  # the header still says 1
    with pytest.raises(FormatError, match="usage count 1 does not match the 0 samples"):
        encode_segment(lying)


@pytest.mark.parametrize(
    ("usage_body", "problem"),
    [
        (None, "the body has no such list"),
        (msgpack.packb([], use_bin_type=True), "the body holds others"),
        (msgpack.packb([{"ts": 1_000, "owner": WEB}], use_bin_type=True), "usage sample 0"),
        (b"\xc1", "malformed usage samples"),
    ],
)
def test_a_body_whose_usage_does_not_match_its_header_is_refused(
    usage_body: bytes | None, problem: str
) -> None:
    seg = build_segment([], start_ms=1_000, end_ms=3_000, usage=[sample(1_000)])
    body = {"events": b"", "keyframe": None, "config": None}
    if usage_body is not None:
        body["usage"] = usage_body
    with pytest.raises(FormatError, match=problem):
        decode_segment(_file_bytes(seg.header, body, 3), "crafted")


# ---- the fold at a window's start ----------------------------------------------------------------------
def naive_window(samples: list[UsageSample], start: int, end: int) -> list[UsageSample]:
    """Per owner and hash, the latest sample before ``start`` (the last delivered among equal times),
    unless it says the load ended, re-timed to ``start``; then the window's own, a recorded sample at
    ``start`` winning over the folded one; one per (time, owner, hash), the last delivered."""
    out: dict[tuple[int, str, str], UsageSample] = {}
    owners = {(s.owner_key, s.template_hash) for s in samples}
    for owner, template in owners:
        earlier = [
            s for s in samples if (s.owner_key, s.template_hash) == (owner, template) and s.ts_ms < start
        ]
        if earlier:
            latest = max(s.ts_ms for s in earlier)
            last = [s for s in earlier if s.ts_ms == latest][-1]
            if last.gap or last.pods:
                out[(start, owner, template)] = dataclasses.replace(last, ts_ms=start)
    for s in samples:
        if start <= s.ts_ms < end:
            out[(s.ts_ms, s.owner_key, s.template_hash)] = s
    return [out[k] for k in sorted(out)]


samples_st = st.lists(
    st.builds(
        lambda ts, owner, template, kind, cpu: (
            gap(ts, owner, template) if kind == 0 else sample(ts, owner, template, cpu, pods=kind - 1)
        ),
        st.integers(0, 60),
        st.sampled_from([WEB, API]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 3),
        st.integers(0, 500),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(samples_st, st.integers(0, 60), st.integers(1, 60))
def test_the_window_folds_the_load_at_its_start_as_the_naive_reference(
    samples: list[UsageSample], start: int, length: int
) -> None:
    assert list(usage_window(samples, start, start + length)) == naive_window(samples, start, start + length)


def test_an_assembled_trace_carries_its_window_of_usage() -> None:
    usage = [sample(500, cpu=50), sample(900, cpu=90), sample(900, API, pods=0), sample(1_200, cpu=120)]
    trace = assemble_window(None, [], 1_000, 2_000, usage=usage)
    assert [(s.ts_ms, s.owner_key, s.cpu_millicores) for s in trace.usage] == [
        (1_000, WEB, 90),
        (1_200, WEB, 120),
    ]
    assert decode_segment(encode_segment(trace)).usage == trace.usage


# ---- inspect -------------------------------------------------------------------------------------------
def test_inspect_summarises_owners_samples_span_and_peak_total_cpu() -> None:
    usage = [
        sample(1_000, WEB, cpu=100),
        sample(1_000, API, cpu=50),
        sample(1_015, WEB, cpu=300),  # API still at 50: 350 together
        gap(1_030, API),
        sample(1_030, WEB, cpu=200),
    ]
    assert usage_summary(tuple(usage)) == {
        "owners": 2,
        "samples": 5,
        "gaps": 1,
        "span_ms": 30,
        "peak_total_cpu_millicores": 350,
    }
    seg = build_segment([], start_ms=1_000, end_ms=2_000, usage=usage, kind=SegmentKind.TRACE)
    report = inspect_bytes(encode_segment(seg), "t.ktrace")
    assert report.to_json()["usage"]["peak_total_cpu_millicores"] == 350
    assert "5 sample(s) of 2 owner(s) (1 gap(s)) over 0.03s, peak total CPU 350m" in report.render_text()
    assert (
        "usage" not in inspect_bytes(encode_segment(build_segment([], start_ms=0, end_ms=1)), "e").to_json()
    )
