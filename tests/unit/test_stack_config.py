"""Stack provisioning logic that needs no running component."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest
import yaml

from pipeline.model.errors import MissingToolError, StackError
from pipeline.stack import kafka, kwok
from pipeline.stack.go_module import GoWork
from pipeline.stack.processes import http_probe, require_tool, wait_until_ready
from pipeline.stack.stack import LocalStack
from pipeline.stack.state import StackState
from pipeline.stack.versions import StackVersions, kube_bin_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("tool", ["java", "mvn", "go"])
def test_missing_tool_error_names_the_tool(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MissingToolError, match=f"`{tool}` is not on PATH") as info:
        require_tool(tool, "build the stack")
    assert "install" in str(info.value)


def test_build_without_go_fails_naming_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBETAPE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", "/nonexistent")
    from pipeline.stack.build import ensure_kube_binaries

    with pytest.raises(MissingToolError, match="`go`"):
        ensure_kube_binaries(StackVersions(), lambda _: None)


def test_cache_is_keyed_by_versions(tmp_path: Path) -> None:
    a = kube_bin_dir(StackVersions(), tmp_path)
    b = kube_bin_dir(StackVersions(kubernetes="v1.36.1"), tmp_path)
    assert a != b
    assert "v1.36.1" in b.name


def test_kafka_listens_on_loopback_only(tmp_path: Path) -> None:
    layout = kafka.KafkaLayout(tmp_path, broker_port=19092, controller_port=19093)
    kafka.write_server_properties(layout)
    props = dict(line.split("=", 1) for line in layout.properties.read_text().splitlines() if "=" in line)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == str(tmp_path / "data")


def test_kwokctl_config_binds_loopback_and_uses_local_binaries(tmp_path: Path) -> None:
    cluster = kwok.KwokCluster("sim", tmp_path / "kwok", tmp_path / "bin")
    documents = list(yaml.safe_load_all(kwok.write_kwokctl_config(cluster).read_text()))
    config = documents[0]
    options = config["options"]
    assert options["bindAddress"] == "127.0.0.1"
    binaries = {k: v for k, v in options.items() if k.endswith("Binary")}
    assert len(binaries) == 6
    assert all(v.startswith(str(tmp_path / "bin")) for v in binaries.values())  # nothing downloaded
    stages = {d["metadata"]["name"] for d in documents[1:]}
    # Custom stages replace kwokctl's defaults: the node stages must be there or nodes never get Ready.
    assert {"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-delete"} <= stages
    assert "pod-complete-after-lifetime" in stages


@pytest.mark.parametrize("profile", ["default", "large"])
def test_the_scheduler_and_controller_manager_never_elect_a_leader(profile: str, tmp_path: Path) -> None:
    # alone in their cluster; with election on, a starved scheduler lost its lease and exited for good
    cluster = kwok.KwokCluster(
        "sim", tmp_path / "kwok", tmp_path / "bin", profile=kwok.profile_named(profile)
    )
    config = next(yaml.safe_load_all(kwok.write_kwokctl_config(cluster).read_text()))
    flags = {p["name"]: {a["key"]: a["value"] for a in p["extraArgs"]} for p in config["componentsPatches"]}
    assert flags["kube-controller-manager"]["leader-elect"] == "false"
    if "kubeSchedulerConfig" in config["options"]:
        scheduler = yaml.safe_load(Path(config["options"]["kubeSchedulerConfig"]).read_text())
        assert scheduler["leaderElection"] == {"leaderElect": False}
    else:
        assert flags["kube-scheduler"]["leader-elect"] == "false"


def test_unreadable_state_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{not json")
    with pytest.raises(StackError, match=r"state\.json"):
        StackState.load(path)


def test_invalid_cluster_name_is_rejected_before_anything_starts(tmp_path: Path) -> None:
    from pipeline.stack.stack import validate_cluster_name

    with pytest.raises(StackError, match="cluster name"):
        validate_cluster_name("bad name")
    assert LocalStack(tmp_path).status()["clusters"] == {}


def test_docker_compose_parses_and_has_the_pipeline_topology() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"kafka", "kwok-source", "kwok-sim"} <= set(services)
    for service in services.values():
        assert "image" in service or "build" in service
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{port} must bind loopback"


def test_docker_compose_config_is_valid_where_the_plugin_exists() -> None:
    import shutil
    import subprocess

    docker = shutil.which("docker")
    probe = (
        subprocess.run([docker, "compose", "version"], capture_output=True, check=False) if docker else None
    )
    if probe is None or probe.returncode != 0:
        pytest.skip("docker compose plugin not installed; the YAML check above covers parsing")
    result = subprocess.run(
        [docker, "compose", "-f", str(REPO_ROOT / "docker-compose.yml"), "config", "-q"],  # type: ignore[list-item]
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_cluster_with_metrics_runs_our_metrics_server_from_manifests_in_the_repo(tmp_path: Path) -> None:
    binary = tmp_path / "ms" / "metrics-server"
    cluster = kwok.KwokCluster("hpa", tmp_path / "kwok", tmp_path / "bin", metrics_server=binary)
    options = next(yaml.safe_load_all(kwok.write_kwokctl_config(cluster).read_text()))["options"]
    assert options["enable"] == ["metrics-server"]
    assert options["metricsServerBinary"] == str(binary)
    # a kustomize directory kwokctl renders with kubectl: without it, kwokctl fetches from the internet
    (manifests,) = options["metricsServerManifests"]
    assert not manifests.startswith(("http://", "https://"))
    assert (Path(manifests) / "kustomization.yaml").is_file()
    assert set(options["enableCRDs"]) == {"Metric", "ClusterResourceUsage", "ResourceUsage"}
    plain = kwok.KwokCluster("sim", tmp_path / "kwok", tmp_path / "bin")
    assert "enable" not in next(yaml.safe_load_all(kwok.write_kwokctl_config(plain).read_text()))["options"]


def test_the_default_profile_adds_nothing_to_the_cluster_config(tmp_path: Path) -> None:
    cluster = kwok.KwokCluster("sim", tmp_path / "kwok", tmp_path / "bin")
    documents = list(yaml.safe_load_all(kwok.write_kwokctl_config(cluster).read_text()))
    assert [d["kind"] for d in documents if d["kind"] != "Stage"] == ["KwokctlConfiguration"]
    assert "kubeSchedulerConfig" not in documents[0]["options"]
    patches = {p["name"]: p["extraArgs"] for p in documents[0]["componentsPatches"]}
    assert set(patches) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    # beyond the stack's own settings, only no leader election (one of each, nobody to elect against)
    assert (
        patches["kube-controller-manager"]
        == patches["kube-scheduler"]
        == [{"key": "leader-elect", "value": "false"}]
    )


@pytest.mark.parametrize("name", ["large", "large-sampled"])
def test_the_large_profiles_configure_controllers_scheduler_and_kwok(tmp_path: Path, name: str) -> None:
    cluster = kwok.KwokCluster("sim", tmp_path / "kwok", tmp_path / "bin", kwok.profile_named(name))
    documents = list(yaml.safe_load_all(kwok.write_kwokctl_config(cluster).read_text()))
    config = documents[0]
    patches = {p["name"]: {a["key"]: a["value"] for a in p["extraArgs"]} for p in config["componentsPatches"]}
    assert patches["kube-controller-manager"]["concurrent-deployment-syncs"] == "25"
    assert patches["etcd"]["unsafe-no-fsync"] == "true"  # the profile adds to the defaults, never drops
    assert patches["kube-apiserver"]["service-cluster-ip-range"] == "10.96.0.0/16"
    scheduler = yaml.safe_load(Path(config["options"]["kubeSchedulerConfig"]).read_text())
    assert (scheduler["apiVersion"], scheduler["kind"]) == (
        "kubescheduler.config.k8s.io/v1",
        "KubeSchedulerConfiguration",
    )
    assert scheduler["parallelism"] == 32
    # with a --config, kube-scheduler ignores kwokctl's --kube-api-qps: the file must lift the limit,
    # or every binding waits on the default 50 requests per second
    assert scheduler["clientConnection"]["qps"] >= 5000
    # spreading by hostname alone: the default's placements on the stack's unzoned nodes, without
    # the default's zone constraint counting every pod of the cluster for every pod scheduled
    ((spread,),) = [p["pluginConfig"] for p in scheduler["profiles"]]
    assert spread["name"] == "PodTopologySpread"
    assert spread["args"]["defaultingType"] == "List"
    assert [c["topologyKey"] for c in spread["args"]["defaultConstraints"]] == ["kubernetes.io/hostname"]
    assert spread["args"]["defaultConstraints"][0]["maxSkew"] == 3  # the system default's
    (kwok_config,) = [d for d in documents if d["kind"] == "KwokConfiguration"]
    assert kwok_config["options"]["podPlayStageParallelism"] == 16
    assert {d["metadata"]["name"] for d in documents if d["kind"] == "Stage"} >= {
        "node-initialize",
        "pod-ready",
    }
    # only the sampled profile changes where pods can land, and it says so
    sampled = name == "large-sampled"
    assert ("percentageOfNodesToScore" in scheduler) is sampled
    assert bool(cluster.profile.changes_scheduling) is sampled
    stated = kwok.profile_configmap(cluster.profile)["data"]
    assert stated["profile"] == name
    assert json.loads(stated["changesScheduling"]) == list(cluster.profile.changes_scheduling)
    # and the report names hostname-only spreading where it would place differently
    (zone_change,) = json.loads(stated["changesSchedulingOnZonedNodes"])
    assert "topology.kubernetes.io/zone" in zone_change


def test_an_unknown_profile_is_a_clear_error_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"unknown stack profile 'huge': choose one of default, large"):
        LocalStack(tmp_path).up(["sim"], profile="huge")
    assert not (tmp_path / "state.json").exists()


def test_the_replayer_reads_the_profile_where_the_stack_states_it() -> None:
    from pipeline.replay.setup import PROFILE_CONFIGMAP

    assert kwok.PROFILE_CONFIGMAP == PROFILE_CONFIGMAP
    stated = kwok.profile_configmap(kwok.profile_named("large"))["metadata"]
    assert (stated["namespace"], stated["name"]) == PROFILE_CONFIGMAP


@pytest.mark.parametrize("name", ["large", "large-sampled"])
def test_k8s_sim_mirrors_each_stack_profile(name: str) -> None:
    """Users' own simulation clusters get the same settings as the stack's (k8s/sim/profiles/NAME)."""
    profile = kwok.profile_named(name)
    folder = REPO_ROOT / "k8s" / "sim" / "profiles" / name
    stated = (folder / "cluster-profile.yaml").read_text()
    assert yaml.safe_load(stated) == kwok.profile_configmap(profile)
    assert yaml.safe_load((folder / "kube-scheduler.yaml").read_text()) == kwok.scheduler_configuration(
        profile
    )
    assert yaml.safe_load((folder / "kwok.yaml").read_text())["options"] == profile.kwok_options
    flags = " ".join(f"--{k}={v}" for k, v in profile.controller_manager_args.items())
    assert f"#   kube-controller-manager: {flags}\n" in stated


def test_a_component_that_exits_during_start_up_is_reported_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    log.write_text("starting\nERROR Address already in use\n")
    finished = subprocess.Popen(["true"])
    finished.wait()  # reaped: the pid is gone, as a crashed component's is
    with pytest.raises(StackError, match="the Kafka broker exited during start-up") as info:
        wait_until_ready("the Kafka broker", finished.pid, lambda: "no answer", log_file=log, timeout_s=5)
    assert str(log) in str(info.value)
    assert "Address already in use" in str(info.value), "the log's tail says why"


def test_a_component_that_never_gets_ready_says_what_it_last_saw(tmp_path: Path) -> None:
    answered: list[str] = []

    def probe() -> str:
        # each answer differs, so the message shows which one it quotes; how many fit in the wait
        # depends on the machine's load, so the expected text is read off what was answered
        answered.append(f"HTTP {500 + len(answered)}")
        return answered[-1]

    with pytest.raises(StackError, match=r"s3proxy did not become ready within 0s") as raised:
        wait_until_ready(
            "s3proxy",
            os.getpid(),  # alive for the whole wait
            probe,
            log_file=tmp_path / "missing.log",
            timeout_s=0.2,
            interval_s=0.05,
        )
    assert answered, "the component was never probed"
    assert f"(last: {answered[-1]})" in str(raised.value), (answered, str(raised.value))


def test_a_slow_start_that_makes_progress_is_waited_for_and_a_stalled_one_is_not(tmp_path: Path) -> None:
    """The deadline counts from the last progress (the log growing), so a start slowed by load is not
    failed at a fixed timeout; without progress the timeout holds as before."""
    calls = iter(range(1_000))
    answers = iter(["no answer yet"] * 6)
    wait_until_ready(
        "the Kafka broker",
        os.getpid(),
        lambda: next(answers, None),
        log_file=tmp_path / "broker.log",
        timeout_s=0.0,  # already past without progress: only the progress keeps the wait going
        interval_s=0.01,
        progress=lambda: next(calls),
    )
    with pytest.raises(StackError, match=r"did not become ready within 0s of no progress"):
        wait_until_ready(
            "the Kafka broker",
            os.getpid(),
            lambda: "no started line in the log yet",
            log_file=tmp_path / "broker.log",
            timeout_s=0.1,
            interval_s=0.01,
            progress=lambda: 42,
        )


def test_an_http_probe_counts_any_answer_below_its_limit_as_ready() -> None:
    class Forbidden(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(403)  # an S3 server refusing an anonymous request: it is up
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forbidden) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        assert http_probe(url, ready_below=500)() is None
        assert http_probe(url)() == "HTTP 403", "a readiness endpoint must answer 2xx"
        server.shutdown()
    assert http_probe(url)() is not None, "nobody listening: not ready, with the reason"


def test_a_go_module_the_proxy_does_not_have_is_a_clear_error(tmp_path: Path) -> None:
    go = tmp_path / "go"
    go.write_text("#!/bin/sh\necho 'sigs.k8s.io/karpenter@v9.9.9: 404 Not Found' >&2\nexit 1\n")
    go.chmod(0o755)
    work = GoWork(str(go), tmp_path, dict(os.environ), lambda _: None, tmp_path / "go.log")
    fetching = re.escape("could not fetch sigs.k8s.io/karpenter@v9.9.9 (Go toolchain x)")
    with pytest.raises(StackError, match=fetching) as info:
        work.download("sigs.k8s.io/karpenter@v9.9.9", "Go toolchain x")
    assert str(info.value).endswith("from the Go module proxy: sigs.k8s.io/karpenter@v9.9.9: 404 Not Found")


def _kwok_cluster_with_controller(tmp_path: Path, pid: int, port: int | None) -> kwok.KwokCluster:
    cluster = kwok.KwokCluster("c1", tmp_path, tmp_path / "bin")
    (cluster.cluster_dir / "pids").mkdir(parents=True)
    (cluster.cluster_dir / "logs").mkdir()
    (cluster.cluster_dir / "pids" / "kwok-controller.pid").write_text(str(pid))
    (cluster.cluster_dir / "logs" / "kwok-controller.log").write_text(
        'msg="Failed to run server" err="listen tcp 127.0.0.1:32739: bind: address already in use"\n'
    )
    if port is not None:
        (cluster.cluster_dir / "kwok.yaml").write_text(f"options:\n  kwokControllerPort: {port}\n")
    return cluster


def test_a_kwok_controller_that_exited_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    exited = subprocess.Popen(["true"])
    exited.wait()
    cluster = _kwok_cluster_with_controller(tmp_path, exited.pid, None)
    problem = kwok.kwok_controller_problem(cluster, timeout_s=1.0)
    assert "kwok-controller exited" in problem
    assert "address already in use" in problem


def test_a_kwok_controller_is_serving_once_its_port_answers(tmp_path: Path) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    try:
        cluster = _kwok_cluster_with_controller(tmp_path, os.getpid(), server.server_address[1])
        assert kwok.kwok_controller_problem(cluster, timeout_s=1.0) == ""
    finally:
        server.server_close()
    # the same port closed: alive but not serving, reported once the deadline passes
    assert "not serving" in kwok.kwok_controller_problem(cluster, timeout_s=0.5)


def _fake_kubectl(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "kubectl"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


def _cluster_creating_nodes(tmp_path: Path, on_create: str) -> tuple[kwok.KwokCluster, Path]:
    """A cluster whose kubectl renders a Node skeleton and runs the shell command ``on_create`` on what
    is created (stdin); the skeleton's path."""
    node = json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "kwok-node"}})
    _fake_kubectl(
        tmp_path / "bin", f"""case "$*" in\n  *dry-run*) echo '{node}' ;;\n  *) {on_create} ;;\nesac\n"""
    )
    skeleton = tmp_path / "node.yaml"
    skeleton.write_text("kind: Node\n")
    return kwok.KwokCluster("sim", tmp_path / "kwok", tmp_path / "bin"), skeleton


def test_nodes_are_created_in_batches_with_progress(tmp_path: Path) -> None:
    """Thousands of nodes in one request ran past kubectl's timeout; a batch at a time does not."""
    requests = tmp_path / "requests"
    count_items = """python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))'"""
    cluster, skeleton = _cluster_creating_nodes(tmp_path, f"{count_items} >> {requests}")
    lines: list[str] = []
    count = 2 * kwok.NODES_PER_REQUEST + 100
    names = kwok.add_nodes(cluster, skeleton, count, prefix="n", report=lines.append)
    assert names == [f"n-{i}" for i in range(count)]
    sizes = [int(n) for n in requests.read_text().split()]
    assert sizes == [kwok.NODES_PER_REQUEST, kwok.NODES_PER_REQUEST, 100]
    assert lines[-1] == f"cluster 'sim': {count} of {count} nodes created"


def test_each_node_names_the_path_kwok_serves_its_resource_metrics_at(tmp_path: Path) -> None:
    created = tmp_path / "created.json"
    cluster, skeleton = _cluster_creating_nodes(tmp_path, f"cat > {created}")
    kwok.add_nodes(cluster, skeleton, 2, prefix="n")
    paths = {
        n["metadata"]["name"]: n["metadata"]["annotations"][kwok.RESOURCE_METRICS_PATH_ANNOTATION]
        for n in json.loads(created.read_text())["items"]
    }
    assert paths == {
        "n-0": "/metrics/nodes/n-0/metrics/resource",
        "n-1": "/metrics/nodes/n-1/metrics/resource",
    }
    # the same path as the Metric KWOK serves, with its {nodeName} filled in
    metric = yaml.safe_load(kwok.KWOK_METRICS_RESOURCES[0].read_text())
    assert metric["spec"]["path"].replace("{nodeName}", "n-0") == paths["n-0"]


def test_a_kubectl_that_hangs_is_a_clear_error(tmp_path: Path) -> None:
    _fake_kubectl(tmp_path / "bin", "exec sleep 30\n")
    cluster = kwok.KwokCluster("sim", tmp_path / "kwok", tmp_path / "bin")
    with pytest.raises(StackError, match=r"`kubectl get nodes` on cluster 'sim' timed out after 0s") as info:
        cluster.kubectl("get", "nodes", timeout_s=0.3)
    assert "kube-apiserver.log" in str(info.value)


def _properties(layout: kafka.KafkaLayout) -> dict[str, str]:
    kafka.write_server_properties(layout)
    return dict(line.split("=", 1) for line in layout.properties.read_text().splitlines() if "=" in line)


def test_a_node_of_three_votes_with_the_others_and_replicates_everything_to_all(tmp_path: Path) -> None:
    quorum = ((1, 19093), (2, 29093), (3, 39093))
    props = _properties(kafka.KafkaLayout(tmp_path, 29092, 29093, node_id=2, quorum=quorum))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093"
    for replicated in ("default", "offsets.topic", "transaction.state.log", "share.coordinator.state.topic"):
        assert props[f"{replicated}.replication.factor"] == "3", replicated
    # acks=all writes go on with one broker of three down
    assert props["min.insync.replicas"] == props["transaction.state.log.min.isr"] == "2"


def test_an_old_state_file_reads_as_one_node(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(
        json.dumps(
            {
                "kafka": {
                    "broker_port": 1,
                    "controller_port": 2,
                    "pid": 3,
                    "security": "sasl-ssl",
                    "mtls_port": 4,
                }
            }
        )
    )
    state = StackState.load(path)
    assert state.kafka is not None
    assert [(n.broker_port, n.controller_port, n.pid, n.mtls_port) for n in state.kafka.nodes] == [
        (1, 2, 3, 4)
    ]
    assert state.kafka.security == "sasl-ssl"
    assert state.kafka.bootstrap == "localhost:1"
    state.save(path)
    assert StackState.load(path) == state


@pytest.mark.parametrize(
    ("running", "security", "brokers", "says"),
    [
        (None, None, 0, "--brokers 0: run between 1 and 5"),
        (None, None, 6, "--brokers 6: run between 1 and 5"),
        (None, "sasl-ssl", 3, "the secured broker runs alone"),
        (1, None, 3, "runs 1 Kafka broker\\(s\\), not 3; `kubetape stack down` first"),
        (3, "sasl-ssl", None, "has a plaintext broker, not sasl-ssl"),
    ],
)
def test_a_broker_count_or_mode_the_stack_cannot_run_is_refused_before_anything_starts(
    tmp_path: Path, running: int | None, security: str | None, brokers: int | None, says: str
) -> None:
    from pipeline.stack.state import KafkaNodeState, KafkaState, check_kafka_request

    current = KafkaState([KafkaNodeState(1, 2)] * running) if running else None
    with pytest.raises(StackError, match=says):
        check_kafka_request(current, security, brokers, tmp_path)
    check_kafka_request(current, None, running, tmp_path)  # what runs is fine


def test_three_nodes_bootstrap_through_every_broker() -> None:
    from pipeline.stack.state import KafkaNodeState, KafkaState

    state = KafkaState([KafkaNodeState(9001, 9101), KafkaNodeState(9002, 9102), KafkaNodeState(9003, 9103)])
    assert state.bootstrap == "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"


def test_a_lone_broker_keeps_one_replica_and_votes_alone(tmp_path: Path) -> None:
    props = _properties(kafka.KafkaLayout(tmp_path, broker_port=19092, controller_port=19093))
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["default.replication.factor"] == props["offsets.topic.replication.factor"] == "1"
    assert props["min.insync.replicas"] == "1"
    assert "broker.session.timeout.ms" not in props


_FAKE_GO = """#!/usr/bin/env python3
# A stand-in for the go command: records each call, answers `mod download -json` with a go.mod that
# has a staging replace, and makes the binaries `go build -o DIR/ PKG...` would, named as go names them.
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["FAKE_GO_CALLS"], "a") as calls:
    calls.write(json.dumps(args + ["GOGC=" + os.environ.get("GOGC", "")]) + "\\n")
if args[:3] == ["mod", "download", "-json"]:
    gomod = Path(os.environ["FAKE_GO_CALLS"]).with_name("upstream.mod")
    staging = "\\tk8s.io/api => ./staging/src/k8s.io/api\\n"
    gomod.write_text("module k8s.io/kubernetes\\nreplace (\\n" + staging + ")\\n")
    # a patched module's zip: the test's stand-in holding the texts the patches replace
    name = args[3].split("@")[0].rsplit("/", 1)[-1]
    module_zip = os.path.join(os.environ["FAKE_GO_MODULES"], name + ".zip")
    print(json.dumps({"GoMod": str(gomod), "Zip": module_zip}))
elif args[:1] == ["build"]:
    out = Path(args[args.index("-o") + 1])
    for package in [a for a in args if "/" in a and not a.startswith("-") and a != str(out) + "/"]:
        parts = package.split("/")
        name = parts[-2] if parts[-1][:1] == "v" and parts[-1][1:].isdigit() else parts[-1]
        (out / name).write_text("binary")
"""


def _patchable_modules(root: Path) -> Path:
    """Karpenter's and metrics-server's module zips as far as the stack's patches read them: each patched
    file holding its upstream text as often as the patch expects."""
    from pipeline.stack.go_module import KARPENTER_PATCHES, METRICS_SERVER_PATCHES
    from pipeline.stack.versions import StackVersions

    versions = StackVersions()
    root.mkdir(parents=True)
    for name, version, patches in (
        ("karpenter", versions.karpenter, KARPENTER_PATCHES),
        ("metrics-server", versions.metrics_server, METRICS_SERVER_PATCHES),
    ):
        files: dict[str, str] = {}
        for relative, upstream, _, count in patches:
            files[relative] = files.get(relative, "") + (upstream + "\n") * count
        with zipfile.ZipFile(root / f"{name}.zip", "w") as archive:
            for relative, text in files.items():
                archive.writestr(f"sigs.k8s.io/{name}@{version}/{relative}", text)
    return root


def test_the_cluster_binaries_come_from_one_go_build_under_the_names_the_stack_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.stack.build import ensure_kube_binaries
    from pipeline.stack.versions import ALL_KUBE_BINARIES

    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "go").write_text(_FAKE_GO)
    (fake_bin / "go").chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_CALLS", str(calls))
    monkeypatch.setenv("FAKE_GO_MODULES", str(_patchable_modules(tmp_path / "modules")))
    monkeypatch.setenv("KUBETAPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    versions = StackVersions()

    bin_dir = ensure_kube_binaries(versions, lambda _: None)

    assert sorted(p.name for p in bin_dir.iterdir() if not p.name.startswith(".")) == sorted(
        ALL_KUBE_BINARIES
    )
    invoked = [json.loads(line)[:-1] for line in calls.read_text().splitlines()]
    gogc = {json.loads(line)[-1] for line in calls.read_text().splitlines()}
    assert gogc == {"GOGC=off"}, "the compiler's garbage collection is held off (bounded by GOMEMLIMIT)"
    builds = [args for args in invoked if args[:1] == ["build"]]
    assert len(builds) == 1, f"one go build for every cluster binary, not {len(builds)}: {builds}"
    assert "-trimpath" in builds[0]
    # the staging modules are pinned to their published tags
    assert [
        "mod",
        "edit",
        f"-replace=k8s.io/api=k8s.io/api@v0.{versions.kubernetes.removeprefix('v1.')}",
    ] in invoked


def test_an_s3_server_that_never_gets_ready_is_stopped_not_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.stack import s3
    from pipeline.stack.processes import pid_alive, spawn_detached

    started: list[int] = []

    def start_a_server_that_never_answers(jar: Path, layout: s3.S3Layout) -> int:
        started.append(spawn_detached(["sleep", "300"], log_file=layout.log_file, cwd=layout.home))
        return started[-1]

    monkeypatch.setattr(s3, "ensure_s3proxy", lambda versions, report: tmp_path / "s3proxy.jar")
    monkeypatch.setattr(s3, "start_server", start_a_server_that_never_answers)
    monkeypatch.setattr(s3, "wait_ready", lambda layout, pid: (_ for _ in ()).throw(StackError("not ready")))
    (tmp_path / "s3").mkdir()

    with pytest.raises(StackError, match="not ready"):
        s3.ensure_running(tmp_path / "s3", None, StackVersions(), lambda _: None)

    assert len(started) == 1
    assert not pid_alive(started[0]), "the server that failed to start must not outlive the error"
