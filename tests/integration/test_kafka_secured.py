"""kubetape against a secured broker of the local stack (TLS from the stack's CA, SCRAM users, mutual TLS,
StandardAuthorizer with ACLs per kubetape principal), started once for this module: the recording path
works with each component's least privilege, the sink's export is byte-identical to a plaintext
broker's, and a denied or wrong client is told so at start. No password reaches a log line."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.admin import ensure_topic, topic_partitions
from pipeline.io.kafka.clients import new_producer
from pipeline.io.kafka.headers import cluster_header
from pipeline.io.kafka.security import load_security
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.sink_member import KafkaSinkSource
from pipeline.io.metrics import Metrics
from pipeline.model.errors import ConfigError, KubetapeError, StackError
from pipeline.model.events import Event
from pipeline.model.keys import ClusterId
from pipeline.sink.compactor import CompactionSettings
from pipeline.sink.settings import SinkSettings
from pipeline.sink.sink import Sink
from pipeline.sink.synthetic import synthetic_events
from pipeline.stack.kafka_security import SecurityFiles
from pipeline.stack.stack import LocalStack
from pipeline.stack.state import StackInfo
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportRequest, export_window
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.store_url import cluster_location, open_segment_store
from tests.integration.test_sink import direct_trace
from tests.integration.test_watch_service import (
    REPO,
    Workload,
    deployment,
    running_watcher,
    tracer_config,
)
from tests.polling import eventually

pytestmark = pytest.mark.timeout(600)
__all__ = ["tracer_config"]  # the fixture, used by name
NS = "wt-secured"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """A secured broker alone (no clusters, no S3): one start for the module."""
    stack = LocalStack(tmp_path_factory.mktemp("secured-stack"))
    try:
        info = stack.start_kafka("sasl-ssl")
    except StackError as exc:
        with contextlib.suppress(StackError):
            stack.down()
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"the secured broker could not start: {exc}")
        pytest.skip(f"the secured broker could not start: {exc}")
    try:
        yield info
    finally:
        stack.down()


def _files(info: StackInfo) -> SecurityFiles:
    return SecurityFiles(info.stack_dir / "kafka" / "security")


def _settings(info: StackInfo, principal: str, mode: str = "sasl-ssl", **env: str) -> KafkaSettings:
    security, bootstrap = load_security(_files(info).client_config(principal, mode), env)
    assert bootstrap is not None
    return KafkaSettings(bootstrap, client_id=f"it-{principal}", security=security)


def _t0() -> int:
    now = int(time.time() * 1000) - 3_600_000
    return now - now % 60_000


async def _produce(settings: KafkaSettings, topic: str, events: list[Event]) -> None:
    producer = new_producer(settings)
    await producer.start()
    try:
        for e in events:
            await producer.send(topic, encode_event(e), key=e.key.encode(), timestamp_ms=e.ts_ms)
        await producer.flush()
    finally:
        await producer.stop()


@contextlib.asynccontextmanager
async def _sink(
    settings: KafkaSettings, topic: str, group: str, dlq: str, store: Path
) -> AsyncIterator[Sink]:
    sink_settings = SinkSettings(
        CompactionSettings(topic=topic, idle_close_s=2.0, keyframe_every=3), 2_000, 200
    )
    source = KafkaSinkSource(settings, topic, group_id=group, deadletter_topic=dlq)
    sink = Sink(source, LocalSegmentStore(store), sink_settings, Metrics())
    source.on_assigned = sink.on_assigned
    source.on_revoked = sink.on_revoked
    stop = asyncio.Event()
    async with source:
        task = asyncio.create_task(sink.run(stop))
        try:
            yield sink
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)


async def _committed(settings: KafkaSettings, group: str, topic: str) -> None:
    """As ``wait_committed``, over the secured connection."""
    from pipeline.io.kafka.clients import new_consumer

    partitions = await topic_partitions(settings, topic)
    probe = new_consumer(settings, group_id=group)
    await probe.start()
    try:
        ends = await probe.end_offsets(partitions)

        async def committed() -> dict[int, int]:
            return {tp.partition: (await probe.committed(tp)) or 0 for tp in partitions}

        await eventually(
            committed,
            lambda seen: all(seen[tp.partition] >= ends[tp] for tp in partitions),
            f"group {group} committing up to {ends}",
            timeout_s=90,
        )
    finally:
        await probe.stop()


async def test_a_sink_over_sasl_ssl_and_over_mutual_tls_exports_the_bytes_of_a_plaintext_sink(
    secured: StackInfo, tmp_path: Path
) -> None:
    """A plaintext sink's export is the direct fold of the events (``test_sink`` holds it to that); so
    is a secured one's, byte for byte."""
    tag = uuid.uuid4().hex[:8]
    topic, dlq = f"it.secure.{tag}", f"it.secure.dlq.{tag}"
    t0 = _t0()
    events = synthetic_events(1_500, t0, 300_000)
    exports: dict[str, bytes] = {}
    runs = {
        "sasl-ssl": _settings(secured, "admin"),
        "mtls": _settings(secured, "admin", "mtls"),
    }
    for name, settings in runs.items():
        run_topic = f"{topic}.{name}"
        await ensure_topic(settings, run_topic, 3)
        await ensure_topic(settings, dlq, 1)
        await _produce(settings, run_topic, events)
        group = f"it.secure.group.{tag}.{name}"
        async with _sink(settings, run_topic, group, dlq, tmp_path / name):
            await _committed(settings, group, run_topic)
        catalog = SegmentCatalog(LocalSegmentStore(tmp_path / name))
        exports[name] = export_window(catalog, ExportRequest(t0, t0 + 300_000)).data
    assert exports["sasl-ssl"] == direct_trace(events, t0, t0 + 300_000)
    assert exports["mtls"] == exports["sasl-ssl"]


async def test_a_principal_is_refused_what_its_acls_do_not_allow_naming_the_topic(secured: StackInfo) -> None:
    with pytest.raises(ConfigError, match=r"topic 'it\.nope' does not exist on localhost:\d+ \(SASL_SSL, "
                       r"SCRAM-SHA-512 as sink\) and sink may not create it"):  # fmt: skip
        await ensure_topic(_settings(secured, "sink"), "it.nope", 1)


def _refused_client(secured: StackInfo, case: str) -> KafkaSettings:
    sink = _settings(secured, "sink")
    if case == "wrong password":
        return _settings(secured, "sink", KUBETAPE_KAFKA_SASL_PASSWORD="wrong")
    if case == "mechanism the broker does not enable":
        return _settings(secured, "sink", KUBETAPE_KAFKA_SASL_MECHANISM="PLAIN")
    if case == "untrusted certificate":
        return _settings(secured, "sink", KUBETAPE_KAFKA_SSL_CA_LOCATION="/etc/ssl/certs/ca-certificates.crt")
    if case == "host name mismatch":
        return dataclasses.replace(sink, bootstrap=sink.bootstrap.replace("localhost", "127.0.0.1"))
    assert case == "no client certificate for mutual TLS"
    mtls = _settings(secured, "sink", "mtls")
    security = dataclasses.replace(mtls.security, certificate_location=None, key_location=None)
    return dataclasses.replace(mtls, security=security)


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("wrong password", "authentication as 'sink' with SCRAM-SHA-512 failed"),
        ("mechanism the broker does not enable", "does not accept sasl.mechanism PLAIN"),
        ("untrusted certificate", "the broker's certificate is not trusted"),
        ("host name mismatch", "not valid for the name '127.0.0.1'"),
        ("no client certificate for mutual TLS", "TLS handshake failed"),
    ],
)
async def test_a_refused_client_stops_at_start_saying_why(secured: StackInfo, case: str, says: str) -> None:
    with pytest.raises(ConfigError, match="refuses this client") as caught:
        await asyncio.wait_for(topic_partitions(_refused_client(secured, case), "kubetape.events"), 90)
    assert says in str(caught.value)
    assert _files(secured).password("sink") not in str(caught.value)


async def test_an_expired_client_certificate_stops_at_start_naming_the_file(
    secured: StackInfo, tmp_path: Path
) -> None:
    from pipeline.stack.kafka_security import issue_client_certificate

    certificate, key = tmp_path / "sink.crt", tmp_path / "sink.key"
    issue_client_certificate(_files(secured), "sink", certificate, key, expired=True)
    settings = _settings(
        secured,
        "sink",
        "mtls",
        KUBETAPE_KAFKA_SSL_CERTIFICATE_LOCATION=str(certificate),
        KUBETAPE_KAFKA_SSL_KEY_LOCATION=str(key),
    )
    with pytest.raises(ConfigError, match="refuses this client") as caught:
        await asyncio.wait_for(topic_partitions(settings, "kubetape.events"), 90)
    assert "the brokers refuse this client's certificate" in str(caught.value)
    assert f"ssl.certificate.location {certificate}" in str(caught.value)
    assert ": expired" in str(caught.value)  # the file's own dates say so


async def test_an_acl_denial_names_the_principal_the_operation_and_the_topic(secured: StackInfo) -> None:
    with pytest.raises(
        ConfigError, match=r"denies User:replayer the operation Describe on topic 'kubetape\.state'"
    ):
        await topic_partitions(_settings(secured, "replayer"), "kubetape.state")


@pytest.mark.usefixtures("source_nodes")
async def test_watch_sink_export_over_sasl_ssl_with_least_privilege_and_no_password_in_logs(
    secured: StackInfo, stack_info: StackInfo, tracer_config: Path, tmp_path: Path
) -> None:
    files = _files(secured)
    workload = Workload(stack_info, NS)
    workload.kubectl("create", "namespace", NS)
    started_ms = int(time.time() * 1000) - 60_000
    store, sink_log = tmp_path / "segments", tmp_path / "sink.log"
    sink_argv = [
        sys.executable, "-m", "services.cli", "sink",
        "--kafka-config", str(files.client_config("sink", "sasl-ssl")),
        "--segment-store", str(store), "--http-port", "0", "--idle-close", "1s",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBETAPE_")}
    async with running_watcher(
        tracer_config,
        workload.kubeconfig,
        secured.bootstrap,
        "--kafka-config",
        str(files.client_config("watcher", "sasl-ssl")),
    ) as watcher:
        workload.apply(deployment("secure", 2, "app:secure"))
        await workload.wait_running("app=secure", 2)
        with sink_log.open("wb") as out:
            sink = subprocess.Popen(sink_argv, cwd=REPO, stdout=out, stderr=out, env=env)  # noqa: ASYNC220
        try:

            async def exported() -> set[str]:
                if not store.exists():
                    return set()
                try:
                    # the watcher records under the source cluster's kube-system UID: its sub-store
                    catalog = SegmentCatalog(open_segment_store(cluster_location(store, None)))
                    data = export_window(catalog, ExportRequest(started_ms, int(time.time() * 1000))).data
                except KubetapeError:
                    return set()
                return {str(e.key) for e in decode_segment(data, "export").events}

            await eventually(
                exported, lambda keys: f"apps/Deployment/{NS}/secure" in keys, "the export", timeout_s=180
            )
        finally:
            sink.terminate()
            sink.wait(60)
        watcher_lines = "\n".join(map(str, watcher.lines))
    # the source cluster is shared with the modules after this one (the e2e mission records all of it):
    # leave it as it was found
    workload.kubectl("delete", "namespace", NS, "--wait=true", "--timeout=120s")
    logs = watcher_lines + sink_log.read_text(errors="replace")
    for principal in ("watcher", "sink", "admin"):
        assert files.password(principal) not in logs


async def test_topics_create_makes_the_set_and_describe_and_check_tell_what_is_wrong(
    secured: StackInfo,
) -> None:
    from pipeline.io.kafka.topics import check_topics, create_topics, describe_topics, topic_set

    admin = _settings(secured, "admin")
    events = f"it.topics.{uuid.uuid4().hex[:8]}"
    specs = topic_set(partitions=2, replication_factor=1, min_insync_replicas=1, retention_ms=86_400_000)
    specs = [dataclasses.replace(specs[0], name=events), *specs[1:]]
    assert (await create_topics(admin, specs))[events] == "created"
    assert (await create_topics(admin, specs))[events] == "exists"
    found = await describe_topics(admin, [events, "kubetape.state", "it.topics.missing"])
    assert found[events]["partitions"] == 2
    assert found[events]["replication_factor"] == 1
    assert found[events]["configs"]["retention.ms"] == "86400000"
    assert found["kubetape.state"]["configs"]["cleanup.policy"] == "compact"
    assert found["it.topics.missing"] == {"exists": False}
    await check_topics(admin, [events, "kubetape.state"], compacted=("kubetape.state",))
    with pytest.raises(ConfigError, match=rf"topic '{events}' has cleanup.policy 'delete', not compact"):
        await check_topics(admin, [events], compacted=(events,))
    missing = r"topic 'it\.topics\.missing' does not exist.*kubetape topics create"
    with pytest.raises(ConfigError, match=missing):
        await check_topics(admin, ["it.topics.missing"])


async def test_a_sink_started_before_any_record_is_alive_and_learns_the_cluster_from_the_first(
    secured: StackInfo, tmp_path: Path
) -> None:
    """The natural order of starts (sink, then watcher) on an empty topic: /healthz answers, /readyz
    says 503, and the first record's cluster is the one recorded (not 'default')."""
    import socket

    import aiohttp

    tag = uuid.uuid4().hex[:8]
    topic, dlq = f"it.early.{tag}", f"it.early.dlq.{tag}"
    admin = _settings(secured, "admin")
    await ensure_topic(admin, topic, 2)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "sink.log"
    argv = [
        sys.executable, "-m", "services.cli", "sink",
        "--kafka-config", str(_files(secured).client_config("admin", "sasl-ssl")),
        "--topic", topic, "--group", f"it.early.group.{tag}", "--deadletter-topic", dlq,
        "--segment-store", str(tmp_path / "segments"), "--http-port", str(port), "--idle-close", "1s",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBETAPE_")}
    with log.open("wb") as out:
        sink = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=out, env=env)  # noqa: ASYNC220
    try:
        async with aiohttp.ClientSession() as session:

            async def statuses() -> tuple[int, int] | str:
                try:
                    async with (
                        session.get(f"http://127.0.0.1:{port}/healthz") as health,
                        session.get(f"http://127.0.0.1:{port}/readyz") as ready,
                    ):
                        return health.status, ready.status
                except aiohttp.ClientError as exc:
                    return f"{type(exc).__name__}: {log.read_text(errors='replace')[-400:]}"

            await eventually(statuses, lambda s: s == (200, 503), "alive but not ready while waiting")
            cluster = ClusterId("early-eu")
            producer = new_producer(admin)
            await producer.start()
            try:
                for e in synthetic_events(20, _t0(), 60_000):
                    await producer.send(
                        topic, encode_event(e), key=e.key.encode(), headers=cluster_header(cluster)
                    )
                await producer.flush()
            finally:
                await producer.stop()

            async def started() -> str:
                return log.read_text(errors="replace")

            text = await eventually(started, lambda t: "sink started" in t, "the sink's start", timeout_s=90)
            assert re.search(r'"cluster": ?"early-eu"', text), text[-800:]
            await eventually(statuses, lambda s: s == (200, 200), "ready once the cluster is known")
    finally:
        sink.terminate()
        sink.wait(60)


async def test_a_topic_deleted_and_recreated_past_the_stores_end_is_refused_by_its_topic_id(
    secured: StackInfo, tmp_path: Path
) -> None:
    """Offsets alone missed it: the re-created topic grew past what the store held, so the sink read on
    as if nothing had happened and lost the new topic's first events. The topic id tells them apart."""
    from pipeline.io.kafka.admin import admin_client
    from pipeline.sink.source import TopicIdentityError

    admin = _settings(secured, "admin")
    tag = uuid.uuid4().hex[:8]
    topic, dlq, group = f"it.recreated.{tag}", f"it.recreated.dlq.{tag}", f"it.recreated.group.{tag}"
    await ensure_topic(admin, topic, 1)
    await ensure_topic(admin, dlq, 1)
    t0 = _t0()
    await _produce(admin, topic, synthetic_events(50, t0, 60_000))
    store = tmp_path / "segments"
    async with _sink(admin, topic, group, dlq, store):
        await _committed(admin, group, topic)
    async with admin_client(admin) as client:
        await client.delete_topics([topic])

    async def recreated() -> bool:
        return await ensure_topic(admin, topic, 1)

    await eventually(recreated, bool, "the topic re-created")
    await _produce(admin, topic, synthetic_events(120, t0 + 120_000, 60_000))
    compaction = CompactionSettings(topic=topic, idle_close_s=2.0, keyframe_every=3)
    source = KafkaSinkSource(admin, topic, group_id=f"{group}.2", deadletter_topic=dlq)
    sink = Sink(source, LocalSegmentStore(store), SinkSettings(compaction, 2_000, 200), Metrics())
    source.on_assigned = sink.on_assigned
    source.on_revoked = sink.on_revoked
    async with source:
        # the refusal ends the sink's loop at its first assignment
        with pytest.raises(TopicIdentityError, match="another Kafka cluster, or the topic was recreated"):
            await asyncio.wait_for(sink.run(asyncio.Event()), 120)


async def _publish(settings: KafkaSettings, events: list[Event], cluster: ClusterId) -> None:
    """Publish ``events`` on ``kubetape.events`` as a watcher of ``cluster`` does (key, time, header)."""
    producer = new_producer(settings)
    await producer.start()
    try:
        for e in events:
            await producer.send(
                "kubetape.events", encode_event(e), key=e.key.encode(), timestamp_ms=e.ts_ms,
                headers=cluster_header(cluster),
            )  # fmt: skip
        await producer.flush()
    finally:
        await producer.stop()


async def test_a_topic_range_replays_and_an_analytics_group_reads_with_their_own_least_privilege(
    secured: StackInfo,
) -> None:
    """The reading side over SASL_SSL: the replayer reads a range of kubetape.events without a group, the
    analytics consumer with its group and commits; neither may write, and the replayer may use no group."""
    from pipeline.io.kafka.reader import TopicReader
    from pipeline.replay.sources import read_topic_trace

    cluster = ClusterId(f"range-{uuid.uuid4().hex[:6]}")
    # A time range is found per partition by offsets_for_times, which presumes event times that grow
    # along the partition, as one watcher writes them. kubetape.events is shared with the watch test
    # above, whose events are dated now: events dated an hour back would sit after them and fall outside
    # any range that starts an hour back. So this test's events are dated from now on.
    t0 = int(time.time() * 1000)
    events = synthetic_events(200, t0, 60_000)
    admin = _settings(secured, "admin")
    await ensure_topic(admin, "kubetape.events", 3)
    await _publish(admin, events, cluster)
    trace = await read_topic_trace(
        _settings(secured, "replayer"), "kubetape.events", t0, t0 + 60_000, cluster=cluster
    )
    keyframe = {str(k) for k in trace.keyframe.objects} if trace.keyframe else set()
    assert {str(e.key) for e in trace.events} | keyframe >= {str(e.key) for e in events}
    analytics = _settings(secured, "analytics")
    group = f"kubetape-analytics-timeline.{cluster}"
    async with TopicReader(
        analytics, "kubetape.events", start="committed", end="current", group_id=group, cluster=cluster
    ) as reader:
        seen, next_offsets = 0, {}
        while not reader.finished():
            for message in await reader.fetch(500, 1000):
                seen += 1
                next_offsets[message.partition] = message.offset + 1
        await reader.commit(next_offsets)  # the group's Read ACL covers its commits
    assert seen == len(events)
    from aiokafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError

    with pytest.raises((ClusterAuthorizationFailedError, TopicAuthorizationFailedError)):  # read only
        await asyncio.wait_for(_produce(_settings(secured, "replayer"), "kubetape.events", events[:1]), 60)


def test_stack_env_prints_what_a_client_needs_and_no_password(secured: StackInfo) -> None:
    lines = secured.env_lines()
    admin_config = _files(secured).client_config("admin", "sasl-ssl")
    assert f"export KUBETAPE_BOOTSTRAP={secured.bootstrap}" in lines
    assert secured.bootstrap.startswith("localhost:")  # the name in the broker's certificate
    assert f"export KUBETAPE_KAFKA_CONFIG={admin_config}" in lines
    assert any(str(_files(secured).client_config("watcher", "sasl-ssl")) in line for line in lines)
    assert not any(_files(secured).password(p) in "\n".join(lines) for p in ("admin", "watcher", "sink"))
    assert oct(admin_config.stat().st_mode & 0o777) == "0o600"


# ---- after start: the brokers stop accepting a running component, and accept it again ------------
_ACL_CODES = {"TOPIC": 2, "GROUP": 3, "LITERAL": 3, "PREFIXED": 4, "READ": 3, "WRITE": 4, "ALLOW": 3}


async def _acl(secured: StackInfo, action: str, principal: str, acl: tuple[str, str, str, str]) -> None:
    """Create or delete one ALLOW ACL of the stack's (``kafka_security.ACLS``), as the admin: Kafka's
    CreateAcls / DeleteAcls requests (aiokafka has the messages, not the admin calls)."""
    from aiokafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest

    from pipeline.io.kafka.admin import admin_client

    resource, pattern, name, operation = acl
    request = CreateAclsRequest if action == "create" else DeleteAclsRequest
    async with admin_client(_settings(secured, "admin")) as admin:
        response = await admin._send_request(
            request(
                _ACL_CODES[resource],
                name,
                _ACL_CODES[pattern],
                f"User:{principal}",
                "*",
                _ACL_CODES[operation],
                _ACL_CODES["ALLOW"],
            )
        )
    results = getattr(response, "creation_responses", None) or getattr(response, "filter_responses", [])
    assert all(result[0] == 0 for result in results), response


@contextlib.asynccontextmanager
async def _revoked(secured: StackInfo, principal: str, acl: tuple[str, str, str, str]) -> AsyncIterator[None]:
    """``acl`` removed for the block; put back whatever happens (the module's later tests rely on it)."""
    from pipeline.stack.kafka_security import ACLS

    assert acl in ACLS[principal]
    await _acl(secured, "delete", principal, acl)
    try:
        yield
    finally:
        await _acl(secured, "create", principal, acl)


async def test_a_consumer_group_the_principal_may_not_read_is_refused_at_start_naming_it(
    secured: StackInfo,
) -> None:
    from pipeline.io.kafka.reader import TopicReader

    await ensure_topic(_settings(secured, "admin"), "kubetape.events", 3)
    group = f"it.nogroup.{uuid.uuid4().hex[:8]}"
    source = KafkaSinkSource(_settings(secured, "sink"), "kubetape.events", group_id=group)
    says = rf"denies User:sink the operation Read on consumer group '{re.escape(group)}'; grant it"

    async def consume() -> None:
        async with asyncio.timeout(60):
            while True:
                await source.getmany(200, 10)

    async with source:
        with pytest.raises(ConfigError, match=says):
            await consume()
    analytics = _settings(secured, "analytics")
    with pytest.raises(ConfigError, match=says.replace("sink", "analytics")):
        async with TopicReader(
            analytics, "kubetape.events", start="committed", end="current", group_id=group
        ):
            pass


@pytest.mark.parametrize(
    ("acl", "says"),
    [
        (("GROUP", "PREFIXED", "kubetape-sink", "READ"), "consumer group 'kubetape-sink."),
        (("TOPIC", "LITERAL", "kubetape.events", "READ"), "topic 'kubetape.events'"),
    ],
    ids=["group", "topic"],
)
async def test_a_running_sink_denied_its_group_or_topic_is_not_ready_says_so_once_and_loses_nothing(
    secured: StackInfo, tmp_path: Path, acl: tuple[str, str, str, str], says: str
) -> None:
    """One of the sink principal's Read ACLs is removed while the sink runs, and events arrive
    meanwhile: /readyz says 503 and the log says once who is denied what; with the ACL back, /readyz
    says 200 and the export holds every event once (byte-identical to the direct fold). A group
    denial makes the sink join again with a new consumer (aiokafka's stays failed), a topic denial
    does not."""
    import socket

    import aiohttp

    cluster = ClusterId(f"denied-{uuid.uuid4().hex[:6]}")
    admin = _settings(secured, "admin")
    await ensure_topic(admin, "kubetape.events", 3)
    await ensure_topic(admin, "kubetape.deadletter", 1)
    t0 = int(time.time() * 1000) - 60_000  # the topic is shared: dated now, after the tests above
    events = synthetic_events(300, t0, 30_000)

    async def produce(batch: list[Event]) -> None:
        await _publish(admin, batch, cluster)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store, log = tmp_path / "segments", tmp_path / "sink.log"
    argv = [
        sys.executable, "-m", "services.cli", "sink",
        "--kafka-config", str(_files(secured).client_config("sink", "sasl-ssl")),
        "--cluster", cluster, "--segment-store", str(store), "--http-port", str(port), "--idle-close", "1s",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBETAPE_")}
    await produce(events[:150])
    with log.open("wb") as out:
        sink = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=out, env=env)  # noqa: ASYNC220
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> int | str:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as answer:
                        return answer.status
                except aiohttp.ClientError as exc:
                    return f"{type(exc).__name__}: {log.read_text(errors='replace')[-600:]}"

            def exported() -> bytes:
                catalog = SegmentCatalog(open_segment_store(cluster_location(store, cluster)))
                return export_window(catalog, ExportRequest(t0, t0 + 30_000)).data

            async def export_now() -> bytes | str:
                try:
                    return await asyncio.to_thread(exported)
                except KubetapeError as exc:
                    return str(exc)

            await eventually(ready, lambda s: s == 200, "the sink ready", timeout_s=90)
            first = direct_trace(events[:150], t0, t0 + 30_000)
            await eventually(export_now, lambda data: data == first, "the first half exported", timeout_s=90)
            async with _revoked(secured, "sink", acl):
                await produce(events[150:])
                await eventually(ready, lambda s: s == 503, "/readyz 503 while the sink is denied")
            await eventually(ready, lambda s: s == 200, "/readyz 200 with the grant back", timeout_s=90)
            whole = direct_trace(events, t0, t0 + 30_000)
            await eventually(export_now, lambda data: data == whole, "every event exported", timeout_s=90)
    finally:
        sink.terminate()
        sink.wait(60)
    text = log.read_text(errors="replace")
    # the event consumer's; the usage consumer (group kubetape-sink.usage, under the same prefix ACL) says
    # so once of its own when the usage topic exists on this broker
    denials = [
        line
        for line in text.splitlines()
        if "denies User:sink the operation Read" in line and "the sink's consumer:" in line
    ]
    assert len(denials) == 1, denials  # one clear error, not one per retry
    assert says in denials[0]
    assert "accepts User:sink again; ready" in text
    assert _files(secured).password("sink") not in text


async def test_a_publisher_denied_its_topic_is_not_connected_says_so_once_and_delivers_each_change_once(
    secured: StackInfo, caplog: pytest.LogCaptureFixture
) -> None:
    """The watcher's Write ACL on the events topic is removed while it publishes: it stops counting as
    connected (the watch service's /readyz), logs one error naming the principal, the operation and the
    topic, keeps the changes, and with the ACL back delivers each exactly once, in order."""
    import logging

    from pipeline.io.kafka.message import Record
    from pipeline.io.kafka.publisher import KafkaPublisher
    from pipeline.io.kafka.reader import TopicReader

    cluster = ClusterId(f"pub-{uuid.uuid4().hex[:6]}")
    await ensure_topic(_settings(secured, "admin"), "kubetape.events", 3)
    t0 = int(time.time() * 1000)
    keys = [f"core/ConfigMap/denied/cm-{i % 7}" for i in range(60)]

    def unit(i: int) -> list[Record]:
        return [Record("kubetape.events", keys[i], f"change {i}".encode(), t0 + i)]

    caplog.set_level(logging.INFO, logger="kubetape.publisher")
    async with KafkaPublisher(_settings(secured, "watcher"), cluster=cluster) as publisher:
        for i in range(20):
            await publisher.submit(unit(i))
        await asyncio.wait_for(publisher.flush(), 60)
        async with _revoked(secured, "watcher", ("TOPIC", "LITERAL", "kubetape.events", "WRITE")):
            for i in range(20, 40):
                await publisher.submit(unit(i))

            async def connected() -> bool:
                return publisher.connected

            await eventually(connected, lambda ok: not ok, "the publisher denied")
            await asyncio.sleep(3)  # several retries, each would have logged
            assert publisher.seconds_without_ack() >= 3  # what the watch service's /readyz checks
        for i in range(40, 60):
            await publisher.submit(unit(i))
        await asyncio.wait_for(publisher.flush(), 90)
        assert publisher.connected
        assert publisher.access.ok
    denials = [r.getMessage() for r in caplog.records if "denies User:watcher" in r.getMessage()]
    assert len(denials) == 1, denials
    assert "the operation Write on topic 'kubetape.events'" in denials[0]
    seen: list[bytes] = []
    async with TopicReader(
        _settings(secured, "replayer"), "kubetape.events", start=t0, end="current", cluster=cluster
    ) as reader:
        while not reader.finished():
            seen += [m.value or b"" for m in await reader.fetch(500, 1000)]
    assert sorted(seen) == sorted(f"change {i}".encode() for i in range(60))  # each once
    for key in set(keys):  # each key's changes in the order they were made
        mine = [int(v.split()[1]) for v in seen if keys[int(v.split()[1])] == key]
        assert mine == sorted(mine), (key, mine)


# ---- a password rotated on the brokers while the sink runs -------------------------------------------
class _AlterScramResponse(Response):  # type: ignore[misc]  # aiokafka is untyped here
    API_KEY = 51
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            CompactArray(
                ("user", CompactString("utf-8")),
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _AlterScramRequestV0(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped here
    FLEXIBLE_VERSION = True
    API_KEY = 51
    API_VERSION = 0
    RESPONSE_TYPE = _AlterScramResponse
    SCHEMA = Schema(
        (
            "deletions",
            CompactArray(("name", CompactString("utf-8")), ("mechanism", Int8), ("tags", TaggedFields)),
        ),
        (
            "upsertions",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("mechanism", Int8),
                ("iterations", Int32),
                ("salt", CompactBytes),
                ("salted_password", CompactBytes),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _SetScramPassword(Request[_AlterScramRequestV0]):  # type: ignore[misc]  # aiokafka is untyped here
    """Kafka's AlterUserScramCredentials (what ``kafka-configs --alter --entity-type users`` sends): the
    client salts and hashes the password, the broker stores the result. aiokafka lacks the request."""

    API_KEY = 51

    def __init__(self, user: str, password: str) -> None:
        self._user, self._password = user, password

    def build(self, request_struct_class: type[_AlterScramRequestV0]) -> _AlterScramRequestV0:
        salt, iterations = os.urandom(32), 4096
        salted = hashlib.pbkdf2_hmac("sha256", self._password.encode(), salt, iterations)
        # mechanism 1: SCRAM-SHA-256, the one whose sessions the secured broker ends (REAUTH_SHA256_MS)
        return request_struct_class([], [(self._user, 1, iterations, salt, salted, {})], {})


async def _set_password(secured: StackInfo, user: str, password: str) -> None:
    from pipeline.io.kafka.admin import admin_client

    async with admin_client(_settings(secured, "admin")) as admin:
        response = await admin._send_request(_SetScramPassword(user, password))
    assert all(result[1] == 0 for result in response.results), response


async def test_a_running_sink_whose_password_is_rotated_is_not_ready_and_resumes_from_its_password_file(
    secured: StackInfo, tmp_path: Path
) -> None:
    """The sink's SCRAM password is changed on the brokers while it runs (its SCRAM-SHA-256 sessions end
    every few seconds, as a broker with ``connections.max.reauth.ms`` ends them): /readyz says 503 and
    the log says once that its credentials are refused and where to put the new password; once the new
    password is written into its ``sasl.password.file`` (as a Secret mounted as a file is updated),
    /readyz says 200 without a restart and the export holds every event once."""
    import socket

    import aiohttp

    files = _files(secured)
    cluster = ClusterId(f"rotated-{uuid.uuid4().hex[:6]}")
    admin = _settings(secured, "admin")
    await ensure_topic(admin, "kubetape.events", 3)
    await ensure_topic(admin, "kubetape.deadletter", 1)
    t0 = int(time.time() * 1000) - 60_000  # the topic is shared: dated now, after the tests above
    events = synthetic_events(300, t0, 30_000)
    old_password, new_password = files.password("sink"), f"rotated-{uuid.uuid4().hex}"
    password_file, config = tmp_path / "sink.password", tmp_path / "sink.properties"
    password_file.write_text(old_password + "\n")
    config.write_text(
        f"bootstrap.servers={secured.bootstrap}\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.username=sink\nsasl.password.file={password_file}\nssl.ca.location={files.ca}\n"
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store, log = tmp_path / "segments", tmp_path / "sink.log"
    argv = [
        sys.executable, "-m", "services.cli", "sink", "--kafka-config", str(config),
        "--cluster", cluster, "--segment-store", str(store), "--http-port", str(port), "--idle-close", "1s",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBETAPE_")}
    await _publish(admin, events[:150], cluster)
    with log.open("wb") as out:
        sink = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=out, env=env)  # noqa: ASYNC220
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> int | str:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as answer:
                        return answer.status
                except aiohttp.ClientError as exc:
                    return f"{type(exc).__name__}: {log.read_text(errors='replace')[-600:]}"

            def exported() -> bytes:
                catalog = SegmentCatalog(open_segment_store(cluster_location(store, cluster)))
                return export_window(catalog, ExportRequest(t0, t0 + 30_000)).data

            async def export_now() -> bytes | str:
                try:
                    return await asyncio.to_thread(exported)
                except KubetapeError as exc:
                    return str(exc)

            await eventually(ready, lambda s: s == 200, "the sink ready", timeout_s=90)
            first = direct_trace(events[:150], t0, t0 + 30_000)
            await eventually(export_now, lambda data: data == first, "the first half exported", timeout_s=90)
            try:
                await _set_password(secured, "sink", new_password)
                await eventually(ready, lambda s: s == 503, "/readyz 503 once the password is refused")
                await _publish(admin, events[150:], cluster)  # arriving while the sink is refused
                password_file.write_text(new_password + "\n")
                await eventually(ready, lambda s: s == 200, "/readyz 200 with the new password", timeout_s=90)
                whole = direct_trace(events, t0, t0 + 30_000)
                await eventually(export_now, lambda data: data == whole, "every event exported", timeout_s=90)
            finally:
                await _set_password(secured, "sink", old_password)  # as the module found it
    finally:
        sink.terminate()
        sink.wait(60)
    text = log.read_text(errors="replace")
    refusals = [
        line
        for line in text.splitlines()
        if "no longer accepts the credentials of User:sink" in line and "the sink's consumer:" in line
    ]
    assert len(refusals) == 1, refusals  # one clear error, not one per retry
    assert f"write the current password into sasl.password.file {password_file}" in refusals[0]
    assert "accepts User:sink again; ready" in text
    assert old_password not in text
    assert new_password not in text


async def test_a_publisher_whose_password_is_rotated_logs_in_again_from_its_file_and_delivers_each_once(
    secured: StackInfo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The watcher's side of a rotation: its publisher stops counting as connected (the watch service's
    /readyz) once the brokers refuse its password, keeps the changes, and once the new password is in
    its file sends them with a new producer, each exactly once and in order."""
    import logging

    from pipeline.io.kafka.message import Record
    from pipeline.io.kafka.publisher import KafkaPublisher
    from pipeline.io.kafka.reader import TopicReader

    files = _files(secured)
    cluster = ClusterId(f"pubrot-{uuid.uuid4().hex[:6]}")
    await ensure_topic(_settings(secured, "admin"), "kubetape.events", 3)
    old_password, new_password = files.password("watcher"), f"rotated-{uuid.uuid4().hex}"
    password_file = tmp_path / "watcher.password"
    password_file.write_text(old_password)
    security, _ = load_security(
        None,
        {
            "KUBETAPE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KUBETAPE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
            "KUBETAPE_KAFKA_SASL_USERNAME": "watcher",
            "KUBETAPE_KAFKA_SASL_PASSWORD_FILE": str(password_file),
            "KUBETAPE_KAFKA_SSL_CA_LOCATION": str(files.ca),
        },
    )
    settings = KafkaSettings(secured.bootstrap, client_id="it-watcher", security=security)
    t0 = int(time.time() * 1000)
    keys = [f"core/ConfigMap/rotated/cm-{i % 7}" for i in range(60)]

    def unit(i: int) -> list[Record]:
        return [Record("kubetape.events", keys[i], f"change {i}".encode(), t0 + i)]

    caplog.set_level(logging.INFO, logger="kubetape.publisher")
    async with KafkaPublisher(settings, cluster=cluster) as publisher:
        for i in range(20):
            await publisher.submit(unit(i))
        await asyncio.wait_for(publisher.flush(), 60)
        try:
            await _set_password(secured, "watcher", new_password)
            submitted = 20

            async def refused() -> bool:  # its session ends within seconds; the next send meets it
                nonlocal submitted
                if submitted < 40:
                    await publisher.submit(unit(submitted))
                    submitted += 1
                return publisher.connected

            await eventually(refused, lambda ok: not ok, "the publisher's password refused", timeout_s=60)
            for i in range(submitted, 40):
                await publisher.submit(unit(i))
            password_file.write_text(new_password)
            for i in range(40, 60):
                await publisher.submit(unit(i))
            await asyncio.wait_for(publisher.flush(), 90)
            assert publisher.connected
            assert publisher.access.ok
        finally:
            await _set_password(secured, "watcher", old_password)  # as the module found it
    refusals = [
        r.getMessage() for r in caplog.records if "no longer accepts the credentials" in r.getMessage()
    ]
    assert len(refusals) == 1, refusals
    assert "User:watcher" in refusals[0]
    assert f"sasl.password.file {password_file}" in refusals[0]
    seen: list[bytes] = []
    async with TopicReader(
        _settings(secured, "replayer"), "kubetape.events", start=t0, end="current", cluster=cluster
    ) as reader:
        while not reader.finished():
            seen += [m.value or b"" for m in await reader.fetch(500, 1000)]
    assert sorted(seen) == sorted(f"change {i}".encode() for i in range(60))  # each once
    for key in set(keys):  # each key's changes in the order they were made
        mine = [int(v.split()[1]) for v in seen if keys[int(v.split()[1])] == key]
        assert mine == sorted(mine), (key, mine)
    logs = "\n".join(r.getMessage() for r in caplog.records)
    assert old_password not in logs
    assert new_password not in logs


async def test_a_running_sink_whose_client_certificate_expires_is_not_ready_and_resumes_once_renewed(
    secured: StackInfo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutual TLS: the sink's certificate and key files are replaced by an expired pair while it runs,
    and its connections break (as a broker restart or a moved leader breaks them): it is not ready
    (``access.ok``, what /readyz answers) and says once that the brokers refuse the certificate, naming
    the file; events arrive meanwhile. Once a valid pair is written into the same files (as cert-manager
    renews a mounted Secret), it is ready again without a restart and the export holds every event once,
    byte-identical to the direct fold. (A certificate of the stack's super user, on the test's own
    topic: what is tested is the certificate, not the ACLs.)"""
    import logging

    from aiokafka.conn import CloseReason

    from pipeline.stack.kafka_security import issue_client_certificate

    files = _files(secured)
    tag = uuid.uuid4().hex[:8]
    topic, dlq, group = f"it.cert.{tag}", f"it.cert.dlq.{tag}", f"it.cert.group.{tag}"
    admin = _settings(secured, "admin")
    await ensure_topic(admin, topic, 3)
    await ensure_topic(admin, dlq, 1)
    t0 = _t0()
    events = synthetic_events(300, t0, 30_000)
    live = tmp_path / "mounted"  # the files the sink is configured with
    live.mkdir()
    certificate, key = live / "tls.crt", live / "tls.key"
    issue_client_certificate(files, "admin", certificate, key)

    def swap_in(*, expired: bool) -> None:
        """A new pair made aside and moved over the configured files, each whole (new inodes)."""
        staged = tmp_path / f"staged-{uuid.uuid4().hex[:6]}"
        staged.mkdir()
        issue_client_certificate(files, "admin", staged / "tls.crt", staged / "tls.key", expired=expired)
        os.replace(staged / "tls.key", key)
        os.replace(staged / "tls.crt", certificate)

    settings = _settings(
        secured,
        "admin",
        "mtls",
        KUBETAPE_KAFKA_SSL_CERTIFICATE_LOCATION=str(certificate),
        KUBETAPE_KAFKA_SSL_KEY_LOCATION=str(key),
    )
    store = tmp_path / "segments"

    def exported() -> bytes:
        return export_window(SegmentCatalog(LocalSegmentStore(store)), ExportRequest(t0, t0 + 30_000)).data

    async def export_now() -> bytes | str:
        try:
            return await asyncio.to_thread(exported)
        except KubetapeError as exc:
            return str(exc)

    caplog.set_level(logging.INFO, logger="kubetape")
    await _produce(admin, topic, events[:150])
    async with _sink(settings, topic, group, dlq, store) as sink:
        source = sink.source
        assert isinstance(source, KafkaSinkSource)
        first = direct_trace(events[:150], t0, t0 + 30_000)
        await eventually(export_now, lambda data: data == first, "the first half exported", timeout_s=90)
        swap_in(expired=True)

        async def refused() -> str | None:
            if source.access.ok:  # break the member's connections until a new one meets the expired pair
                for client in (source.consumer._client, source._producer and source._producer.client):
                    for conn in list(getattr(client, "_conns", {}).values()):
                        conn.close(reason=CloseReason.CONNECTION_BROKEN)
                return None
            return str(source.access.error)

        said = await eventually(refused, lambda error: error is not None, "the sink not ready", timeout_s=60)
        await _produce(admin, topic, events[150:])  # arriving while the sink is refused
        swap_in(expired=False)

        async def ready() -> bool | str:
            return source.access.ok or str(source.access.error)

        await eventually(ready, lambda ok: ok is True, "the sink ready with the renewed pair", timeout_s=90)
        whole = direct_trace(events, t0, t0 + 30_000)
        await eventually(export_now, lambda data: data == whole, "every event exported", timeout_s=90)
    assert said is not None
    assert "refuses the TLS connection" in said
    assert f"ssl.certificate.location {certificate}" in said
    assert "expired" in said
    refusals = [r.getMessage() for r in caplog.records if "refuses the TLS connection" in r.getMessage()]
    assert len(refusals) == 1, refusals  # one clear error, not one per retry
    assert any("accepts" in r.getMessage() and "again; ready" in r.getMessage() for r in caplog.records)


async def test_a_publisher_whose_oauth_token_expires_is_refused_once_and_resumes_from_its_renewed_file(
    secured: StackInfo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """OAUTHBEARER after start (the stack's broker takes unsigned tokens it can check the expiry of): the
    watcher's publisher logs in with the token its file holds. Once the file holds only an expired
    token and the broker ends the session (it bounds them), the brokers refuse the next login: not
    connected, one error naming the token file and that its token expired. Once a current token is in
    the file, it sends every change, each once and in order, without a restart. Before kubetape answered
    the broker's error challenge, aiokafka took the refused login as done and the refusal went unseen."""
    import logging

    from pipeline.io.kafka.message import Record
    from pipeline.io.kafka.publisher import KafkaPublisher
    from pipeline.io.kafka.reader import TopicReader
    from pipeline.stack.kafka_security import unsecured_token

    files = _files(secured)
    cluster = ClusterId(f"puboauth-{uuid.uuid4().hex[:6]}")
    await ensure_topic(_settings(secured, "admin"), "kubetape.events", 3)
    token_file = tmp_path / "watcher.token"
    token_file.write_text(unsecured_token("watcher", 3600))
    security, _ = load_security(
        None,
        {
            "KUBETAPE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KUBETAPE_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "KUBETAPE_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": str(token_file),
            "KUBETAPE_KAFKA_SSL_CA_LOCATION": str(files.ca),
        },
    )
    settings = KafkaSettings(secured.bootstrap, client_id="it-watcher-oauth", security=security)
    t0 = int(time.time() * 1000)
    keys = [f"core/ConfigMap/oauth/cm-{i % 7}" for i in range(60)]
    tokens: list[str] = [token_file.read_text()]

    def unit(i: int) -> list[Record]:
        return [Record("kubetape.events", keys[i], f"change {i}".encode(), t0 + i)]

    caplog.set_level(logging.INFO, logger="kubetape.publisher")
    async with KafkaPublisher(settings, cluster=cluster) as publisher:
        for i in range(20):
            await publisher.submit(unit(i))
        await asyncio.wait_for(publisher.flush(), 60)
        tokens.append(unsecured_token("watcher", -60))
        token_file.write_text(tokens[-1])
        submitted = 20

        async def refused() -> bool:  # its session ends within seconds; the next send meets it
            nonlocal submitted
            if submitted < 40:
                await publisher.submit(unit(submitted))
                submitted += 1
            return publisher.connected

        await eventually(refused, lambda ok: not ok, "the publisher's token refused", timeout_s=60)
        for i in range(submitted, 40):
            await publisher.submit(unit(i))
        tokens.append(unsecured_token("watcher", 3600))
        token_file.write_text(tokens[-1])
        for i in range(40, 60):
            await publisher.submit(unit(i))
        await asyncio.wait_for(publisher.flush(), 90)
        assert publisher.connected
        assert publisher.access.ok
    refusals = [
        r.getMessage() for r in caplog.records if "no longer accepts the credentials" in r.getMessage()
    ]
    assert len(refusals) == 1, refusals
    assert f"the principal of the token in {token_file}" in refusals[0]
    assert f"sasl.oauthbearer.token.file {token_file}" in refusals[0]
    assert ": expired. Not ready" in refusals[0], refusals[0]  # the token's own exp claim
    seen: list[bytes] = []
    async with TopicReader(
        _settings(secured, "replayer"), "kubetape.events", start=t0, end="current", cluster=cluster
    ) as reader:
        while not reader.finished():
            seen += [m.value or b"" for m in await reader.fetch(500, 1000)]
    assert sorted(seen) == sorted(f"change {i}".encode() for i in range(60))  # each once
    for key in set(keys):  # each key's changes in the order they were made
        mine = [int(v.split()[1]) for v in seen if keys[int(v.split()[1])] == key]
        assert mine == sorted(mine), (key, mine)
    logs = "\n".join(r.getMessage() for r in caplog.records)
    assert not any(token in logs for token in tokens)
