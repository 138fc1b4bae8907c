"""The stack's load driver: a pattern of total CPU over time, shared among the running pods as KWOK's
usage annotation (a fake kubectl here; the metrics stack's end-to-end test drives a real HPA with it)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.model.errors import ConfigError, StackError
from pipeline.stack.load_driver import (
    CPU_ANNOTATION,
    LoadDriver,
    LoadPattern,
    per_pod_m,
    rise_and_fall,
)


def test_the_pattern_is_a_step_function_that_rises_then_falls() -> None:
    pattern = rise_and_fall(40, 170, rise_at_s=15, fall_at_s=120)
    assert [pattern.total_m(t) for t in (0, 14.9, 15, 119, 120, 1e6)] == [40, 40, 170, 170, 40, 40]
    assert pattern.length_s == 120


@pytest.mark.parametrize(
    "steps", [(), ((5.0, 10),), ((0.0, 10), (20.0, 5), (10.0, 5)), ((0.0, -1),)], ids=str
)
def test_a_pattern_that_does_not_start_at_zero_go_forward_or_stay_positive_is_refused(
    steps: tuple[tuple[float, int], ...],
) -> None:
    with pytest.raises(ConfigError, match="load pattern"):
        LoadPattern(steps)


def test_a_fall_before_the_rise_is_refused() -> None:
    with pytest.raises(ConfigError, match="rises at 30"):
        rise_and_fall(1, 2, rise_at_s=30, fall_at_s=10)


@given(st.integers(0, 100_000), st.integers(1, 500))
def test_the_pods_share_the_total_and_never_lose_any(total: int, pods: int) -> None:
    share = per_pod_m(total, pods)
    assert total <= share * pods < total + pods


class FakeKubectl:
    """Lists ``pods``; ``annotate`` sets the annotation on the pods named; counts the calls."""

    def __init__(self, pods: list[dict[str, Any]], *, fail_first: int = 0) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.annotated: list[list[str]] = []
        self.fail_first = fail_first
        self.calls = 0

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        self.calls += 1
        if self.calls <= self.fail_first:
            raise StackError("the apiserver is busy")
        if args[:2] == ("get", "pods"):
            return json.dumps({"items": list(self.pods.values())})
        assert args[:2] == ("annotate", "pods")
        key, _, value = args[-1].partition("=")
        names = [a for a in args[2:-1] if a in self.pods]
        self.annotated.append(names)
        for name in names:
            self.pods[name]["metadata"].setdefault("annotations", {})[key] = value
        return ""


def pod(name: str, phase: str = "Running", *, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_each_running_pod_gets_its_share_once() -> None:
    kubectl = FakeKubectl([pod("a"), pod("b"), pod("c", "Pending"), pod("d", terminating=True)])
    driver = LoadDriver(kubectl, "shop", "app=shop", rise_and_fall(40, 170, rise_at_s=10, fall_at_s=20))
    driver.play_once(0.0)
    assert kubectl.annotated == [["a", "b"]]
    assert kubectl.pods["a"]["metadata"]["annotations"][CPU_ANNOTATION] == "20m"
    driver.play_once(5.0)
    assert kubectl.annotated == [["a", "b"]], "nothing changed: nothing written"
    kubectl.pods["c"]["status"]["phase"] = "Running"  # the HPA's new pod started
    driver.play_once(12.0)
    assert kubectl.annotated[-1] == ["a", "b", "c"]
    assert kubectl.pods["c"]["metadata"]["annotations"][CPU_ANNOTATION] == "57m"
    assert driver.writes == 5
    assert driver.played == [(0.0, 40, 2), (5.0, 40, 2), (12.0, 170, 3)]


def test_a_failed_pass_is_counted_and_the_next_one_goes_on() -> None:
    stop = threading.Event()
    kubectl = FakeKubectl([pod("a")], fail_first=1)
    driver = LoadDriver(kubectl, "shop", "app=shop", LoadPattern(((0.0, 30),)), interval_s=0.0)

    def stop_once_written(*args: str, stdin: str | None = None) -> str:
        out = kubectl(*args, stdin=stdin)
        if kubectl.annotated:
            stop.set()
        return out

    driver.kubectl = stop_once_written
    driver.run(stop)
    assert driver.failures == 1
    assert "busy" in driver.last_failure
    assert kubectl.pods["a"]["metadata"]["annotations"][CPU_ANNOTATION] == "30m"


def test_the_demo_asks_for_the_autoscaled_workload_with_hpa() -> None:
    from services.cli import build_parser
    from services.commands.demo import DemoSettings

    args = build_parser().parse_args(["demo", "--hpa"])
    assert args.settings(args).hpa is True
    assert DemoSettings().hpa is False, "the demo's default needs no Metrics API"
