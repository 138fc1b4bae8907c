"""The sink on the stack's real S3 server (s3proxy): the same segments as a local directory, an outage
of the server reported by ``/readyz`` and ridden out without losing anything, ``kill -9`` without losing
anything, and the CLI's readers (export, inspect) on ``s3://`` URLs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from pipeline.formats.segment.decode import decode_segment, read_segment
from pipeline.io.kafka.admin import ensure_topic
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.replay.run import read_segment_range
from pipeline.sink.synthetic import synthetic_events
from pipeline.stack.stack import LocalStack
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportRequest, export_window
from pipeline.store.store_url import open_segment_store
from tests.integration.test_sink import (
    KUBETAPE,
    count_lines,
    direct_trace,
    logged_http_port,
    produce,
    recent_t0,
    unique_names,
    wait_committed,
    wait_for_lines,
)
from tests.polling import eventually


@contextlib.contextmanager
def sink_process(
    bootstrap: str, names: tuple[str, str, str], store: str, log: Path, token: str = "", *extra: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``kubetape sink`` on ``store`` (the AWS_* variables of this process reach the S3 server), with
    ``extra`` arguments."""
    topic, group, dlq = names
    args = [
        str(KUBETAPE), "sink", "--bootstrap", bootstrap, "--topic", topic, "--group", group,
        "--deadletter-topic", dlq, "--segment-store", store, "--http-port", "0",
        "--idle-close", "1s", "--keyframe-every", "3", "--batch", "700", "--partitions", "2", *extra,
    ]  # fmt: skip
    with log.open("ab") as out:
        env = {**os.environ, "KUBETAPE_TOKEN": token}
        process = subprocess.Popen(args, stdout=out, stderr=out, env=env)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def _export(store: str, start_ms: int, end_ms: int) -> bytes:
    return export_window(SegmentCatalog(open_segment_store(store)), ExportRequest(start_ms, end_ms)).data


async def test_a_sink_on_s3_stores_what_a_sink_on_a_directory_stores(
    kafka_bootstrap: str, s3_url: str, tmp_path: Path
) -> None:
    """Two sinks (two groups) read one topic, one into S3 and one into a directory: the exports are the
    same bytes, the direct fold's, also over POST /export; `kubetape export` and `kubetape inspect` read
    the S3 store."""
    topic, group, dlq = unique_names("s3same")
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 2)
    t0 = recent_t0()
    events = synthetic_events(3_000, t0, 600_000)
    await produce(kafka_bootstrap, topic, events)
    local = str(tmp_path / "segments")
    with (
        sink_process(kafka_bootstrap, (topic, group, dlq), s3_url, tmp_path / "s3.log", "tok") as on_s3,
        sink_process(kafka_bootstrap, (topic, group + "-local", dlq), local, tmp_path / "local.log"),
    ):
        await wait_committed(kafka_bootstrap, group, topic, 2, within=180)
        await wait_committed(kafka_bootstrap, group + "-local", topic, 2, within=180)
        url = f"http://127.0.0.1:{logged_http_port(tmp_path / 's3.log')}/export"
        body = {"start_ms": t0, "end_ms": t0 + 600_000}
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, json=body, headers={"Authorization": "Bearer tok"}) as resp,
        ):
            assert resp.status == 200, await resp.text()
            over_http = await resp.read()
        on_s3.terminate()
        assert on_s3.wait(timeout=60) == 0, (tmp_path / "s3.log").read_text()[-3000:]
    expected = direct_trace(events, t0, t0 + 600_000)
    assert _export(local, t0, t0 + 600_000) == expected
    assert _export(s3_url, t0, t0 + 600_000) == expected
    assert over_http == expected  # POST /export of the sink writing to S3
    replayed = read_segment_range(s3_url, t0, t0 + 600_000)  # what `replay --segments s3://…` plays
    assert replayed == decode_segment(expected)
    window = (t0 + 120_000, t0 + 300_000)
    assert _export(s3_url, *window) == _export(local, *window)

    out = tmp_path / "from-s3.kseg"
    cli = [str(KUBETAPE), "export", "--segment-store", s3_url, "--from", str(t0), "--to", str(t0 + 600_000)]
    done = await asyncio.to_thread(_run, [*cli, "-o", str(out)])
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == expected
    first = open_segment_store(s3_url).list()[0]
    url = f"{s3_url}/segments/p{int(first.name[1:5]):04d}/{first.name}"
    shown = await asyncio.to_thread(_run, [str(KUBETAPE), "inspect", url])
    assert shown.returncode == 0, shown.stderr
    assert first.name in shown.stdout
    assert read_segment(out).header.start_ms == t0


async def test_replicas_sharing_one_s3_store_each_export_every_partition(
    kafka_bootstrap: str, s3_url: str, tmp_path: Path
) -> None:
    """Two sink replicas in one group split the partitions but share the store: the POST /export of
    each one holds every partition's events."""
    names = topic, group, _dlq = unique_names("s3replicas")
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 2)
    t0 = recent_t0()
    events = synthetic_events(2_000, t0, 600_000)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    body = {"start_ms": t0, "end_ms": t0 + 600_000}
    with (
        # the cluster named: a sink nobody names one for waits for the topic's first record to learn it
        sink_process(kafka_bootstrap, names, s3_url, logs[0], "tok", "--cluster", "default"),
        sink_process(kafka_bootstrap, names, s3_url, logs[1], "tok", "--cluster", "default"),
    ):

        async def assigned() -> list[int]:
            return [count_lines(log, "partition assigned") for log in logs]

        # both in the group before any event: the group splits the partitions, each replica writes its own
        await eventually(assigned, all, "a partition assigned to each replica", timeout_s=120)
        await produce(kafka_bootstrap, topic, events)
        await wait_committed(kafka_bootstrap, group, topic, 2, within=180)
        written = [_partitions_written(log) for log in logs]
        assert all(written), f"partitions written per replica: {written}"
        exports = []
        async with aiohttp.ClientSession() as session:
            for log in logs:
                url = f"http://127.0.0.1:{logged_http_port(log)}/export"
                async with session.post(url, json=body, headers={"Authorization": "Bearer tok"}) as resp:
                    assert resp.status == 200, await resp.text()
                    exports.append(await resp.read())
    expected = direct_trace(events, t0, t0 + 600_000)
    assert exports == [expected, expected]


def _partitions_written(log: Path) -> set[str]:
    return {
        str(record["partition"])
        for line in log.read_text().splitlines()
        if line.startswith("{") and (record := json.loads(line)).get("msg") == "segment written"
    }


async def test_readyz_reports_an_s3_outage_and_nothing_is_lost(
    kafka_bootstrap: str, s3_url: str, tmp_path: Path, local_stack: LocalStack
) -> None:
    """The S3 server stops while events keep coming: /readyz turns 503; once the server is back it
    turns 200 again, the sink catches up, and the export holds every event."""
    topic, group, dlq = unique_names("s3outage")
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 2)
    t0 = recent_t0()
    events = synthetic_events(2_000, t0, 600_000)
    log = tmp_path / "sink.log"
    await produce(kafka_bootstrap, topic, events[:1_000])
    with sink_process(kafka_bootstrap, (topic, group, dlq), s3_url, log) as sink:
        await wait_committed(kafka_bootstrap, group, topic, 2, within=180)
        readyz = f"http://127.0.0.1:{logged_http_port(log)}/readyz"

        async def status() -> int | str:
            if sink.poll() is not None:
                return f"sink exited with {sink.returncode}: {log.read_text()[-2000:]}"
            async with aiohttp.ClientSession() as session, session.get(readyz) as resp:
                return resp.status

        await eventually(status, lambda s: s == 200, "the sink ready before the outage")
        try:
            await asyncio.to_thread(local_stack.stop_s3)
            await produce(kafka_bootstrap, topic, events[1_000:])
            await eventually(status, lambda s: s == 503, "/readyz reporting the S3 outage", timeout_s=60)
        finally:
            await asyncio.to_thread(local_stack.start_s3)
        await eventually(status, lambda s: s == 200, "/readyz after the S3 server is back", timeout_s=60)
        await wait_committed(kafka_bootstrap, group, topic, 2, within=180)
        assert sink.poll() is None, log.read_text()[-3000:]
    assert "segment store unreachable: not ready" in log.read_text()
    assert _export(s3_url, t0, t0 + 600_000) == direct_trace(events, t0, t0 + 600_000)


async def test_kill_9_of_a_sink_writing_to_s3_gives_a_byte_identical_export(
    kafka_bootstrap: str, s3_url: str, tmp_path: Path
) -> None:
    """SIGKILL right after a segment reached S3 (before its offsets are committed) and during start-up:
    the restarted sink resumes from the store and the export equals the direct fold."""
    names = topic, group, _dlq = unique_names("s3kill")
    await ensure_topic(KafkaSettings(bootstrap=kafka_bootstrap), topic, 2)
    t0 = recent_t0()
    events = synthetic_events(3_000, t0, 600_000)
    log = tmp_path / "sink.log"
    for index, chunk in enumerate(events[i : i + 1_000] for i in range(0, len(events), 1_000)):
        with sink_process(kafka_bootstrap, names, s3_url, log) as sink:
            written_before = count_lines(log, "segment written")
            await produce(kafka_bootstrap, topic, chunk)
            if index % 2 == 0:
                await wait_for_lines(log, "segment written", written_before + 1, within=120)
            else:
                await asyncio.sleep(0.5)  # still starting: joining the group, restoring from S3
            sink.send_signal(signal.SIGKILL)
            sink.wait()
    with sink_process(kafka_bootstrap, names, s3_url, log) as sink:
        await wait_committed(kafka_bootstrap, group, topic, 2, within=180)
        sink.terminate()
        assert sink.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert _export(s3_url, t0, t0 + 600_000) == direct_trace(events, t0, t0 + 600_000)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://no-such-bucket-here/x", "bucket 'no-such-bucket-here' does not exist"),
        ("gs://bucket/x", "unsupported scheme 'gs'"),
    ],
)
def test_the_sink_refuses_a_store_it_cannot_use(
    kafka_bootstrap: str, s3_url: str, tmp_path: Path, url: str, message: str
) -> None:
    del s3_url  # for its AWS_* variables
    topic, group, dlq = unique_names("s3refused")
    args = [
        str(KUBETAPE), "sink", "--bootstrap", kafka_bootstrap, "--topic", topic, "--group", group,
        "--deadletter-topic", dlq, "--segment-store", url, "--http-port", "0",
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode != 0
    assert message in done.stderr
