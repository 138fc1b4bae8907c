"""The settle and the verdict's stretched settles are bounded by the trace (issue 46): the demo's
default settle was 30 trace s on a 27 s recording, and a replay that skipped a scale-down was held."""

from __future__ import annotations

from pipeline.replay.report.fidelity import OwnerSample, judge, value_at
from pipeline.replay.report.report import ReplayReport
from pipeline.replay.report.settle import default_settle_ms, longest_stretch_ms, settle_warning
from pipeline.replay.settings import ReplaySettings

DEMO = [(1_000, 2), (6_000, 5), (15_000, 3), (29_000, 0)]
"""The demo's Deployment: 2, 5 (a rollout at 10 s), 3, deleted; a 31 s trace."""
DEMO_SPAN_MS = 31_000


def test_the_default_settle_is_a_tenth_of_the_trace_within_one_and_three_wall_seconds() -> None:
    assert default_settle_ms(10.0, DEMO_SPAN_MS) == 10_000  # the floor: a wall second at x10
    assert default_settle_ms(1.0, 20_000) == 2_000  # a tenth of the trace
    assert default_settle_ms(1.0, 3_600_000) == 3_000  # a long trace: three wall seconds
    assert default_settle_ms(10.0, 3_600_000) == 30_000
    settle, source = ReplaySettings(speed=10.0).settle(DEMO_SPAN_MS)
    assert settle == 10_000
    assert "a tenth of it" in source
    assert ReplaySettings(speed=10.0, max_lag_s=2.0).settle(DEMO_SPAN_MS) == (2_000, "--max-lag")


def test_the_report_warns_when_the_settle_covers_a_large_part_of_the_trace() -> None:
    warning = settle_warning(10_000, DEMO_SPAN_MS)
    assert warning is not None
    assert "covers 32% of the 31 s trace" in warning
    assert settle_warning(2_000, DEMO_SPAN_MS) is None
    report = ReplayReport("r", "trace", 10.0, trace_span_ms=DEMO_SPAN_MS, settle_ms=10_000)
    report.recorded_by_owner = {"web": DEMO}
    report.add_sample(20_000, 3, 1, {"web": 3})
    assert "WARNING: the settle (10 s) covers 32%" in report.summary()
    assert report.to_json()["owner_fidelity"]["settle_warning"] == warning


def _skipped_scale_down() -> list[OwnerSample]:
    """The demo replayed without its 5 → 3: 5 pods until the deletion, every step else on time."""
    return [
        OwnerSample(t, {"web": 5 if 15_000 <= t < 29_000 else value_at(DEMO, t)})
        for t in range(0, DEMO_SPAN_MS + 1, 500)
    ]


def test_a_skipped_scale_down_fails_though_ten_times_the_settle_would_forgive_it() -> None:
    samples = _skipped_scale_down()
    settled = {"resolution_wall_s": 1.0, "lateness_p99_ms": 5.0}
    # without a bound from the trace, 20 s of settle (ten times 2) covers the 14 s the step was missed
    unbounded = judge({"web": DEMO}, samples, 2_000, **settled)  # type: ignore[arg-type]
    assert unbounded.verdict == "degraded"
    longest = longest_stretch_ms(2_000, DEMO_SPAN_MS)
    assert longest == DEMO_SPAN_MS / 4
    verdict = judge({"web": DEMO}, samples, 2_000, longest_settle_ms=longest, **settled)  # type: ignore[arg-type]
    assert verdict.verdict == "failed", verdict
    assert "allowed 6 s of trace time to settle" in verdict.reasons[0]


def test_the_report_bounds_the_stretch_by_its_trace() -> None:
    report = ReplayReport("r", "trace", 10.0, trace_span_ms=DEMO_SPAN_MS, settle_ms=2_000)
    report.recorded_by_owner = {"web": DEMO}
    for sample in _skipped_scale_down():
        report.add_sample(sample.trace_ms, sample.running["web"], 1, dict(sample.running))
    fidelity = report.to_json()["owner_fidelity"]
    assert (fidelity["verdict"], fidelity["longest_settle_tried_ms"]) == ("failed", 6_000)
    assert "fidelity: FAILED" in report.summary()
