"""``--autoscaler`` input handling and the stack's Karpenter state: clear errors, before any cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.model.errors import ConfigError, MissingToolError
from pipeline.replay.inputs import load_node_pools, load_prices
from pipeline.stack.karpenter import KarpenterState, ensure_karpenter
from pipeline.stack.state import StackState
from pipeline.stack.versions import StackVersions, karpenter_dir
from services.cli import main

POOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption: {consolidateAfter: 1m}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: spot}
spec: {}
"""


def test_a_nodepool_file_may_hold_several_pools_each_scaled(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(POOL)
    pools, settings = load_node_pools(path, 6.0)
    assert [p["metadata"]["name"] for p in pools] == ["general", "spot"]
    assert pools[0]["spec"]["disruption"]["consolidateAfter"] == "10s"
    assert {s.name.split(":")[0] for s in settings} == {"NodePool general", "NodePool spot"}


def test_a_non_nodepool_document_names_the_file_and_document(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(POOL + "---\napiVersion: v1\nkind: Node\nmetadata: {name: n}\n")
    with pytest.raises(ConfigError, match=r"pools\.yaml \(document 2\): expected a Karpenter NodePool"):
        load_node_pools(path, 10.0)


@pytest.mark.parametrize("text", ["[1, 2]", "kwok-standard-4: cheap", "kwok-standard-4: -1", "a: true"])
def test_prices_must_map_types_to_non_negative_numbers(tmp_path: Path, text: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"--prices: .* non-negative"):
        load_prices(path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodepool", "p.yaml"], "add --autoscaler karpenter"),
        (["--prices", "p.yaml"], "add --autoscaler karpenter"),
        (["--instance-types", "t.json"], "add --autoscaler karpenter"),
        (["--autoscaler", "karpenter"], "needs at least one --nodepool"),
        (["--autoscaler", "karpenter", "--nodepool", "missing.yaml"], "--nodepool: cannot read missing.yaml"),
        (
            ["--autoscaler", "karpenter", "--nodepool", "p.yaml", "--speed", "max", "--max-lag", "5"],
            "which --speed max does not have",
        ),
    ],
)
def test_autoscaler_flags_are_checked_before_any_cluster(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", "--trace", "t", "--kubeconfig", "k", *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_karpenter_state_survives_the_state_file_and_old_files_still_load(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    running = KarpenterState("sim", 123, 1001, 1002, 0.1, 1.0, "/x/types.json")
    StackState(clusters=["sim"], karpenter={"sim": running}).save(path)
    assert StackState.load(path).karpenter == {"sim": running}
    path.write_text(json.dumps({"kafka": None, "clusters": ["sim"]}))  # written before Karpenter
    assert StackState.load(path).karpenter == {}


def test_karpenter_build_is_keyed_by_version_and_needs_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert karpenter_dir(StackVersions(), tmp_path) != karpenter_dir(
        StackVersions(karpenter="v1.14.0"), tmp_path
    )
    monkeypatch.setenv("KUBETAPE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MissingToolError, match="`go`"):
        ensure_karpenter(StackVersions(), lambda _: None)


def test_an_unreadable_instance_types_file_is_refused_with_the_expected_format(tmp_path: Path) -> None:
    from pipeline.replay.inputs import instance_types_for
    from pipeline.replay.plan import ReplayPlan

    bad = tmp_path / "types.json"
    bad.write_text("not json")
    plan = ReplayPlan([], {}, [], 0, 0, 0, None)
    with pytest.raises(
        ConfigError, match=r"--instance-types: cannot read .*types\.json as JSON .*karpenter-instance"
    ):
        instance_types_for(bad, plan, None)
    # no file and no recorded Nodes: the local Karpenter keeps the types it runs with
    assert instance_types_for(None, plan, None) is None


async def test_an_autoscaled_replay_offers_karpenter_the_instance_types_of_the_nodes_its_trace_recorded(
    tmp_path: Path,
) -> None:
    # a sweep's runs are replays too: each offers these
    from collections.abc import Mapping
    from dataclasses import replace
    from typing import Any

    from pipeline.formats.segment.content import build_segment
    from pipeline.formats.segment.encode import encode_segment
    from pipeline.formats.segment.header import SegmentKind
    from pipeline.model.events import Event
    from pipeline.model.keys import key_of
    from pipeline.replay.autoscale.settings import ScaledSetting
    from pipeline.replay.run import Autoscaling, ReplayRun, ReplaySpec, TraceFile
    from pipeline.replay.settings import ReplaySettings

    def recorded_node(name: str, kind: str) -> dict[str, object]:
        labels = {
            "node.kubernetes.io/instance-type": kind,
            "topology.kubernetes.io/zone": "z1",
            "karpenter.sh/nodepool": "general",
        }
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}  # fmt: skip

    nodes = [recorded_node("a", "m-8"), recorded_node("b", "c-8")]
    trace = tmp_path / "t.ktrace"
    events = [Event.applied(i * 1000, key_of(n), n, i) for i, n in enumerate(nodes)]
    trace.write_bytes(encode_segment(build_segment(events, start_ms=0, end_ms=5000, kind=SegmentKind.TRACE)))
    pool = tmp_path / "pool.yaml"
    pool.write_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}\nspec: {}\n")

    class Karpenter:  # the process's side: what it was restarted with
        def __init__(self) -> None:
            self.offered: list[tuple[float, Mapping[str, Any] | None]] = []

        def restart_at(self, speed: float, instance_types: Mapping[str, Any] | None) -> list[ScaledSetting]:
            self.offered.append((speed, instance_types))
            return []

    spec = ReplaySpec(
        TraceFile(str(trace)),
        ReplaySettings(speed=10.0),
        autoscaling=Autoscaling("karpenter", node_pool_files=(pool,)),
    )
    karpenter = Karpenter()
    run = ReplayRun(spec, autoscaler=karpenter)
    plan = await run.prepare()
    [(speed, types)] = karpenter.offered
    assert speed == 10.0
    assert types is not None
    assert sorted(t["name"] for t in types["types"]) == ["c-8", "m-8"]
    assert "derived from 2 recorded Node event(s)" in types["source"]
    # the recorded autoscaler's nodes are the reference, not replayed; its pool is, scaled
    assert plan.steps == []
    assert [p["metadata"]["name"] for p in run.settings.autoscaler_node_pools] == ["general"]
    # a file given wins over the recording
    given = tmp_path / "types.json"
    given.write_text(json.dumps([{"name": "x-2"}]))
    assert spec.autoscaling is not None
    karpenter = Karpenter()
    given_spec = replace(spec, autoscaling=replace(spec.autoscaling, instance_types_file=given))
    await ReplayRun(given_spec, autoscaler=karpenter).prepare()
    assert karpenter.offered == [(10.0, {"source": f"file {given}", "types": [{"name": "x-2"}]})]


def test_a_sweep_refuses_instance_types_without_an_autoscaler(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", "--trace", "t", "--kubeconfig", "k", "--out", "o", "--instance-types", "t.json"])
    assert code == 2
    assert "add --autoscaler karpenter" in capsys.readouterr().err
