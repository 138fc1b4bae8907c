"""What a SimKube user types, run through ``kubetape``'s main entry: ``version``, skctl run's flags on
``sim run`` and ``replay`` (taken, or refused naming the kubetape way), a SKEL program in a file not
named ``.skel``, ``inspect`` of a store directory, and inspect's wording."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.model.events import Event
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import key_of, object_key
from services.cli import build_parser, main
from services.commands.replay import spec_from_args


def test_version_and_dash_dash_version_print_kubetape_and_the_simkube_versions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["version"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("kubetape 0.")
    assert "SimKube traces: reads versions 1, 2 and 3, writes 2 and 3" in printed
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == printed


def sim_run_yaml(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, object]:
    assert main(["sim", "run", "nightly", *flags, "--dry-run"]) == 0
    simulation: dict[str, object] = yaml.safe_load(capsys.readouterr().out)
    return simulation


def test_sim_run_takes_skctl_runs_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "default.yml", tmp_path / "autoscaler.yml"
    first.write_text("preRunHooks:\n  - cmd: echo\n    args: [first]\n")
    second.write_text("preRunHooks:\n  - cmd: echo\n    args: [second]\npostStopHooks:\n  - cmd: 'true'\n")
    spec = sim_run_yaml(
        capsys,
        "-f", "https://traces.example/trace.sktrace",
        "-s", "10", "-N", "3", "-D", "10m",
        "--start-paused",
        "--virtual-ns-prefix", "virtual",
        "--hooks", f"{first}:{second}",
    )["spec"]  # fmt: skip
    assert spec == {
        "source": {"traceURL": "https://traces.example/trace.sktrace"},
        "speed": 10.0,
        "repetitions": 3,
        "duration": "10m",
        "namespacePrefix": "virtual",
        "paused": True,
        "hooks": {
            "preRunHooks": [{"cmd": "echo", "args": ["first"]}, {"cmd": "echo", "args": ["second"]}],
            "postStopHooks": [{"cmd": "true"}],
        },
    }
    long_form = sim_run_yaml(capsys, "--trace-path", "/data/trace", "--speed", "2")["spec"]
    assert long_form == {"source": {"traceURL": "/data/trace"}, "speed": 2.0, "repetitions": 1}


@pytest.mark.parametrize(
    ("flags", "instead"),
    [
        (("-I", "quay.io/sk-driver:v2"), "`kubetape controller --image IMAGE`"),
        (("--driver-namespace", "simkube"), "`kubetape controller --namespace NS`"),
        (("--driver-port", "8888"), "no admission webhook"),
        (("--driver-secrets", "a,b"), "--kafka-config-secret SECRET"),
        (("--driver-verbosity", "debug"), "logs at info"),
        (("--skip-local-volume-mount",), "no volume is mounted for the trace"),
        (("--prometheus-shards", "2"), "kubetape starts no Prometheus"),
        (("--remote-write-endpoint", "http://x"), "kubetape starts no Prometheus"),
    ],
)
def test_sim_run_refuses_skctl_driver_and_metrics_flags_naming_the_kubetape_way(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], instead: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["sim", "run", "nightly", "-f", "/data/trace", *flags, "--dry-run"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"kubetape sim run: error: {flags[0]} is skctl's and has no counterpart here: " in err
    assert instead in err


def test_disable_metrics_is_taken_and_said_to_change_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "run", "nightly", "-f", "/data/trace", "--disable-metrics", "--dry-run"]) == 0
    assert "--disable-metrics changes nothing: kubetape starts no Prometheus" in capsys.readouterr().err


def test_replay_takes_skctl_runs_flags(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks.yml"
    hooks.write_text("preRunHooks:\n  - cmd: echo\n  - cmd: 'true'\n")
    args = build_parser().parse_args(
        ["replay", "-f", "trace.sktrace", "-s", "10", "-D", "10m", "--virtual-ns-prefix", "virtual",
         "--hooks", f"{hooks}:{hooks}"]
    )  # fmt: skip
    spec = spec_from_args(args)
    assert args.trace == "trace.sktrace"
    assert spec.settings.speed == 10.0
    assert spec.settings.duration_ms == 600_000
    assert spec.settings.namespace_prefix == "virtual"
    assert len(spec.hooks.hooks) == 4
    seconds = spec_from_args(build_parser().parse_args(["replay", "--trace-path", "t", "--duration", "90"]))
    assert seconds.settings.duration_ms == 90_000  # a bare number stays seconds


@pytest.mark.parametrize(
    ("flags", "instead"),
    [
        (("-N", "3"), "`kubetape sim run NAME --repetitions N` repeats a Simulation"),
        (("--start-paused",), "SIGUSR1 pauses its trace clock and SIGUSR2 resumes it"),
        (("--driver-image", "x"), "not in a driver pod"),
        (("--metrics-namespace", "monitoring"), "kubetape starts no Prometheus"),
    ],
)
def test_replay_refuses_skctl_flags_it_has_no_use_for(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], instead: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", "-f", "trace.sktrace", *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"kubetape replay: error: {flags[0]} is skctl's and has no counterpart here: " in err
    assert instead in err


SKEL = '# sanitize\nremove(status);\nmodify(metadata.labels.app == "web", spec.replicas = 3);\n'


def test_transform_names_a_skel_program_in_a_file_not_named_skel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = Path(__file__).resolve().parents[1] / "data" / "simkube" / "cronjob.sktrace"
    program = tmp_path / "sanitize.txt"
    program.write_text(SKEL)
    out = tmp_path / "out.sktrace"
    assert main(["transform", str(trace), str(program), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{program}: this is a SKEL program (remove/modify/delete statements), read as a YAML" in err
    assert f"pass it with --skel {program} (or name the file .skel)" in err
    assert main(["transform", str(trace), "--skel", str(program), "-o", str(out)]) == 0  # the way shown
    assert out.exists()


def test_transform_of_a_bad_yaml_file_without_skel_is_the_yaml_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = Path(__file__).resolve().parents[1] / "data" / "simkube" / "cronjob.sktrace"
    bad = tmp_path / "fix.yaml"
    bad.write_text("operations: [\n")
    assert main(["transform", str(trace), str(bad), "-o", str(tmp_path / "out.sktrace")]) == 2
    err = capsys.readouterr().err
    assert "not valid YAML" in err
    assert "SKEL" not in err


def test_inspect_of_a_directory_points_at_describe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "segments"
    store.mkdir()
    assert main(["inspect", str(store)]) == 2
    err = capsys.readouterr().err
    assert f"{store}: is a directory, not a trace or segment file" in err
    assert f"`kubetape describe {store}` shows its recording" in err


def test_inspect_words_a_segment_for_a_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "w", "namespace": "d"},
        "spec": {},
    }
    pod = object_key("v1", "Pod", "d", "w-1")
    lifecycle = Event.pod_lifecycle(
        2_000, pod, owner_key=key_of(obj), pod_spec_hash=1, start_ms=2_000, end_ms=None
    )
    seg = build_segment(
        [Event.applied(1_000, key_of(obj), obj, object_spec_hash(obj)), lifecycle], start_ms=0, end_ms=5_000
    )
    path = tmp_path / "trace.kts"
    path.write_bytes(encode_segment(seg))
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    for internal in ("wire rows", "size_vs_events", "event_bytes", "not checkable", "0/0 match", "warning"):
        assert internal not in text
    assert "spec hashes:      1 checked, all match" in text
    assert (
        "lifecycle keys:   1 not checked: they belong to pods the trace does not hold, only their owners"
        in text
    )
    assert "stored as: format 2, each event as Kafka carried it, compressed to" in text
    assert main(["inspect", str(path), "--json"]) == 0
    assert '"size_vs_events"' in capsys.readouterr().out  # the JSON keeps its machine keys
