"""The scale benchmark's CPU accounting: read from /proc, the figures it compares rates with."""

from __future__ import annotations

import os
import time

import pytest

from bench.cpu_usage import (
    BENCH_PROCESS,
    TICKS_PER_S,
    ControlPlane,
    CpuSnapshot,
    CpuTimeline,
    machine_busy_s,
    process_cpu_s,
    snapshot,
    usage,
)


def test_machine_busy_leaves_out_idle_and_iowait_only() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat = "cpu  100 5 50 1000 40 3 2 7 0 0\ncpu0 50 2 25 500 20 1 1 3 0 0\n"
    assert machine_busy_s(stat) == pytest.approx((100 + 5 + 50 + 3 + 2 + 7) / TICKS_PER_S)


def test_a_stat_text_without_the_cpu_line_is_refused() -> None:
    with pytest.raises(ValueError, match="cpu"):
        machine_busy_s("intr 1 2 3\n")


def test_process_time_is_counted_from_the_last_parenthesis_of_the_name() -> None:
    # a process may name itself with spaces and parentheses: "(evil) 1 2"
    fields_after_name = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", "300", "200", "0"]
    stat = "4242 ((evil) 1 2) " + " ".join(fields_after_name)
    assert process_cpu_s(stat) == pytest.approx(500 / TICKS_PER_S)


def test_usage_gives_shares_of_a_core_and_leaves_this_process_out_of_the_control_plane() -> None:
    before = CpuSnapshot(10.0, 100.0, {"kube-apiserver": 5.0, BENCH_PROCESS: 1.0})
    after = CpuSnapshot(20.0, 115.0, {"kube-apiserver": 13.0, "kwok": 2.0, BENCH_PROCESS: 2.0})
    used = usage(before, after, cores=2)
    assert used["wall_s"] == 10.0
    assert used["machine_busy_of_all_cores"] == 0.75
    # kwok started between the snapshots: all of its time counts
    assert used["of_one_core"] == {BENCH_PROCESS: 0.1, "kube-apiserver": 0.8, "kwok": 0.2}
    assert used["control_plane_cpu_s"] == 10.0
    assert used["control_plane_of_one_core"] == 1.0


def test_a_live_snapshot_sees_this_process_spend_cpu() -> None:
    before = snapshot([])
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        pass  # burn CPU for the accounting to see (no rate is asserted)
    after = snapshot([os.getpid(), 2**22 + 1])  # a pid that does not exist is left out
    used = usage(before, after)
    assert used["of_one_core"][BENCH_PROCESS] > 0, used
    assert used["machine_busy_of_all_cores"] > 0, used
    assert used["control_plane_cpu_s"] == 0, used


def test_the_timeline_covers_trace_time_only_and_stops_at_its_end() -> None:
    timeline = CpuTimeline([], stretch_s=0.0)
    timeline.mark(0.0, 10.0)  # setup: before trace time
    assert timeline.total() is None
    timeline.mark(1.0, 10.0)
    assert timeline.total() is None, "one mark measures nothing"
    timeline.mark(5.0, 10.0)
    timeline.mark(10.0, 10.0)  # the end of the trace: the last mark
    total = timeline.total()
    timeline.mark(12.0, 10.0)  # cleanup: not counted
    assert timeline.total() == total
    assert [s["trace_s"] for s in timeline.stretches] == [5.0, 10.0]
    assert total is not None
    assert total["control_plane_cpu_s"] == 0


def test_the_control_planes_work_is_counted_above_its_idle_rate() -> None:
    plane = ControlPlane(list, idle_of_one_core=0.2)
    assert plane.work_cpu_s({"control_plane_cpu_s": 5.0, "wall_s": 10.0}) == pytest.approx(3.0)
    # a stretch quieter than the idle measurement is no work, not negative work
    assert plane.work_cpu_s({"control_plane_cpu_s": 1.0, "wall_s": 10.0}) == 0.0
