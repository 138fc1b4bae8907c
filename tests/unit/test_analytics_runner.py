"""The consumer runner's contract, against an in-memory source: commit only after a checkpoint, skip and
count what cannot be decoded, stop at the end of a range; and the metrics consumer's series."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from pipeline.analytics.builtin_metrics import MetricsConsumer
from pipeline.analytics.builtin_timeline import TimelineConsumer
from pipeline.analytics.consumer import BatchContext, group_id_for
from pipeline.analytics.runner import ConsumerRunner, run_offline
from pipeline.analytics.timeline_store import read_timeline
from pipeline.formats.trace import initial_events, read_trace
from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.consume import LoopSettings
from pipeline.io.kafka.message import Message
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey
from services.cli import main
from tests.data import SIMKUBE_TRACES


class ListSource:
    """A bounded topic in memory; records every call so tests can check their order."""

    description = "memory:events"

    def __init__(self, messages: Sequence[Message], calls: list[str]) -> None:
        self._messages = list(messages)
        self._position = 0
        self.calls = calls
        self.committed: dict[int, int] = {}

    async def fetch(self, timeout_ms: int, max_records: int) -> list[Message]:
        del timeout_ms
        batch = self._messages[self._position : self._position + max_records]
        self._position += len(batch)
        self.calls.append(f"fetch {len(batch)}")
        return batch

    def lag(self) -> int | None:
        return len(self._messages) - self._position

    def finished(self) -> bool:
        return self._position >= len(self._messages)

    async def commit(self, next_offsets: Mapping[int, int]) -> None:
        self.calls.append(f"commit {dict(next_offsets)}")
        self.committed.update(next_offsets)


class RecordingConsumer:
    name = "recording"

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.events: list[Event] = []
        self.contexts: list[BatchContext] = []

    def on_batch(self, events: Sequence[Event], context: BatchContext) -> None:
        self.events.extend(events)
        self.contexts.append(context)

    def checkpoint(self) -> None:
        self.calls.append("checkpoint")

    def close(self) -> None:
        self.calls.append("close")


def configmap_event(i: int) -> Event:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": "ns"}}
    return Event.applied(1_800_000_000_000 + i, ObjectKey(f"core/ConfigMap/ns/cm-{i}"), obj, 0)


async def test_offsets_are_committed_only_after_the_consumer_checkpointed() -> None:
    calls: list[str] = []
    messages = [Message(i % 2, i // 2, 0, None, encode_event(configmap_event(i))) for i in range(10)]
    source = ListSource(messages, calls)
    consumer = RecordingConsumer(calls)
    settings = LoopSettings(max_batch=4, flush_every_messages=4, flush_every_s=3600)
    stats = await ConsumerRunner(consumer, source, settings).run()
    assert stats.events == 10
    assert [e.key for e in consumer.events] == [f"core/ConfigMap/ns/cm-{i}" for i in range(10)]
    commits = [i for i, call in enumerate(calls) if call.startswith("commit")]
    assert commits
    for index in commits:
        assert calls[index - 1] == "checkpoint"
    assert source.committed == {0: 5, 1: 5}  # next offsets to read: everything consumed
    assert calls[-1] == "close"
    assert consumer.contexts[0].lag_messages == 6


async def test_undecodable_messages_are_skipped_counted_and_still_committed() -> None:
    calls: list[str] = []
    messages = [
        Message(0, 0, 0, None, encode_event(configmap_event(0))),
        Message(0, 1, 0, None, b"\xc1 not msgpack"),
        Message(0, 2, 0, None, None),
        Message(0, 3, 0, None, encode_event(configmap_event(3))),
    ]
    source = ListSource(messages, calls)
    consumer = RecordingConsumer(calls)
    stats = await ConsumerRunner(consumer, source).run()
    assert stats.undecodable == 2
    assert len(consumer.events) == 2
    assert consumer.contexts[-1].undecodable_total == 2
    assert source.committed == {0: 4}  # a bad message is not re-read forever


def test_each_consumer_has_its_own_group() -> None:
    assert group_id_for("timeline") == "kubetape-analytics-timeline"
    assert group_id_for("timeline") != "kubetape-sink"


def test_the_metrics_consumer_counts_objects_pods_and_lag() -> None:
    consumer = MetricsConsumer(clock=lambda: 1_800_000_100.0)
    events = initial_events(read_trace(SIMKUBE_TRACES / "bare-pods.sktrace"), time_ordered=True)
    consumer.on_batch(events, BatchContext("memory", 7, 0))
    text = consumer.metrics.render()
    assert 'kubetape_analytics_events_total{kind="Pod",type="applied"} 4' in text
    assert 'kubetape_analytics_objects{kind="Pod",namespace="testing"} 4' in text
    assert "kubetape_analytics_consumer_lag_messages 7" in text
    assert 'kubetape_analytics_pods{phase="Running"}' in text
    assert "kubetape_analytics_event_age_seconds" in text


def test_the_timeline_consumer_writes_parquet_an_analyst_can_query(tmp_path: Path) -> None:
    import duckdb

    out = tmp_path / "timeline"
    events = initial_events(read_trace(SIMKUBE_TRACES / "bare-pods.sktrace"), time_ordered=True)
    run_offline(TimelineConsumer(out, final=True), events, "bare-pods", batch_size=3)
    connection = duckdb.connect()
    query = f"SELECT sum(running) FROM '{out / 'timeline.parquet'}' WHERE owner = '*'"
    assert connection.execute(query).fetchall() == [(12 + 30 + 30 + 1,)]
    delayed = f"SELECT count(*) FROM '{out / 'pods.parquet'}' WHERE running_s - created_s = 1.0"
    # pods 2, 3 and 4 were recorded a second before they started; pod 1 started as it was recorded
    assert connection.execute(delayed).fetchall() == [(3,)]
    connection.close()


def test_analytics_run_over_a_trace_file_writes_the_timeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    trace = SIMKUBE_TRACES / "cronjob.sktrace"
    assert main(["analytics", "run", "timeline", "--trace", str(trace), "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["events"] > 0
    rows = read_timeline(out / "timeline.parquet")
    assert {row.owner for row in rows} == {"*", "batch/CronJob/default/hello-simkube"}
    assert main(["analytics", "run", "timeline", "--trace", str(trace), "--from", "-1h"]) == 2
    assert "--from/--to select a Kafka range" in capsys.readouterr().err
    assert main(["analytics", "run", "timeline", "--trace", str(tmp_path / "missing.sktrace")]) == 2
    assert "missing.sktrace: cannot read the trace" in capsys.readouterr().err


def test_the_metrics_service_refuses_to_start_without_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBETAPE_TOKEN", raising=False)
    assert main(["analytics", "run", "metrics", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "needs a bearer token: set $KUBETAPE_TOKEN" in capsys.readouterr().err
