"""A sweep of HPA settings: the flags make the HPA grid (crossed with the node options, checked before any
replay), the runs' pressure figures are run metrics, and the frontier trades pod-hours against overload."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pipeline.analytics.compare import compare_runs, run_metrics
from pipeline.analytics.runs import Run
from services.cli import main
from services.sweep import render_sweep_text, summarize_sweep
from tests.unit.test_analytics_compare import make_run

COMMON = ["sweep", "--trace", "t.ktrace", "--kubeconfig", "k", "--nodes", "none"]


def with_pressure(run: Run, overload_s: float, above_s: float, labels: dict[str, str]) -> Run:
    pressure = {"overload_seconds": overload_s, "above_target_seconds": above_s}
    info = dataclasses.replace(run.info, labels=labels)
    return dataclasses.replace(run, info=info, report={"pod_autoscaling": {"pressure": pressure}})


def test_the_pressure_of_a_run_is_a_metric_and_pod_hours_come_from_its_timeline() -> None:
    run = with_pressure(make_run("r", [2, 3, 3], nodes=1), 12.5, 20.0, {})
    metrics = run_metrics(run)
    assert metrics["overload_seconds"] == 12.5
    assert metrics["above_target_seconds"] == 20.0
    assert metrics["pod_hours"] == pytest.approx(8 / 3600)
    assert run_metrics(make_run("plain", [1]))["overload_seconds"] == 0.0, "no HPA, no pressure measured"


def test_a_higher_target_is_cheaper_and_more_overloaded_and_both_are_on_the_frontier() -> None:
    low = [
        with_pressure(make_run(f"low-{i}", [6, 6, 6], nodes=2, repetition=i), 0.0, 30.0, {"hpa_target": "50"})
        for i in range(2)
    ]
    high = [
        with_pressure(
            make_run(f"high-{i}", [3, 3, 3], nodes=2, repetition=i), 30.0, 30.0, {"hpa_target": "150"}
        )
        for i in range(2)
    ]
    result = summarize_sweep([*low, *high], reliability="overload_seconds", cost="pod_hours")
    configs = {c.config.rsplit(" ", 1)[-1]: c.config for c in compare_runs([*low, *high]).configs}
    assert result.points[configs["hpa_target=50"]] == pytest.approx((18 / 3600, 0.0))
    assert result.points[configs["hpa_target=150"]] == pytest.approx((9 / 3600, 30.0))
    assert sorted(result.frontier) == sorted(configs.values()), "a trade-off: neither dominates"
    assert result.document["cost_metric"] == "pod_hours"
    assert "pod-hours, 30 overload_seconds" in render_sweep_text(result)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hpa-target", "50"], "add --autoscaler hpa"),
        (["--load-model", "per-pod"], "add --autoscaler hpa"),
        (["--autoscaler", "hpa", "--hpa-target", "fifty"], "--hpa-target 'fifty': give [OWNER=]N"),
        (["--autoscaler", "hpa", "--hpa-max-replicas", "web="], "--hpa-max-replicas 'web='"),
        (["--autoscaler", "hpa", "--cost", "happiness"], "--cost 'happiness' is not a run metric"),
    ],
)
def test_a_sweep_refuses_bad_hpa_axes_before_any_replay(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*COMMON, "--out", str(tmp_path / "out"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


class AskedError(Exception):
    def __init__(self, kwargs: dict[str, Any]) -> None:
        super().__init__("asked")
        self.kwargs = kwargs


def asked_sweep(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> dict[str, Any]:
    async def capture(*args: Any, **kwargs: Any) -> Any:
        raise AskedError(kwargs)

    monkeypatch.setattr("services.commands.sweep.run_sweep", capture)
    with pytest.raises(AskedError) as asked:
        main([*COMMON, "--out", "o", *argv])
    return asked.value.kwargs


def test_the_hpa_flags_make_the_grid_and_choose_pod_hours_against_overload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = ["--autoscaler", "hpa", "--hpa-target", "50", "--hpa-target", "150", "--hpa-min-replicas", "web=1"]
    kwargs = asked_sweep(monkeypatch, argv)
    sweep = kwargs["pod_autoscaler"]
    assert [v.describe() for v in sweep.variants] == [
        "HPA with hpa_target=50, hpa_min[web]=1",
        "HPA with hpa_target=150, hpa_min[web]=1",
    ]
    assert sweep.load_model.value == "conserve"
    assert (kwargs["cost"], kwargs["reliability"]) == ("pod_hours", "overload_seconds")
    # the HPAs as recorded, with a metric asked for
    kwargs = asked_sweep(monkeypatch, ["--autoscaler", "hpa", "--reliability", "above_target_seconds"])
    assert [v.describe() for v in kwargs["pod_autoscaler"].variants] == ["HPAs as recorded"]
    assert kwargs["reliability"] == "above_target_seconds"
    # no HPA: the sweep is what it was
    kwargs = asked_sweep(monkeypatch, [])
    assert kwargs["pod_autoscaler"] is None
    assert (kwargs["cost"], kwargs["reliability"]) == ("node_hours", "pending_pod_seconds")
