"""The segment store's contract, against a local directory and the stack's real S3 server (s3proxy).

Both stores must give the same answers: atomic puts, listing only segments, the fencing rules (an older
epoch is refused, a segment is never replaced by one covering fewer offsets), epochs that only grow
even when many owners take a partition at once, and a first topic identity that sticks.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import obstore
import pytest
from obstore import exceptions as obs_errors
from obstore.store import S3Store

from pipeline.formats.segment.content import build_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.segment.header import PartitionRange
from pipeline.model.errors import ConfigError, FormatError, TransientError
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.synthetic import applied, deployment
from pipeline.stack.stack import LocalStack
from pipeline.store.catalog import SegmentCatalog
from pipeline.store.export import ExportRequest, export_window
from pipeline.store.local_store import LocalSegmentStore
from pipeline.store.retention import apply_retention
from pipeline.store.s3_store import S3SegmentStore, segment_key
from pipeline.store.segment_store import SegmentName, SegmentStore, StaleWriterError, WriteFence, segment_name
from pipeline.store.store_url import S3Location, open_segment_store, parse_store_url

T0 = 1_763_700_000_000


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SegmentStore]:
    if request.param == "local":
        yield open_segment_store(str(tmp_path / "segments"))
    else:
        yield open_segment_store(request.getfixturevalue("s3_url"))


def _raw_client(location: S3Location) -> S3Store:
    """A plain obstore client on the store's prefix (keys from the AWS_* variables, as the store's), to
    ask the server without the store in between."""
    return S3Store(
        location.bucket,
        prefix=location.prefix or None,
        endpoint=os.environ["AWS_ENDPOINT_URL"],
        region=os.environ.get("AWS_REGION", "us-east-1"),
        client_options={"allow_http": True},
    )


def _segment(partition: int, first: int, last: int, epoch: int) -> tuple[SegmentName, bytes, WriteFence]:
    """A real segment of ``partition`` holding offsets ``first``..``last``, written under ``epoch``."""
    events = [applied(T0 + i, deployment("ns", f"d{i}", 1), 100 + i) for i in range(first, last + 1)]
    seg = build_segment(
        events,
        start_ms=T0,
        end_ms=T0 + 60_000,
        partitions=[PartitionRange("kubetape.events", partition, first, last)],
    )
    return segment_name(partition, first), encode_segment(seg), WriteFence(partition, first, last, epoch)


def test_put_get_head_list_delete(store: SegmentStore) -> None:
    a, b = segment_name(0, 0), segment_name(1, 7)
    store.put(b, b"second")
    store.put(a, b"first")
    store.put(a, b"first, rewritten")
    assert [(s.name, s.size) for s in store.list()] == [(a, len(b"first, rewritten")), (b, 6)]
    assert store.get(a) == b"first, rewritten"
    assert store.head(b, 3) == b"sec"
    version = {s.name: s.version for s in store.list()}[b]
    store.put(b, b"changed")
    assert {s.name: s.version for s in store.list()}[b] != version  # the catalog rereads its header
    store.delete(a)
    store.delete(a)  # already gone: no error
    assert [s.name for s in store.list()] == [b]
    with pytest.raises(FormatError, match=r"p0000-000000000000000\.kseg"):
        store.get(a)
    store.check()


def _another_client(store: SegmentStore) -> SegmentStore:
    """A separate client of the same store, sharing nothing in memory with ``store`` (another sink)."""
    if isinstance(store, S3SegmentStore):
        return S3SegmentStore(store.location)
    assert isinstance(store, LocalSegmentStore)
    return LocalSegmentStore(store.root)


def test_epochs_only_grow_even_when_owners_race(store: SegmentStore) -> None:
    """Twelve owners, each with its own client, take one partition at once: twelve distinct epochs."""
    assert store.acquire_epoch(3) == 1
    owners = [_another_client(store) for _ in range(12)]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        taken = list(pool.map(lambda owner: owner.acquire_epoch(3), owners))
    assert sorted(taken) == list(range(2, 14))  # every owner got its own epoch
    assert store.acquire_epoch(4) == 1  # per partition
    assert _another_client(store).acquire_epoch(3) == 14  # the epochs live in the store


def test_fencing_refuses_an_older_epoch_and_a_shorter_segment(
    store: SegmentStore, caplog: pytest.LogCaptureFixture
) -> None:
    old = store.acquire_epoch(0)
    name, whole, fence = _segment(0, 0, 19, old)
    store.put(name, whole, fence)
    _, part, part_fence = _segment(0, 0, 9, old)
    with (
        caplog.at_level(logging.WARNING, logger="kubetape.sink"),
        pytest.raises(StaleWriterError, match="never replaces a segment with less"),
    ):
        store.put(name, part, part_fence)
    assert "stale segment write refused" in caplog.text
    new = store.acquire_epoch(0)
    later, data, _ = _segment(0, 20, 25, old)
    with pytest.raises(StaleWriterError, match=f"epoch {old}, but epoch {new}"):
        store.put(later, data, WriteFence(0, 20, 25, old))
    store.put(later, data, WriteFence(0, 20, 25, new))  # the new owner writes
    _, longer, longer_fence = _segment(0, 0, 30, new)
    store.put(name, longer, longer_fence)  # more offsets replace fewer
    assert store.get(name) == longer
    assert [s.name for s in store.list()] == [name, later]


def test_concurrent_writers_of_one_name_keep_the_longest(store: SegmentStore) -> None:
    """Writer threads of one sink racing on one segment name under the same epoch: whatever order they
    land in, the stored segment is the one covering the most offsets."""
    epoch = store.acquire_epoch(0)
    candidates = [_segment(0, 0, last, epoch) for last in (4, 9, 14, 19, 24, 29)]

    def write(candidate: tuple[SegmentName, bytes, WriteFence]) -> bool:
        try:
            store.put(*candidate)
        except StaleWriterError:
            return False
        return True

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        landed = list(pool.map(write, candidates))
    assert landed[-1], "the longest segment was refused"
    assert store.get(candidates[-1][0]) == candidates[-1][1]


def test_the_first_topic_identity_sticks(store: SegmentStore) -> None:
    assert store.claim_source("kafka:c1/kubetape.events") == "kafka:c1/kubetape.events"
    assert store.claim_source("kafka:c2/kubetape.events") == "kafka:c1/kubetape.events"


def test_listing_skips_other_objects(store: SegmentStore, tmp_path: Path) -> None:
    store.put(segment_name(2, 5), b"x")
    store.acquire_epoch(2)
    store.claim_source("kafka:c1/t")
    if isinstance(store, S3SegmentStore):
        assert store.supports_conditional_writes()  # s3proxy 4.x honours If-None-Match / If-Match
        assert segment_key(segment_name(2, 5)) == "segments/p0002/p0002-000000000000005.kseg"
        for expected in range(2, 41):  # old epoch markers are pruned: a rebalance lists a few keys
            assert store.acquire_epoch(2) == expected
        epochs = obstore.list(_raw_client(store.location), prefix="epochs/p0002/").collect()
        assert len(epochs) <= 17, [m["path"] for m in epochs]
    else:
        (tmp_path / "segments" / "notes.txt").write_text("not a segment")
    assert [s.name for s in store.list()] == [segment_name(2, 5)]


def test_s3_errors_say_what_where_and_what_to_do(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = open_segment_store("s3://no-such-bucket-here/x")
    with pytest.raises(
        ConfigError, match=r"bucket 'no-such-bucket-here' does not exist at http://127\.0\.0\.1"
    ):
        missing.list()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(
        ConfigError, match=r"access denied .* check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    ):
        open_segment_store(s3_url).list()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(TransientError, match=r"127\.0\.0\.1:9 did not answer .* check that it is running"):
        open_segment_store(s3_url).check()


def test_the_shared_credentials_file_is_read_without_keys_in_the_environment(
    s3_env: dict[str, str], s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[ci]\naws_access_key_id = {s3_env['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {s3_env['AWS_SECRET_ACCESS_KEY']}\n"
    )
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_PROFILE", "ci")
    store = open_segment_store(s3_url)
    store.put(segment_name(0, 0), b"signed with the file's keys")
    assert store.get(segment_name(0, 0)) == b"signed with the file's keys"
    assert "AWS_ACCESS_KEY_ID" not in os.environ


def test_on_a_server_without_conditional_writes_the_rules_hold_for_one_writer_at_a_time(s3_url: str) -> None:
    """The fallback (check, then a plain PUT) on the real server, as if it ignored the conditions."""
    location = parse_store_url(s3_url)
    assert isinstance(location, S3Location)
    store = S3SegmentStore(location, conditional_writes=False)  # as on a server ignoring If-None-Match
    old = store.acquire_epoch(0)
    name, whole, fence = _segment(0, 0, 19, old)
    store.put(name, whole, fence)
    _, part, part_fence = _segment(0, 0, 9, old)
    with pytest.raises(StaleWriterError, match="never replaces a segment with less"):
        store.put(name, part, part_fence)
    new = store.acquire_epoch(0)
    assert new == old + 1
    with pytest.raises(StaleWriterError, match=f"epoch {old}, but epoch {new}"):
        store.put(segment_name(0, 20), b"late", WriteFence(0, 20, 25, old))
    assert store.get(name) == whole
    assert store.claim_source("kafka:c1/t") == "kafka:c1/t"
    assert store.claim_source("kafka:c2/t") == "kafka:c1/t"


def test_the_stacks_s3_server_runs_and_honours_conditional_puts(local_stack: LocalStack, s3_url: str) -> None:
    """What the S3 store relies on, asked of the server directly: If-None-Match: * and If-Match on PUT."""
    status = local_stack.status()["s3"]
    assert isinstance(status, dict)
    assert status["running"], status
    location = parse_store_url(s3_url)
    assert isinstance(location, S3Location)
    raw = _raw_client(location)
    first = obstore.put(raw, "probe", b"1", mode="create")
    with pytest.raises(obs_errors.AlreadyExistsError):
        obstore.put(raw, "probe", b"2", mode="create")
    second = obstore.put(raw, "probe", b"3", mode={"e_tag": first["e_tag"]})
    with pytest.raises(obs_errors.PreconditionError):
        obstore.put(raw, "probe", b"4", mode={"e_tag": first["e_tag"]})  # stale ETag
    assert bytes(obstore.get(raw, "probe").bytes()) == b"3"
    assert second["e_tag"] != first["e_tag"]


def test_the_catalog_reads_every_header_and_names_the_unreadable_ones(store: SegmentStore) -> None:
    """Many headers at once (read concurrently from an object store), one of them garbage."""
    epoch = store.acquire_epoch(0)
    written = [_segment(0, first, first + 4, epoch) for first in range(0, 200, 5)]
    for name, data, fence in written:
        store.put(name, data, fence)
    store.put(segment_name(1, 0), b"not a segment")
    catalog = SegmentCatalog(store)
    catalog.refresh()
    assert [e.name for e in catalog.entries()] == [name for name, _, _ in written]
    assert list(catalog.corrupt) == [segment_name(1, 0)]
    assert catalog.next_offset(0) == 200
    assert catalog.next_offset(1) == 1


def test_retention_removes_the_same_segments_and_keeps_later_ranges(store: SegmentStore) -> None:
    """Retention on either store: the segments before the anchoring keyframe go, a later range exports
    the same bytes as before."""
    compactor = PartitionCompactor(0, CompactionSettings(window_ms=1_000, keyframe_every=2))
    closed = []
    for i in range(7):
        event = applied(T0 + i * 1_000, deployment("ns", f"d{i % 3}", i + 1), 100 + i)
        closed += compactor.add(i, event, 0.0)
    for c in closed:
        store.put(c.name, encode_segment(c.segment))
    request = ExportRequest(T0 + 2_500, T0 + 6_000)
    before = export_window(SegmentCatalog(store), request).data
    removed = apply_retention(SegmentCatalog(store), cutoff_ms=T0 + 3_500)
    assert removed == ["p0000-000000000000000.kseg", "p0000-000000000000001.kseg"]
    assert [s.name for s in store.list()] == [c.name for c in closed[2:]]
    assert export_window(SegmentCatalog(store), request).data == before
