"""A fleet on the real stack: two KWOK clusters (``source`` and ``source-b``) with different workloads, and
one object of the same name in both, recorded by two watchers into one broker's topics and, by one sink
per cluster, into one S3 store. For each cluster, the export holds exactly that cluster's recording (the
fold of its own records in the topic, the state its cluster shows) and none of the other's; the store
lists both clusters; a read without ``--cluster`` is refused naming them; topic-range reads keep one
cluster by header."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.formats.segment.content import Segment
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.wire.codec import decode_event
from pipeline.io.kafka.admin import topic_partitions
from pipeline.io.kafka.clients import new_consumer
from pipeline.io.kafka.headers import cluster_named
from pipeline.io.kafka.reads import tail_topic
from pipeline.io.kafka.settings import DEADLETTER_TOPIC, EVENTS_TOPIC, KafkaSettings
from pipeline.model.events import Event, EventType
from pipeline.model.keys import ClusterId
from pipeline.replay.run import read_segment_range
from pipeline.replay.sources import read_topic_trace
from pipeline.stack.state import StackInfo
from tests.integration.test_sink import KUBETAPE, direct_trace, wait_committed
from tests.integration.test_sink_s3 import sink_process
from tests.integration.test_watch_service import Workload, deployment, running_watcher, tracer_config
from tests.polling import eventually

pytestmark = pytest.mark.timeout(600)
__all__ = ["tracer_config"]  # the fixture, used by name

NS = "wt-fleet"
A = "fleet-a"  # configured; cluster B goes by its kube-system namespace UID (the default)


async def events_by_cluster(bootstrap: str) -> dict[str, list[Event]]:
    """Every event of the events topic up to its current end, by the cluster its header names."""
    settings = KafkaSettings(bootstrap)
    tps = await topic_partitions(settings, EVENTS_TOPIC)
    consumer = new_consumer(settings, group_id=None)
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: dict[str, list[Event]] = {}
        async with asyncio.timeout(60):
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    for m in msgs:
                        assert m.value is not None
                        out.setdefault(cluster_named(m.headers), []).append(decode_event(m.value))
        return out
    finally:
        await consumer.stop()


def final_deployments(trace: Segment) -> dict[str, int]:
    """``name: replicas`` of the Deployments of NS alive at the end of the trace (keyframe, then events)."""
    alive: dict[str, Any] = {}
    if trace.keyframe is not None:
        alive.update({str(k): e.obj for k, e in trace.keyframe.objects.items()})
    for e in trace.events:
        if e.type is EventType.APPLIED:
            alive[e.key] = e.obj
        elif e.type is EventType.DELETED:
            alive.pop(e.key, None)
    prefix = f"apps/Deployment/{NS}/"
    return {
        k.removeprefix(prefix): obj["spec"]["replicas"] for k, obj in alive.items() if k.startswith(prefix)
    }


def identities(trace: Segment) -> tuple[list[str], list[tuple[Any, ...]]]:
    """What a trace holds, independent of the order of events of equal time across partitions."""
    keyframe = sorted(map(str, trace.keyframe.objects)) if trace.keyframe is not None else []
    events = sorted((e.ts_ms, e.key, e.type.value, e.spec_hash, e.pod_start_ms or 0) for e in trace.events)
    return keyframe, events


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUBETAPE), *argv], capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.usefixtures("source_nodes")
async def test_two_clusters_in_one_topic_set_and_one_store_export_apart(
    stack_info: StackInfo,
    second_source: Path,
    tracer_config: Path,
    s3_url: str,
    tmp_path: Path,
) -> None:
    a, b = Workload(stack_info, NS), Workload(stack_info, NS)
    b.kubeconfig = second_source
    b_id = b.cluster_id()
    assert b_id != a.cluster_id()
    started_ms = int(time.time() * 1000)
    for w in (a, b):
        w.kubectl("create", "namespace", NS)
    bootstrap = stack_info.bootstrap
    async with (
        running_watcher(tracer_config, a.kubeconfig, bootstrap, "--cluster-id", A),
        running_watcher(tracer_config, b.kubeconfig, bootstrap),  # named by its kube-system UID
    ):
        a.apply(deployment("shared", 2, "app:a"))  # the same object key in both clusters
        a.apply(deployment("alpha", 1, "app:a"))
        b.apply(deployment("shared", 3, "app:b"))
        b.apply(deployment("beta", 2, "app:b"))
        await a.wait_running("app=shared", 2)
        await b.wait_running("app=beta", 2)

        def deployments_of(by_cluster: dict[str, list[Event]]) -> dict[str, set[str]]:
            prefix = f"apps/Deployment/{NS}/"
            return {
                c: {e.key.removeprefix(prefix) for e in by_cluster.get(c, []) if e.key.startswith(prefix)}
                for c in (A, b_id)
            }

        by_cluster = await eventually(
            lambda: events_by_cluster(bootstrap),
            lambda seen: deployments_of(seen) == {A: {"shared", "alpha"}, b_id: {"shared", "beta"}},
            "both clusters' Deployments in the events topic",
            timeout_s=90,
        )
    end_ms = int(time.time() * 1000) + 1
    start_ms = started_ms - 600_000

    groups = {c: f"kubetape-sink.{c}" for c in (A, b_id)}  # one consumer group per cluster
    with (
        sink_process(
            bootstrap,
            (EVENTS_TOPIC, groups[A], DEADLETTER_TOPIC),
            s3_url,
            tmp_path / "a.log",
            "",
            "--cluster",
            A,
        ),
        sink_process(
            bootstrap,
            (EVENTS_TOPIC, groups[b_id], DEADLETTER_TOPIC),
            s3_url,
            tmp_path / "b.log",
            "",
            "--cluster",
            b_id,
        ),
    ):
        for group in groups.values():
            await wait_committed(bootstrap, group, EVENTS_TOPIC, 3, within=180)

    listed = cli("inspect", "--clusters", s3_url)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == sorted([A, b_id])
    refused = cli("export", "--segment-store", s3_url, "--from", str(start_ms), "-o", str(tmp_path / "x"))
    assert refused.returncode != 0
    assert f"holds 2 clusters ({', '.join(sorted([A, b_id]))}); choose one with --cluster" in refused.stderr

    # a sink nobody named a cluster for records the topic's only one: here it stops, naming what to pass
    # (at start if the partitions' last records name several clusters, else at the first other one met)
    unnamed = cli("sink", "--bootstrap", bootstrap, "--segment-store", str(tmp_path / "unnamed"))
    assert unnamed.returncode == 2, unnamed.stderr
    assert "a sink records one cluster" in unnamed.stderr
    # The topic is the shared stack's: earlier tests' watchers wrote there too, and the sink names
    # whichever other cluster it meets first, so any cluster the topic holds is a right answer.
    in_topic = "|".join(re.escape(c) for c in by_cluster)
    assert re.search(rf"--cluster ({in_topic}|ID)\b", unnamed.stderr), unnamed.stderr[-2000:]

    expected_state = {A: {"shared": 2, "alpha": 1}, b_id: {"shared": 3, "beta": 2}}

    def other(cluster: str) -> str:
        return b_id if cluster == A else A

    for cluster in (A, b_id):
        out = tmp_path / f"{cluster}.kseg"
        done = cli(
            "export", "--segment-store", s3_url, "--cluster", cluster,
            "--from", str(start_ms), "--to", str(end_ms), "-o", str(out),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        exported = decode_segment(out.read_bytes())
        # what recording this cluster alone gives: the fold of its own records, nothing of the other's
        alone = decode_segment(direct_trace(by_cluster[cluster], start_ms, end_ms))
        assert identities(exported) == identities(alone), cluster
        assert final_deployments(exported) == expected_state[cluster]
        # replay --segments and a topic-range replay read the same cluster, by header
        assert (
            final_deployments(read_segment_range(s3_url, start_ms, end_ms, cluster=cluster))
            == (expected_state[cluster])
        )
        topic_range = await read_topic_trace(
            KafkaSettings(bootstrap), EVENTS_TOPIC, start_ms, end_ms, cluster=ClusterId(cluster)
        )
        assert final_deployments(topic_range) == expected_state[cluster]
        # --follow tails the live topic by the same header filter
        followed = await tailed(bootstrap, ClusterId(cluster), {e.key for e in by_cluster[cluster]})
        assert not {e.key for e in followed} & {e.key for e in by_cluster[other(cluster)]} - {
            e.key for e in by_cluster[cluster]
        }, "none of the other cluster's objects"
        assert replicas_applied(followed, "shared") == {expected_state[cluster]["shared"]}


async def tailed(bootstrap: str, cluster: ClusterId, keys: set[str]) -> list[Event]:
    """What tailing the topic from its start yields for ``cluster`` until every one of ``keys`` was seen."""
    events: list[Event] = []
    try:
        async with asyncio.timeout(60):
            async for batch in tail_topic(KafkaSettings(bootstrap), EVENTS_TOPIC, 0, cluster=cluster):
                events += [decode_event(m.value) for m in batch if m.value is not None]
                if keys <= {e.key for e in events}:
                    return events
    except TimeoutError:
        pass
    raise AssertionError(f"tailing {cluster} never met {sorted(keys - {e.key for e in events})}")


def replicas_applied(events: list[Event], name: str) -> set[int]:
    key = f"apps/Deployment/{NS}/{name}"
    return {e.obj["spec"]["replicas"] for e in events if e.key == key and e.obj is not None}
