"""Reading Simulations (spec checks, names), ``kubetape sim run --dry-run``, and the compose replayer."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.controller.objects import job_name, label_value, node_pools_name, replay_root_name
from pipeline.controller.progress import repetition_result
from pipeline.controller.spec import SimulationSpecError, TopicSource, parse_spec
from services.cli import main
from tests.fakes.replay_job import job_args, job_document

REPO_ROOT = Path(__file__).resolve().parents[2]


_TOPIC = {"topic": {"bootstrap": "kafka:9092", "from": "-1h", "to": "now"}}


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("10m", 600), ("1h30m", 5400), ("250ms", 0.25), ("2d", 172_800)]
)
def test_durations_read_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_spec({"spec": {"source": _TOPIC, "duration": text}}).duration_s == seconds


@pytest.mark.parametrize("text", ["", "10", "ten minutes", "5w", "1h-3m"])
def test_a_duration_without_units_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(SimulationSpecError, match=r"spec\.duration: .* like 90s, 10m or 1h30m"):
        parse_spec({"spec": {"source": _TOPIC, "duration": text}})


@pytest.mark.parametrize("text", ["yesterday", "-30", "2026-11-21T10:00:00", ""])
def test_a_range_bound_replay_cannot_read_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(SimulationSpecError, match=r"spec\.source\.topic\.from"):
        parse_spec({"spec": {"source": {"topic": {"bootstrap": "kafka:9092", "from": text, "to": "now"}}}})


def test_a_topic_source_reads_with_its_defaults() -> None:
    sim = {"spec": {"source": {"topic": {"bootstrap": "kafka:9092", "from": "1767225600000", "to": "now"}}}}
    spec = parse_spec(sim)
    assert spec.source == TopicSource("kafka:9092", "kubetape.events", "1767225600000", "now")
    assert (spec.speed, spec.repetitions, spec.paused) == (1.0, 1, False)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"source": {"traceURL": "/t"}, "speed": 0}, "spec.speed"),
        ({"source": {"traceURL": "/t"}, "repetitions": 101}, "spec.repetitions"),
        (
            {"source": {"traceURL": "/t"}, "nodePools": [{"skeleton": {"kind": "Pod"}, "count": 1}]},
            "skeleton",
        ),
        ({"source": {"segments": {"from": "-1h", "to": "now"}}}, "spec.source.segments"),
        ({"source": {"traceURL": "/t"}, "maxLag": "0s"}, "spec.maxLag"),
    ],
)
def test_a_spec_error_names_its_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(SimulationSpecError, match=field.replace(".", r"\.")):
        parse_spec({"spec": spec})


def test_names_stay_valid_and_distinct_for_long_or_dotted_simulation_names() -> None:
    long_a, long_b = "a" * 200 + ".x", "a" * 200 + ".y"
    for name in (long_a, long_b, "nightly.prod-replay"):
        assert len(job_name(name, 100)) <= 52
        assert len(node_pools_name(name)) <= 63
        assert len(label_value(name)) <= 63
        assert "." not in job_name(name, 1)
        assert replay_root_name(name, 1) == f"kubetape-{job_name(name, 1)}"
    assert job_name(long_a, 1) != job_name(long_b, 1)
    assert label_value(long_a) != label_value(long_b)
    assert job_name("demo", 3) == "demo-r3"


def test_a_running_job_without_a_result_is_running() -> None:
    job = {"metadata": {"name": "demo-r1"}, "status": {"startTime": "2026-01-01T00:00:00Z", "active": 1}}
    result = repetition_result(1, job, [])
    assert (result.phase, result.start_time) == ("Running", "2026-01-01T00:00:00Z")


def test_sim_run_dry_run_prints_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    skeleton = REPO_ROOT / "pipeline" / "stack" / "resources" / "node-skeleton.yaml"
    code = main(
        ["sim", "run", "nightly", "--segments-claim", "segs", "--from=-30m", "--to", "now",
         "--speed", "10", "--repetitions", "3", "--duration", "20m", "--nodes", f"{skeleton}:5", "--dry-run"]
    )  # fmt: skip
    assert code == 0
    sim = yaml.safe_load(capsys.readouterr().out)
    assert sim["kind"] == "Simulation"
    assert sim["spec"]["source"] == {"segments": {"claimName": "segs", "from": "-30m", "to": "now"}}
    assert (sim["spec"]["speed"], sim["spec"]["repetitions"], sim["spec"]["duration"]) == (10, 3, "20m")
    assert sim["spec"]["nodePools"][0]["count"] == 5
    assert sim["spec"]["nodePools"][0]["skeleton"]["kind"] == "Node"


def test_sim_run_refuses_a_range_source_without_its_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "run", "x", "--topic", "kubetape.events", "--bootstrap", "k:9092", "--dry-run"]) == 2
    assert "need --from and --to" in capsys.readouterr().err
    assert main(["sim", "run", "x", "--trace", "/t", "--duration", "soon", "--dry-run"]) == 2
    assert "spec.duration" in capsys.readouterr().err


def test_compose_replays_the_sinks_segments_onto_the_sim_cluster() -> None:
    services = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]
    replayer = services["replayer"]
    assert "segments:/var/lib/kubetape/segments:ro" in replayer["volumes"]
    assert any(v.startswith("segments:") for v in services["sink"]["volumes"])
    kubeconfig = next(v for v in replayer["volumes"] if v.endswith(":/etc/kubetape/kubeconfig:ro"))
    server = yaml.safe_load((REPO_ROOT / kubeconfig.split(":")[0]).read_text())["clusters"][0]["cluster"][
        "server"
    ]
    assert server == "http://kwok-sim:8080"
    command = replayer["command"]
    assert command[0] == "replay"
    assert command[command.index("--segments") + 1] == "/var/lib/kubetape/segments"


def test_the_controller_refuses_a_lease_that_would_expire_between_renewals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["controller", "--kubeconfig", "/nonexistent", "--lease-duration", "5", "--renew-interval", "5"])
        == 2
    )
    assert "--renew-interval 5 must be above 0 and below --lease-duration 5" in capsys.readouterr().err


def test_a_simulation_with_max_lag_runs_its_replays_with_the_trace_clock_waiting() -> None:
    spec = parse_spec({"spec": {"source": {"traceURL": "/t"}, "speed": 10, "maxLag": "5s"}})
    assert spec.max_lag_s == 5
    assert job_args("demo", 1, spec).max_lag == 5
    assert "maxLag" not in job_document("demo", 1, parse_spec({"spec": {"source": {"traceURL": "/t"}}}))


def test_a_simulation_at_max_speed_on_a_stated_profile_passes_both_to_its_replays() -> None:
    spec = parse_spec(
        {
            "spec": {
                "source": {"traceURL": "/t"},
                "maxLag": "5s",
                "maxSpeed": True,
                "clusterProfile": "large",
            }
        }
    )
    args = job_args("demo", 1, spec)
    assert (args.speed, args.expect_profile) == ("max", "large")
    plain = job_document("demo", 1, parse_spec({"spec": {"source": {"traceURL": "/t"}, "speed": 10}}))
    assert plain["speed"] == 10
    assert "expectProfile" not in plain


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"maxSpeed": True}, "spec.maxSpeed: .* needs spec.maxLag"),
        ({"maxSpeed": "yes", "maxLag": "5s"}, "spec.maxSpeed: 'yes' must be true or false"),
        ({"clusterProfile": 3}, "spec.clusterProfile: 3 must be a profile name"),
    ],
)
def test_max_speed_and_cluster_profile_are_checked(extra: dict[str, object], message: str) -> None:
    with pytest.raises(SimulationSpecError, match=message):
        parse_spec({"spec": {"source": {"traceURL": "/t"}, **extra}})


@pytest.mark.parametrize(
    "source",
    [
        {"segments": {"url": "s3://traces/kubetape", "from": "-1h", "to": "now", "cluster": "prod-eu-1"}},
        {"segments": {"claimName": "segments", "from": "-1h", "to": "now", "cluster": "prod-eu-1"}},
        {"topic": {"bootstrap": "kafka:9092", "from": "-1h", "to": "now", "cluster": "prod-eu-1"}},
    ],
)
def test_a_simulation_naming_a_cluster_of_a_fleet_replays_only_it(source: dict[str, dict[str, str]]) -> None:
    assert job_args("fleet", 1, parse_spec({"spec": {"source": source}})).cluster == "prod-eu-1"
    without = {kind: {k: v for k, v in fields.items() if k != "cluster"} for kind, fields in source.items()}
    assert "cluster" not in job_document("fleet", 1, parse_spec({"spec": {"source": without}}))


@pytest.mark.parametrize("cluster", ["Prod", "-prod", "a" * 64, 7])
def test_a_cluster_the_sink_could_not_have_written_is_refused_naming_its_field(cluster: object) -> None:
    source = {"topic": {"bootstrap": "kafka:9092", "from": "-1h", "to": "now", "cluster": cluster}}
    with pytest.raises(SimulationSpecError, match=r"spec\.source\.topic\.cluster: must be"):
        parse_spec({"spec": {"source": source}})
