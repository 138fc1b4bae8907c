"""bench/bench_usage.py measures what it says: every pod of the fake Metrics API answer is attributed to an
owner and hash, and every simulated pod's usage is written at each reading (figures are not judged here)."""

from __future__ import annotations

from bench.bench_usage import bench_driver, bench_watcher


def test_the_usage_bench_samples_every_pod_and_drives_every_pod() -> None:
    watcher = bench_watcher(pods=40, deployments=4, every_s=15.0, repeat=1)
    assert watcher["samples_per_round"] == 8  # 4 owners x 2 template hashes
    assert set(watcher["ratios"]) == {
        "round_cpu_over_initial_watch_cpu",
        "round_cpu_over_one_change_of_every_pod_cpu",
        "round_peak_bytes_over_shaper_bytes",
    }
    driver = bench_driver(pods=40, deployments=4, every_s=15.0, speed=10.0, repeat=1)
    assert driver["failures"] == 0
    assert driver["needed_at_speed_per_s"] == round(40 * 10 / 15)
