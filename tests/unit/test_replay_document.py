"""The replay document (``kind: ReplaySpec``): the flags, the document and a Simulation describe one
replay request with one list of fields (:data:`pipeline.model.replay_document.FIELDS`); a document read
back is the replay its flags ask for; another version, another kind and unknown keys are refused naming
the file and the key."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.controller.spec import (
    NOT_IN_A_SIMULATION,
    REPLAY_SETTINGS,
    SET_BY_SIMULATION,
    SimulationSpecError,
    parse_spec,
)
from pipeline.model.errors import ConfigError
from pipeline.model.replay_document import API_VERSION, BY_KEY, FIELDS, KIND, replay_document
from pipeline.replay.spec import ReplaySpec
from services.cli import build_parser, main
from services.commands.replay import settings_from_args, spec_from_args
from tests.fakes.replay_job import job_document, job_replay

REPO_ROOT = Path(__file__).resolve().parents[2]

PROCESS_FLAGS = {
    "spec": "the document itself",
    "print_spec": "prints the document instead of replaying",
    "stack_dir": "which local stack this machine restarts Karpenter and the HPA in: not the replay's",
    "quiet": "this process's progress lines",
    "help": "argparse's",
}
"""``kubetape replay``'s flags that are not part of a replay request (and so not in the document)."""


def replay_actions() -> list[argparse.Action]:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(subparsers.choices["replay"]._actions)


def test_every_replay_flag_is_a_document_field_or_listed_as_the_processs_own() -> None:
    actions = [a for a in replay_actions() if a.default is not argparse.SUPPRESS or a.dest == "help"]
    fields = {f.dest: f for f in FIELDS}
    for action in actions:
        assert action.dest in fields or action.dest in PROCESS_FLAGS, (
            f"kubetape replay {action.option_strings[0]} (dest {action.dest}) is neither a field of the "
            "replay document (pipeline.model.replay_document.FIELDS) nor listed in PROCESS_FLAGS"
        )
    by_dest: dict[str, set[str]] = {}
    for action in actions:
        by_dest.setdefault(action.dest, set()).update(action.option_strings)
        if action.dest in fields:
            assert set(action.choices or ()) == set(fields[action.dest].kind.choices), action.dest
    for field in FIELDS:
        assert set(field.flags) <= by_dest.get(field.dest, set()), (
            f"document key {field.key}: kubetape replay has no {', '.join(field.flags)} for {field.dest}"
        )


def _simulations() -> list[dict[str, Any]]:
    """Simulations that set every field a Simulation has, across its sources."""
    skeleton = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
    nodepool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"}, "spec": {}}
    full = {
        "speed": 10,
        "duration": "2m",
        "namespacePrefix": "sim",
        "maxLag": "5s",
        "clusterProfile": "large",
        "nodePools": [{"skeleton": skeleton, "count": 2}],
        "autoscaler": {"nodePools": [nodepool], "prices": {"kwok-standard-4": 0.19}},
        "podAutoscaler": {"loadModel": "per-pod"},
        "hooks": {"preRunHooks": [{"cmd": "true"}]},
        "replay": {
            "qps": 5,
            "maxInFlight": 4,
            "sampleInterval": "1s",
            "settle": "1s",
            "requireFidelity": True,
            "hookTimeout": "1m",
            "hookPassEnv": ["A"],
        },
        "lifecycleParams": {
            "imagePullDelay": "1s",
            "imagePullJitter": "1s",
            "podStartupDelay": "1s",
            "podStartupJitter": "1s",
        },
    }
    return [
        {"spec": {"source": {"traceURL": "/t"}, **full}},
        {"spec": {"source": {"segments": {"claimName": "s", "from": "-1h", "to": "now", "cluster": "c"}}}},
        {
            "spec": {
                "source": {
                    "topic": {"bootstrap": "k:9092", "from": "-1h", "to": "now", "kafkaConfigSecret": "kc"}
                }
            }
        },
    ]


def test_every_document_key_is_a_simulations_field_its_spec_replay_or_listed_as_not_for_it() -> None:
    listed = [*SET_BY_SIMULATION, *REPLAY_SETTINGS, *NOT_IN_A_SIMULATION]
    assert len(listed) == len(set(listed)), "a key listed twice"
    assert set(listed) == set(BY_KEY), (
        f"document keys a Simulation neither sets, passes in spec.replay nor lists as not for it: "
        f"{set(BY_KEY) - set(listed)}"
    )
    written: set[str] = set()
    for simulation in _simulations():
        written |= set(job_document("sim", 1, parse_spec(simulation)))
    assert written == set(SET_BY_SIMULATION) | set(REPLAY_SETTINGS)


def test_the_crd_offers_spec_replay_with_exactly_the_settings_the_controller_passes() -> None:
    crd = yaml.safe_load((REPO_ROOT / "k8s" / "sim" / "simulation-crd.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]["replay"]["properties"]) == set(REPLAY_SETTINGS)


def test_a_simulations_spec_replay_reaches_every_repetitions_replay() -> None:
    replay = {"qps": 50, "maxInFlight": 8, "settle": "2s", "sampleInterval": "250ms", "requireFidelity": True,
              "hookTimeout": "5m", "hookPassEnv": ["AWS_PROFILE"]}  # fmt: skip
    spec = parse_spec({"spec": {"source": {"traceURL": "/t"}, "replay": replay}})
    for index in (1, 2):
        run = job_replay("sim", index, spec)
        assert (run.settings.qps, run.settings.max_in_flight, run.settings.settle_s) == (50, 8, 2.0)
        assert run.settings.sample_interval_s == 0.25
        assert run.report.require_fidelity
        assert (run.hooks.timeout_s, run.hooks.pass_env) == (300.0, ("AWS_PROFILE",))


@pytest.mark.parametrize(
    ("replay", "message"),
    [
        ({"speed": 3}, r"spec.replay.speed: a Simulation sets it from spec.speed or spec.maxSpeed"),
        ({"keep": True}, r"spec.replay.keep: not for a Simulation: the controller deletes"),
        ({"qsp": 5}, r"spec.replay.qsp: unknown key \(did you mean qps\?\)"),
        ({"qps": "fast"}, r"spec.replay.qps: 'fast' is not a number"),
        ({"settle": "soon"}, r"spec.replay.settle: "),
        ([], r"spec.replay: must be an object of maxInFlight"),
    ],
)
def test_a_bad_spec_replay_is_refused_naming_the_field(replay: Any, message: str) -> None:
    with pytest.raises(SimulationSpecError, match=message):
        parse_spec({"spec": {"source": {"traceURL": "/t"}, "replay": replay}})


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "node.yaml").write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n")
    (tmp_path / "pool.yaml").write_text(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec: {}\n"
    )
    (tmp_path / "prices.yaml").write_text("kwok-standard-4: 0.19\n")
    (tmp_path / "client.properties").write_text("security.protocol=PLAINTEXT\n")
    (tmp_path / "hooks.yaml").write_text("postRunHooks: [{cmd: kubectl, args: [get, pods]}]\n")
    (tmp_path / "crd.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata: {name: widgets.example.com}\n"
        "spec: {group: example.com, names: {kind: Widget, plural: widgets}, scope: Namespaced,\n"
        "  versions: [{name: v1, served: true, storage: true}]}\n"
    )
    return tmp_path


def _flag_sets(d: Path) -> list[list[str]]:
    return [
        [f"--trace={d}/t.json", "--speed=10", f"--nodes={d}/node.yaml:3", "--nodes", f"{d}/node.yaml:1",
         "--name=r", "--namespace-prefix=", "--duration=90s", "--max-lag=5", "--settle=2",
         "--sample-interval=0.25", "--max-in-flight=8", "--qps=50", "--expect-profile=large",
         "--require-fidelity", "--keep", f"--crd={d}/crd.yaml", "--autoscaler=karpenter",
         "--autoscaler=hpa", "--load-model=per-pod", f"--nodepool={d}/pool.yaml", f"--prices={d}/prices.yaml",
         f"--instance-types={d}/types.json", "--pod-startup-delay=1500", "--image-pull-jitter=2s",
         "--image-pull-delay=1s", "--pod-startup-jitter=250ms",
         "--hook", "preRun=sh -c 'echo \"a b\"'", "--hook-ignoring-failure=postStop=false",
         f"--hooks={d}/hooks.yaml", "--hook-timeout=30", "--hook-pass-env=A", f"--run-dir={d}/run",
         f"--report-json={d}/report.json", f"--kubeconfig={d}/kc", "--context=sim"],
        ["--segments=s3://bucket/prefix", "--from=-30m", "--to=now", "--cluster=prod-eu-1",
         f"--config={d}/tracer.yaml", "--speed=max", "--max-lag=3"],
        ["--topic=events", "--bootstrap=kafka:9092", "--follow", "--lag=45"],
        ["--topic=events", "--bootstrap=kafka:9092", "--from=-1h", f"--kafka-config={d}/client.properties"],
    ]  # fmt: skip


def _via_document(flags: list[str], d: Path) -> tuple[ReplaySpec, str]:
    """The replay ``flags`` ask for, through their printed document read back with --spec."""
    printed = settings_from_args(build_parser().parse_args(["replay", *flags, "--print-spec"]))
    assert printed.print_document is not None
    text = yaml.safe_dump(dict(printed.print_document), sort_keys=False)
    (d / "replay.yaml").write_text(text)
    return settings_from_args(
        build_parser().parse_args(["replay", "--spec", str(d / "replay.yaml")])
    ).spec, text


@pytest.mark.parametrize("case", range(4))
def test_flags_through_the_document_are_the_replay_the_flags_ask_for(
    files: Path, case: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBETAPE_BOOTSTRAP", raising=False)
    monkeypatch.delenv("KUBETAPE_KAFKA_CONFIG", raising=False)
    flags = _flag_sets(files)[case]
    direct = spec_from_args(build_parser().parse_args(["replay", *flags]))
    through, text = _via_document(flags, files)
    assert through == direct
    # and the document read back writes itself unchanged
    again = settings_from_args(
        build_parser().parse_args(["replay", "--spec", str(files / "replay.yaml"), "--print-spec"])
    )
    assert yaml.safe_dump(dict(again.print_document or {}), sort_keys=False) == text


def test_the_flag_sets_set_every_field_so_the_round_trip_covers_them_all(files: Path) -> None:
    flags = _flag_sets(files)
    keys: set[str] = set()
    for case in flags:
        document = settings_from_args(build_parser().parse_args(["replay", *case, "--print-spec"]))
        keys |= set((document.print_document or {})["spec"])
    assert keys == set(BY_KEY)


def test_print_spec_prints_the_document_and_replays_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["replay", "--trace", "t.json", "--speed", "10", "--max-lag", "5", "--print-spec"]) == 0
    document = yaml.safe_load(capsys.readouterr().out)
    assert document == {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "spec": {"trace": str(tmp_path / "t.json"), "speed": 10, "maxLag": 5},
    }


def _write(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def _replay(path: Path) -> ReplaySpec:
    return settings_from_args(build_parser().parse_args(["replay", "--spec", str(path)])).spec


def test_relative_paths_in_a_document_are_read_from_its_directory(
    files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir("/")
    path = _write(
        files / "replay.yaml",
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "spec": {"trace": "t.json", "nodes": [{"skeleton": "node.yaml", "count": 2}]},
        },
    )
    spec = _replay(path)
    assert spec.source.describe() == str(files / "t.json")
    assert spec.settings.node_pools[0][1] == 2


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"apiVersion": "kubetape.dev/v2", "kind": KIND, "spec": {"trace": "t"}},
         r"replay.yaml: apiVersion is 'kubetape.dev/v2'; this kubetape reads apiVersion: kubetape.dev/v1"),
        ({"kind": KIND, "spec": {"trace": "t"}}, r"replay.yaml: apiVersion is None"),
        ({"apiVersion": API_VERSION, "kind": "Simulation", "spec": {"trace": "t"}},
         r"replay.yaml: kind is 'Simulation'; a replay document is kind: ReplaySpec"),
        ({"apiVersion": API_VERSION, "kind": KIND, "spec": {"trace": "t", "sped": 10}},
         r"replay.yaml: spec.sped: unknown key \(did you mean speed\?\)"),
        ({"apiVersion": API_VERSION, "kind": KIND, "metadata": {}, "spec": {"trace": "t"}},
         r"replay.yaml: unknown key\(s\) metadata"),
        ({"apiVersion": API_VERSION, "kind": KIND, "spec": {"trace": "t", "topic": "e"}},
         r"replay.yaml: spec has trace, topic; give exactly one of trace, segments, topic"),
        ({"apiVersion": API_VERSION, "kind": KIND, "spec": {"trace": "t", "speed": "fast"}},
         r"replay.yaml: spec.speed: 'fast' is not a number \(e.g. 10\) or 'max'"),
        ({"apiVersion": API_VERSION, "kind": KIND, "spec": {"trace": "t", "keep": "yes"}},
         r"replay.yaml: spec.keep: 'yes' is not true or false"),
        ({"apiVersion": API_VERSION, "kind": KIND,
          "spec": {"trace": "t", "hooks": [{"point": "later", "command": ["x"]}]}},
         r"replay.yaml: spec.hooks\[0\]: hook point 'later' is not one of"),
        ({"apiVersion": API_VERSION, "kind": KIND, "spec": {"trace": "t", "autoscalers": ["keda"]}},
         r"replay.yaml: spec.autoscalers\[0\]: 'keda' is not one of hpa, karpenter"),
        (["trace"], r"replay.yaml: a replay document is a mapping"),
    ],
)  # fmt: skip
def test_a_document_that_cannot_be_read_is_refused_naming_the_file_and_key(
    tmp_path: Path, document: Any, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _replay(_write(tmp_path / "replay.yaml", document))


def test_a_replay_flag_beside_spec_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "replay.yaml", {"apiVersion": API_VERSION, "kind": KIND, "spec": {"trace": "t"}})
    assert main(["replay", "--spec", str(path), "--speed", "3"]) == 2
    assert f"--spec {path} describes the whole replay; --speed given too" in capsys.readouterr().err


def test_a_missing_or_broken_spec_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--spec", str(tmp_path / "nope.yaml")]) == 2
    assert f"--spec: cannot read {tmp_path / 'nope.yaml'}" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("spec: [\n")
    assert main(["replay", "--spec", str(tmp_path / "bad.yaml")]) == 2
    assert "is neither YAML nor JSON" in capsys.readouterr().err


def test_json_is_a_document_too(tmp_path: Path) -> None:
    (tmp_path / "replay.json").write_text(
        f'{{"apiVersion": "{API_VERSION}", "kind": "{KIND}", "spec": {{"trace": "/t", "speed": 4}}}}'
    )
    assert _replay(tmp_path / "replay.json").settings.speed == 4


def test_a_writer_using_a_key_not_in_the_list_fails_at_once() -> None:
    with pytest.raises(ConfigError, match=r"spec.nodePools: unknown key \(did you mean nodepools\?\)"):
        replay_document({"trace": "/t", "nodePools": []})


def test_the_docs_schema_lists_every_key_and_no_other() -> None:
    text = (REPO_ROOT / "docs" / "replay.md").read_text()
    section = text.split("## The replay document", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = {key for row in rows for key in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert listed == set(BY_KEY)
