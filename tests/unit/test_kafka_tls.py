"""A client's TLS context against an in-process TLS server that requires a client certificate signed by
the stack's CA (a stand-in for the mutual-TLS listener): a certificate the server refuses (expired, or
signed by another CA) is told to the context's listeners in words, and a certificate renewed on disk is
used by the next connection of the same context, without a new client; a pair caught half-written is
not used."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer

from pipeline.io.kafka import diagnose
from pipeline.io.kafka.access import BrokerAccess, on_tls_refused, tls_message
from pipeline.io.kafka.clients import connection
from pipeline.io.kafka.diagnose import certificate_refusal, refusal
from pipeline.io.kafka.security import KafkaSecurity
from pipeline.io.kafka.settings import KafkaSettings
from pipeline.io.kafka.tls import ClientTLS, certificate_validity, refusal_words
from pipeline.stack.kafka_security import SecurityFiles, issue_client_certificate, make_materials

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make certificates")


@pytest.fixture(scope="module")
def materials(tmp_path_factory: pytest.TempPathFactory) -> SecurityFiles:
    files = SecurityFiles(tmp_path_factory.mktemp("tls") / "ca")
    make_materials(files, 9093, 9094)
    return files


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> SecurityFiles:
    """Another CA's materials: its certificates are ones the server has no reason to trust."""
    files = SecurityFiles(tmp_path_factory.mktemp("tls") / "other-ca")
    make_materials(files, 9093, 9094)
    return files


@pytest.fixture
def server(materials: SecurityFiles) -> Iterator[int]:
    """A TLS server on loopback that requires a client certificate of the stack's CA and answers ``ok``
    to each 4 bytes read. Blocking sockets in a thread: OpenSSL then sends its alert on a refused
    certificate, as a broker does (asyncio's server drops the connection without it). A refused client
    is read until it closes, which spares it a reset."""
    with tls_server(materials, reset=False) as port:
        yield port


@pytest.fixture
def resetting_server(materials: SecurityFiles) -> Iterator[int]:
    """The same server, but a refused client's connection is reset right after the alert (what a broker
    that closes with the client's bytes unread does: the rest of its handshake, or its first request)."""
    with tls_server(materials, reset=True) as port:
        yield port


@contextlib.contextmanager
def tls_server(materials: SecurityFiles, *, reset: bool) -> Iterator[int]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(materials.certificate("broker"), materials.key("broker"))
    context.load_verify_locations(materials.ca)
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(10)
            tls = context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            with tls, contextlib.suppress(OSError):
                try:
                    tls.do_handshake()
                except ssl.SSLError:  # a refused client: the alert is sent
                    if reset:  # linger 0: the close is a reset, whatever the client sent
                        tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        continue
                    socket.socket.shutdown(tls, socket.SHUT_WR)
                    while socket.socket.recv(tls, 4096):
                        pass
                    continue
                while tls.recv(4):
                    tls.sendall(b"ok")

    thread = threading.Thread(target=serve, name="tls-server", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        thread.join()
        listener.close()


def client_files(materials: SecurityFiles, where: Path, *, expired: bool) -> tuple[Path, Path]:
    where.mkdir(exist_ok=True)
    certificate, key = where / "sink.crt", where / "sink.key"
    issue_client_certificate(materials, "sink", certificate, key, expired=expired)
    return certificate, key


def context_for(materials: SecurityFiles, certificate: Path, key: Path) -> ClientTLS:
    return ClientTLS.create(
        ca=materials.ca, certificate=certificate, key=key, key_password=None, check_hostname=True
    )


async def exchange(context: ssl.SSLContext, port: int) -> str:
    """One new connection: 'ok' when the server answered, else the error the client met."""
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost"
        )
    except (OSError, ssl.SSLError) as exc:
        return f"handshake: {exc}"
    try:
        writer.write(b"ping")
        await writer.drain()
        return (await reader.readexactly(2)).decode()
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
        return f"read: {exc!r}"
    finally:
        writer.close()


def replace(source: tuple[Path, Path], target: tuple[Path, Path]) -> None:
    """As a Secret volume updates: the new files swapped in whole (new inodes)."""
    for new, old in zip(source, target, strict=True):
        staged = old.with_suffix(".new")
        shutil.copyfile(new, staged)
        os.replace(staged, old)


async def test_an_expired_certificate_is_told_in_words_and_its_renewal_used_by_the_next_connection(
    materials: SecurityFiles, server: int, tmp_path: Path
) -> None:
    pair = client_files(materials, tmp_path, expired=True)
    renewed = client_files(materials, tmp_path / "renewed", expired=False)
    context = context_for(materials, *pair)
    told: list[str] = []
    context.on_refused(told.append)
    assert (await exchange(context, port=server)).startswith("read:")  # TLS 1.3: the alert comes at the read
    assert len(told) == 1
    assert "the brokers refuse this client's certificate: expired" in told[0]
    assert "(TLS alert certificate expired)" in told[0]
    replace(renewed, pair)
    assert await exchange(context, port=server) == "ok"  # the same context: the renewed pair
    assert len(told) == 1


async def test_a_certificate_of_another_ca_is_told_as_unknown(
    materials: SecurityFiles, foreign: SecurityFiles, server: int
) -> None:
    context = context_for(materials, foreign.certificate("sink"), foreign.key("sink"))
    told: list[str] = []
    context.on_refused(told.append)
    assert (await exchange(context, port=server)).startswith("read:")
    assert told
    assert "do not trust the CA that signed this client's certificate" in told[0]


async def test_a_broker_this_client_does_not_trust_is_told_at_the_handshake(
    materials: SecurityFiles, foreign: SecurityFiles, server: int
) -> None:
    context = ClientTLS.create(
        ca=foreign.ca,
        certificate=materials.certificate("sink"),
        key=materials.key("sink"),
        key_password=None,
        check_hostname=True,
    )
    told: list[str] = []
    context.on_refused(told.append)
    assert (await exchange(context, port=server)).startswith("handshake:")
    assert told
    assert told[0].startswith("this client does not trust the brokers' certificate")


async def test_a_renewal_that_keeps_the_files_stamps_is_read_at_the_retry_after_a_refusal(
    materials: SecurityFiles, server: int, tmp_path: Path
) -> None:
    """Size, inode and modification time unchanged (written in place, times kept, as ``cp -p``
    does): only the refusal tells the context to read the files again."""
    pair = client_files(materials, tmp_path, expired=True)
    renewed = client_files(materials, tmp_path / "renewed", expired=False)
    for path in pair:  # room for the renewed text: text after the PEM block is ignored
        path.write_bytes(path.read_bytes() + b"\n" * 64)
    context = context_for(materials, *pair)
    assert (await exchange(context, port=server)).startswith("read:")
    for new, old in zip(renewed, pair, strict=True):
        before = old.stat()
        text = new.read_bytes()
        old.write_bytes(text + b"\n" * (before.st_size - len(text)))
        os.utime(old, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = old.stat()
        assert (after.st_size, after.st_ino, after.st_mtime_ns) == (
            before.st_size,
            before.st_ino,
            before.st_mtime_ns,
        )
    assert await exchange(context, port=server) == "ok"


async def test_a_pair_caught_half_written_is_not_used_and_is_tried_again(
    materials: SecurityFiles, server: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pair = client_files(materials, tmp_path, expired=False)
    renewed = client_files(materials, tmp_path / "renewed", expired=False)
    context = context_for(materials, *pair)
    replace((renewed[0], pair[1]), pair)  # the certificate renewed, its key not yet
    with caplog.at_level(logging.WARNING, "kubetape.kafka"):
        assert await exchange(context, port=server) == "ok"  # still the pair loaded before
        assert await exchange(context, port=server) == "ok"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once per state of the files, not per connection
    assert f"cannot load the Kafka client certificate {pair[0]}" in warnings[0]
    replace(renewed, pair)
    assert context.refresh()
    assert await exchange(context, port=server) == "ok"


def test_the_refusal_message_names_the_brokers_the_file_its_dates_and_what_to_do(
    materials: SecurityFiles, tmp_path: Path
) -> None:
    certificate, key = client_files(materials, tmp_path, expired=True)
    security = KafkaSecurity(
        protocol="SSL", ca_location=materials.ca, certificate_location=certificate, key_location=key
    )
    settings = KafkaSettings("localhost:9094", security=security)
    words = refusal_words(
        ssl.SSLError(1, "[SSL: SSLV3_ALERT_CERTIFICATE_EXPIRED] sslv3 alert certificate expired")
    )
    assert words is not None
    text = tls_message(settings, words)
    assert text.startswith("Kafka at localhost:9094 (SSL, client certificate")
    assert "the brokers refuse this client's certificate: expired" in text
    assert f"into ssl.certificate.location {certificate} and its key into ssl.key.location {key}" in text
    assert "picked up without a restart" in text
    assert certificate_validity(certificate).endswith(": expired")
    assert f"that file now holds a certificate {certificate_validity(certificate)}" in text


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ssl.SSLError(1, "[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca"), "unknown CA"),
        (
            ssl.SSLError(1, "[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate"),
            "bad certificate",
        ),
        (ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] alert"), "sent none"),
        (ssl.SSLError(1, "[SSL: SSLV3_ALERT_CERTIFICATE_REVOKED] alert"), "revoked"),
        (ssl.SSLError(1, "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC] bad mac"), None),
        (ssl.SSLWantReadError(), None),
        (ssl.SSLEOFError(), None),
        (ConnectionResetError(), None),
    ],
)
def test_only_certificate_alerts_and_untrusted_brokers_are_refusals(
    error: BaseException, expected: str | None
) -> None:
    words = refusal_words(error)
    assert (words is None) if expected is None else (words is not None and expected in words)


def test_a_tls_refusal_is_one_error_until_its_reason_changes_and_ends_when_accepted(
    materials: SecurityFiles, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The message tells the certificate file's dates as they are at each retry: a renewal the brokers
    still refuse for the same reason is no new outage to tell; another reason is."""
    certificate, key = client_files(materials, tmp_path, expired=True)
    security = KafkaSecurity(
        protocol="SSL", ca_location=materials.ca, certificate_location=certificate, key_location=key
    )
    log = logging.getLogger("test.tls.access")
    access = BrokerAccess(KafkaSettings("localhost:9094", security=security), log, "the sink's consumer")
    expired = "the brokers refuse this client's certificate: expired (TLS alert certificate expired)"
    unknown = "the brokers do not trust the CA that signed this client's certificate (TLS alert unknown ca)"
    with caplog.at_level(logging.INFO, "test.tls.access"):
        access.refused_login("waiting", expired)
        client_files(materials, tmp_path, expired=False)  # renewed: the file's dates change
        access.refused_login("waiting", expired)
        assert [access.ok, access.login_refused] == [False, True]
        access.refused_login("waiting", unknown)  # renewed, but by another CA: told again
        access.accepted()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert "the sink's consumer: Kafka at localhost:9094" in errors[0]
    assert ": expired. Not ready" in errors[0]
    assert "unknown ca" in errors[1]
    assert ": valid now. Not ready" in errors[1]
    assert access.ok
    assert any("accepts" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


async def test_the_hook_reaches_the_context_of_an_aiokafka_client(materials: SecurityFiles) -> None:
    security = KafkaSecurity(
        protocol="SSL",
        ca_location=materials.ca,
        certificate_location=materials.certificate("sink"),
        key_location=materials.key("sink"),
    )
    consumer = AIOKafkaConsumer(**connection(KafkaSettings("localhost:9", security=security)))  # no network
    told: list[str] = []
    on_tls_refused(consumer, told.append)
    context = consumer._client._ssl_context
    assert isinstance(context, ClientTLS)
    context.met(ssl.SSLError(1, "[SSL: SSLV3_ALERT_CERTIFICATE_EXPIRED] sslv3 alert certificate expired"))
    context.met(ssl.SSLWantReadError())  # asyncio's flow control: not a refusal
    assert len(told) == 1
    assert "expired" in told[0]
    on_tls_refused(object(), told.append)  # a test's stand-in: nothing to hook
    await consumer.stop()


class _FakeClient:
    """What an aiokafka consumer or producer is to the sink's member here: started, stopped, and the
    client holding the TLS context its connections use."""

    def __init__(self, context: ClientTLS, batches: list[dict[object, list[object]]]) -> None:
        self._client = SimpleNamespace(_ssl_context=context)
        self.client = self._client
        self._batches = batches
        self.started = self.stopped = 0
        self.subscribed: list[str] = []

    async def start(self) -> None:
        self.started += 1

    async def stop(self) -> None:
        self.stopped += 1

    def subscribe(self, *, topics: list[str], listener: object) -> None:
        self.subscribed += topics

    async def getmany(self, *, timeout_ms: int, max_records: int) -> dict[object, list[object]]:
        return self._batches.pop(0) if self._batches else {}


async def test_the_sinks_member_is_not_ready_while_its_certificate_is_refused_and_joins_again_once_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sink's side over stand-in clients: a refused handshake on its consumer's connection makes
    it not ready with what TLS said; while the brokers still refuse the certificate it consumes nothing;
    once they take it (the renewed files) it joins again with new clients, built with the files as they
    are now, and a message read makes it ready."""
    from aiokafka import TopicPartition
    from aiokafka.structs import ConsumerRecord

    import pipeline.io.kafka.sink_member as member_module
    from pipeline.io.kafka.sink_member import KafkaSinkSource

    context = ClientTLS.create(ca=None, certificate=None, key=None, key_password=None, check_hostname=True)
    record = ConsumerRecord("kubetape.events", 0, 7, 0, 0, b"k", b"v", None, 1, 1, ())
    consumers = [
        _FakeClient(context, []),
        _FakeClient(context, [{TopicPartition("kubetape.events", 0): [record]}]),
    ]
    made = iter(consumers)
    monkeypatch.setattr(member_module, "new_consumer", lambda *_a, **_k: next(made))
    monkeypatch.setattr(member_module, "new_producer", lambda _s: _FakeClient(context, []))
    answers = iter(["refused", None])  # the one-connection check: still refused, then taken

    async def check(_settings: KafkaSettings) -> str | None:
        return next(answers)

    monkeypatch.setattr(member_module, "refusal", check)
    sleeps: list[float] = []

    async def no_wait(delay: float) -> None:
        sleeps.append(delay)

    monkeypatch.setattr(asyncio, "sleep", no_wait)  # the member waits out its backoff with it
    source = KafkaSinkSource(KafkaSettings("localhost:9094"), "kubetape.events")
    await source.start()
    context.met(ssl.SSLError(1, "[SSL: SSLV3_ALERT_CERTIFICATE_EXPIRED] sslv3 alert certificate expired"))
    assert await source.getmany(1000, 100) == []  # refused: not ready, nothing read
    assert source.access.error is not None
    assert "refuses the TLS connection" in str(source.access.error)
    assert "(TLS alert certificate expired)" in str(source.access.error)
    assert consumers[0].stopped == 0
    context.met(ssl.SSLError(1, "[SSL: SSLV3_ALERT_CERTIFICATE_EXPIRED] sslv3 alert certificate expired"))
    assert await source.getmany(1000, 100) == []  # taken now: joins again with a new consumer
    assert consumers[0].stopped == 1
    assert consumers[1].started == 1
    assert consumers[1].subscribed == ["kubetape.events"]
    assert source.access.error is not None  # not ready until the brokers are seen to deliver
    batches = await source.getmany(1000, 100)
    assert [b.partition for b in batches] == [0]
    assert source.access.ok
    assert sleeps == sorted(sleeps)  # the retries' delays grow
    await source.stop()


async def test_a_refusal_followed_by_a_reset_is_read_by_a_connection_that_sends_nothing(
    materials: SecurityFiles, resetting_server: int, tmp_path: Path
) -> None:
    """The diagnosis's race (see pipeline.io.kafka.diagnose): a broker that resets the connection right
    after its alert. A client that writes at once loses the alert whenever its write meets the reset;
    the connection that writes nothing reads it every time, before the reset."""
    certificate, key = client_files(materials, tmp_path / "expired", expired=True)
    context = context_for(materials, certificate, key)
    said = [await certificate_refusal("localhost", resetting_server, context, 60, 60) for _ in range(20)]
    assert all(words is not None and "refuse this client's certificate" in words for words in said), said


async def test_a_certificate_the_broker_takes_is_no_refusal_and_tls_1_2_is_judged_in_the_handshake(
    materials: SecurityFiles, resetting_server: int, tmp_path: Path
) -> None:
    good = context_for(materials, *client_files(materials, tmp_path / "good", expired=False))
    assert await certificate_refusal("localhost", resetting_server, good, 60, 60) is None  # its ticket
    old = context_for(materials, *client_files(materials, tmp_path / "expired", expired=True))
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    words = await certificate_refusal("localhost", resetting_server, old, 60, 60)
    assert words is not None
    assert "refuse this client's certificate" in words


async def test_the_start_time_diagnosis_names_a_refused_certificate_despite_the_reset(
    materials: SecurityFiles, resetting_server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diagnose, "CERTIFICATE_VERDICT_S", 60.0)  # a loaded machine's server is slow
    certificate, key = client_files(materials, tmp_path / "expired", expired=True)
    security = KafkaSecurity(
        protocol="SSL", ca_location=materials.ca, certificate_location=certificate, key_location=key
    )
    problem = await refusal(KafkaSettings(f"localhost:{resetting_server}", security=security))
    assert problem is not None
    assert problem.startswith("the TLS handshake failed: the brokers refuse this client's certificate")
    assert f"ssl.certificate.location {certificate}" in problem
