"""The store model test (:mod:`tests.unit.test_store_model`) over a store whose segments are written in
format 3 (delta-coded) or in formats 2 and 3, segment by segment: every window must still give exactly
the reference's bytes (the same reference), so exports do not depend on how the segments they read were
encoded, and a store whose sink changes format reads on. The sink writes the default format (2) in
:mod:`tests.unit.test_store_model` itself."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from pipeline.formats.segment.encode import ZSTD_LEVEL, encode_wire_segment
from pipeline.sink.compactor import ClosedSegment
from tests.unit.test_store_model import SinkStoreMachine

WRITERS: dict[str, Callable[[ClosedSegment], int]] = {
    "all version 3": lambda segment: 3,
    "versions 2 and 3 mixed": lambda segment: 2 if segment.first_offset % 2 else 3,
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_every_window_is_byte_identical_whatever_the_segments_encoding(
    writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    version_of = WRITERS[writer]
    written: set[int] = set()

    def encode(self: ClosedSegment, level: int = ZSTD_LEVEL, _: int | None = None) -> bytes:
        version = version_of(self)
        written.add(version)
        return encode_wire_segment(self.wire, level, format_version=version)

    monkeypatch.setattr(ClosedSegment, "encode", encode)
    run_state_machine_as_test(
        SinkStoreMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=30,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    assert written == ({3} if writer == "all version 3" else {2, 3})
