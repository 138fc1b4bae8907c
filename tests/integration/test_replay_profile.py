"""A stack cluster created with a profile runs its components with the profile's settings, states the
profile, and a replay onto it (at ``--speed max``) names the profile and what of it changes scheduling."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import yaml

from pipeline.formats.segment.content import Segment, build_segment
from pipeline.formats.segment.header import SegmentKind
from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.connect import kube_api
from pipeline.io.kube.pod_watch import PodWatch
from pipeline.model.errors import ConfigError
from pipeline.model.events import Event
from pipeline.model.keys import key_of
from pipeline.replay.plan import plan_replay
from pipeline.replay.replayer import Replayer
from pipeline.replay.settings import ReplaySettings
from pipeline.replay.workload_manifests import deployment
from pipeline.stack import kwok
from pipeline.stack.stack import LocalStack

CLUSTER = "scale"
PROFILE = "large-sampled"


@pytest.fixture(scope="module")
def profiled(local_stack: LocalStack) -> Iterator[kwok.KwokCluster]:
    """A third cluster of the session's stack, created with the profile and deleted after the module
    (a cluster is small, but the machine is shared: it does not stay for the rest of the session)."""
    info = local_stack.up([CLUSTER], profile=PROFILE)
    cluster = kwok.KwokCluster(CLUSTER, local_stack.kwok_workdir, info.bin_dir, kwok.profile_named(PROFILE))
    try:
        yield cluster
    finally:
        local_stack.delete_cluster(CLUSTER)


def _argv(cluster: kwok.KwokCluster, binary: str) -> list[str]:
    for pid in kwok.cluster_processes(cluster):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        if Path(argv[0]).name == binary:
            return argv
    raise AssertionError(f"no {binary} process of cluster {cluster.name!r} runs")


def _config_path(argv: list[str]) -> Path:
    (value,) = [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    return Path(value)


def test_the_components_run_with_the_profile_and_the_cluster_states_it(profiled: kwok.KwokCluster) -> None:
    controllers = _argv(profiled, "kube-controller-manager")
    assert "--concurrent-deployment-syncs=25" in controllers
    assert "--concurrent-gc-syncs=50" in controllers
    scheduler = yaml.safe_load(_config_path(_argv(profiled, "kube-scheduler")).read_text())
    assert scheduler["percentageOfNodesToScore"] == 10
    assert scheduler["profiles"][0]["pluginConfig"][0]["args"]["defaultingType"] == "List"
    assert scheduler["parallelism"] == 32
    kwok_documents = list(yaml.safe_load_all(_config_path(_argv(profiled, "kwok-controller")).read_text()))
    (kwok_config,) = [d for d in kwok_documents if d and d.get("kind") == "KwokConfiguration"]
    assert kwok_config["options"]["podPlayStageParallelism"] == 16
    stated = yaml.safe_load(
        profiled.kubectl("get", "configmap", "-n", "kube-system", "kubetape-cluster-profile", "-o", "yaml")
    )
    assert stated["data"]["profile"] == PROFILE


def _trace() -> Segment:
    def web(replicas: int) -> dict[str, object]:
        return deployment("web", "shop", replicas, cpu="100m", memory="128Mi")

    events = [Event.applied(ts, key_of(web(n)), web(n), 0) for ts, n in ((0, 2), (20_000, 4), (40_000, 3))]
    return build_segment(events, start_ms=0, end_ms=60_000, kind=SegmentKind.TRACE)


async def test_a_replay_at_max_speed_names_the_profile_and_what_changes_scheduling(
    profiled: kwok.KwokCluster,
) -> None:
    trace = _trace()
    settings = ReplaySettings(
        speed=10,
        replay_name="profiled",
        namespace_prefix="profiled",
        node_pools=((yaml.safe_load(kwok.DEFAULT_NODE_SKELETON.read_text()), 2),),
        sample_interval_s=0.5,
        max_lag_s=5.0,
        max_speed=True,
        expect_profile=PROFILE,
    )
    async with kube_api(profiled.kubeconfig) as api:
        cluster = KubeClient(api)
        report = await Replayer(
            cluster, plan_replay(trace, 10), settings, pod_watch=partial(PodWatch, api)
        ).run()
        assert report.failed == 0, report.summary()
        assert report.speed_mode == "max"
        assert report.convergence is not None, report.summary()
        assert report.convergence["achieved_speed"]["requested"] == "max"
        assert report.cluster_profile is not None
        assert report.cluster_profile["profile"] == PROFILE
        assert report.cluster_profile["changes_scheduling"] == ["kube-scheduler percentageOfNodesToScore=10"]
        assert "settings that can change where pods land: kube-scheduler percentageOfNodesToScore=10" in (
            report.summary()
        )
        assert report.cleanup.startswith("done"), report.cleanup

        # the same cluster with zoned nodes: spreading by hostname alone places pods differently
        # there, and the report adds it to what changes scheduling
        zoned = yaml.safe_load(kwok.DEFAULT_NODE_SKELETON.read_text())
        zoned["metadata"]["labels"]["topology.kubernetes.io/zone"] = "zone-a"
        on_zones = replace(settings, replay_name="zoned", namespace_prefix="zoned", node_pools=((zoned, 2),))
        report = await Replayer(
            cluster, plan_replay(trace, 10), on_zones, pod_watch=partial(PodWatch, api)
        ).run()
        assert report.failed == 0, report.summary()
        assert report.cluster_profile is not None
        (zone_change,) = kwok.profile_named(PROFILE).changes_scheduling_on_zoned_nodes
        assert report.cluster_profile["changes_scheduling"] == [
            "kube-scheduler percentageOfNodesToScore=10",
            zone_change,
        ]
        assert zone_change in report.summary()

        refused = ReplaySettings(
            speed=10, replay_name="refused", namespace_prefix="refused", expect_profile="large"
        )
        with pytest.raises(ConfigError, match=f"states profile '{PROFILE}'"):
            await Replayer(cluster, plan_replay(trace, 10), refused).run()
