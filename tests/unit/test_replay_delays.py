"""SimKube 2.7's lifecycle delays: read from flags and specs, scaled by the speed into the annotations the
stack's KWOK stages read, put on every pod template the replayer applies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.controller.spec import SimulationSpecError, parse_spec
from pipeline.model.errors import ConfigError
from pipeline.model.lifecycle_delays import SPEC_FIELDS, LifecycleDelays, parse_delay, parse_lifecycle_params
from pipeline.replay.delays import (
    DELAY_ANNOTATIONS,
    IMAGE_PULL_DELAY,
    IMAGE_PULL_DELAY_MAX,
    STARTUP_DELAY,
    STARTUP_DELAY_MAX,
    delay_annotations,
    format_wall_duration,
)
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.rewrite import RewriteSettings, RootRef, rewrite_object
from pipeline.replay.settings import ReplaySettings
from services.cli import build_parser, main
from services.commands.replay import spec_from_args
from tests.fakes.replay_job import job_document, job_replay
from tests.unit.test_replay_replayer import MemoryCluster, applied, pod, trace

REPO_ROOT = Path(__file__).resolve().parents[2]
ROOT = RootRef("kubetape.dev/v1", "ReplayRoot", "kubetape-replay-r1", "uid-root")


# ---- reading them --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "seconds"),
    [("10s", 10.0), ("250ms", 0.25), ("1m30s", 90.0), ("1000", 1.0), (" 1500 ", 1.5), (2500, 2.5), (0, 0.0)],
)
def test_a_delay_is_a_duration_or_simkubes_whole_milliseconds(value: Any, seconds: float) -> None:
    assert parse_delay(value, "--pod-startup-delay") == seconds


@pytest.mark.parametrize("value", ["-5", "-1s", "soon", "1.5", "", True, 1.5, None, [1]])
def test_a_bad_delay_is_refused_naming_where_and_how_to_write_it(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"^--image-pull-delay: .*such as 2s or 500ms.*1000"):
        parse_delay(value, "--image-pull-delay")


def test_spec_lifecycle_params_read_simkubes_shape() -> None:
    params = {
        "imagePullDelay": 1000,
        "imagePullJitter": "500ms",
        "podStartupDelay": "10s",
        "podStartupJitter": 0,
    }
    assert parse_lifecycle_params(params) == LifecycleDelays(1.0, 0.5, 10.0, 0.0)
    assert parse_lifecycle_params(None) == LifecycleDelays()
    assert not LifecycleDelays().any


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"podStartupDelay": -1}, r"spec\.lifecycleParams\.podStartupDelay: -1 must not be negative"),
        ({"podStartUpDelay": 1}, r"spec\.lifecycleParams: unknown podStartUpDelay; the fields are imagePull"),
        ("10s", r"spec\.lifecycleParams: must be an object"),
    ],
)
def test_a_simulations_bad_lifecycle_params_are_refused_naming_the_field(params: Any, message: str) -> None:
    with pytest.raises(SimulationSpecError, match=message):
        parse_spec({"spec": {"source": {"traceURL": "/t"}, "lifecycleParams": params}})


def test_replay_flags_take_simkubes_names_and_units() -> None:
    args = build_parser().parse_args(
        ["replay", "--trace=t", "--image-pull-delay", "1000", "--image-pull-jitter=2s",
         "--pod-startup-delay", "10s", "--pod-startup-jitter", "250"]
    )  # fmt: skip
    assert spec_from_args(args).settings.lifecycle_delays == LifecycleDelays(1.0, 2.0, 10.0, 0.25)
    assert spec_from_args(build_parser().parse_args(["replay", "--trace=t"])).settings.lifecycle_delays == (
        LifecycleDelays()
    )


def test_a_bad_delay_flag_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["replay", "--trace=t", "--pod-startup-delay", "1.5"])
    assert exited.value.code == 2
    assert "--pod-startup-delay: cannot read '1.5'" in capsys.readouterr().err


def test_a_simulations_delays_reach_its_replay_job_unchanged() -> None:
    spec = parse_spec(
        {
            "spec": {
                "source": {"traceURL": "/t"},
                "lifecycleParams": {
                    "imagePullDelay": 1500,
                    "podStartupDelay": "10s",
                    "podStartupJitter": "2s",
                },
            }
        }
    )
    assert job_document("demo", 1, spec)["imagePullDelay"] == "1s500ms"
    assert job_replay("demo", 1, spec).settings.lifecycle_delays == spec.lifecycle_delays
    plain = job_document("demo", 1, parse_spec({"spec": {"source": {"traceURL": "/t"}}}))
    assert not [key for key in plain if "Delay" in key or "Jitter" in key]


def test_sim_run_writes_the_delays_into_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "run", "x", "--trace", "/t", "--pod-startup-delay", "1000",
                 "--image-pull-jitter", "2s", "--dry-run"])  # fmt: skip
    assert code == 0
    sim = yaml.safe_load(capsys.readouterr().out)
    assert sim["spec"]["lifecycleParams"] == {"imagePullJitter": "2s", "podStartupDelay": "1s"}
    assert parse_spec(sim).lifecycle_delays == LifecycleDelays(image_pull_jitter_s=2.0, startup_s=1.0)


def test_the_crd_takes_exactly_the_fields_the_controller_reads() -> None:
    crd = yaml.safe_load((REPO_ROOT / "k8s" / "sim" / "simulation-crd.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fields = spec["properties"]["lifecycleParams"]["properties"]
    assert set(fields) == set(SPEC_FIELDS)
    assert all(f["x-kubernetes-int-or-string"] for f in fields.values())


# ---- scaling them into annotations ----------------------------------------------------------------
def test_at_speed_10_a_10s_startup_delay_is_one_wall_second() -> None:
    assert delay_annotations(LifecycleDelays(startup_s=10.0), 10.0) == {STARTUP_DELAY: "1000ms"}


def test_a_jitter_is_written_as_the_longest_delay_kwok_draws_up_to() -> None:
    delays = LifecycleDelays(image_pull_s=4.0, image_pull_jitter_s=2.0, startup_s=0.0, startup_jitter_s=3.0)
    assert delay_annotations(delays, 2.0) == {
        IMAGE_PULL_DELAY: "2000ms",
        IMAGE_PULL_DELAY_MAX: "3000ms",
        STARTUP_DELAY: "0ms",
        STARTUP_DELAY_MAX: "1500ms",
    }


def test_no_delays_write_no_annotations() -> None:
    assert delay_annotations(LifecycleDelays(), 10.0) == {}
    assert delay_annotations(LifecycleDelays(startup_s=1.0), 1.0) == {STARTUP_DELAY: "1000ms"}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1.0, "1000ms"), (0.0005, "0.5ms"), (0.000_001, "0.001ms"), (0.0, "0ms"), (1e6, "1000000000ms")],
)
def test_wall_durations_are_go_durations_without_exponents(seconds: float, text: str) -> None:
    assert format_wall_duration(seconds) == text


def _deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "template": {
                # recorded from a cluster a replay ran in: the recording's own delays are not this replay's
                "metadata": {"annotations": {STARTUP_DELAY_MAX: "9s", "team": "a"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            }
        },
    }


def test_every_pod_template_gets_this_replays_delays_and_loses_recorded_ones() -> None:
    annotations = delay_annotations(LifecycleDelays(startup_s=10.0), 10.0)
    settings = RewriteSettings(replay_name="r1", pod_annotations=annotations)
    out = rewrite_object(_deployment(), settings, ROOT, namespaced=True)
    got = out["spec"]["template"]["metadata"]["annotations"]
    assert {k: v for k, v in got.items() if k in DELAY_ANNOTATIONS} == {STARTUP_DELAY: "1000ms"}
    assert got["team"] == "a"
    bare = rewrite_object(pod("p"), settings, ROOT, namespaced=True)
    assert bare["metadata"]["annotations"][STARTUP_DELAY] == "1000ms"
    plain = rewrite_object(_deployment(), RewriteSettings(replay_name="r1"), ROOT, namespaced=True)
    assert not set(plain["spec"]["template"]["metadata"]["annotations"]) & set(DELAY_ANNOTATIONS)


@pytest.mark.parametrize(("max_speed", "speed"), [(False, 5.0), (True, 10.0)])
async def test_the_replayer_applies_pods_with_delays_scaled_by_its_speed(
    max_speed: bool, speed: float
) -> None:
    # at --speed max, by the speed the clock starts at (10), as recorded lifetimes are
    settings = ReplaySettings(
        speed=speed,
        max_speed=max_speed,
        max_lag_s=5.0 if max_speed else None,
        replay_name="d1",
        sample_interval_s=0.01,
        cleanup_timeout_s=1,
        lifecycle_delays=LifecycleDelays(startup_s=10.0, image_pull_s=5.0),
    )
    cluster = MemoryCluster()
    report = await Replayer(cluster, plan_replay(trace([applied(0, pod("p"))]), speed=speed), settings).run()
    assert report.failed == 0, report.summary()
    [applied_pod] = [o for o in cluster.applies if o["kind"] == "Pod"]
    annotations = applied_pod["metadata"]["annotations"]
    assert annotations[STARTUP_DELAY] == format_wall_duration(10.0 / speed)
    assert annotations[IMAGE_PULL_DELAY] == format_wall_duration(5.0 / speed)


def test_the_stack_stages_read_every_annotation_the_replayer_writes() -> None:
    stages = list(yaml.safe_load_all((REPO_ROOT / "pipeline/stack/resources/kwok-stages.yaml").read_text()))
    by_name = {s["metadata"]["name"]: s["spec"] for s in stages}
    pull, ready = by_name["pod-pull-images"], by_name["pod-ready"]
    assert IMAGE_PULL_DELAY in pull["delay"]["durationFrom"]["jq"]["expression"]
    assert IMAGE_PULL_DELAY_MAX in pull["delay"]["jitterDurationFrom"]["jq"]["expression"]
    assert STARTUP_DELAY in ready["delay"]["durationFrom"]["jq"]["expression"]
    assert STARTUP_DELAY_MAX in ready["delay"]["jitterDurationFrom"]["jq"]["expression"]
    # a pod still pulling its images is the one pod-pull-images takes and pod-ready leaves
    [pulling] = [e for e in pull["selector"]["matchExpressions"] if IMAGE_PULL_DELAY in e["key"]]
    assert (pulling["operator"], pulling["values"]) == ("In", ["true"])
    assert {"key": pulling["key"], "operator": "NotIn", "values": ["true"]} in ready["selector"][
        "matchExpressions"
    ]
