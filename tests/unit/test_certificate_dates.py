"""The strict DER reader of a certificate's dates: it reads what openssl writes (UTCTime and
GeneralizedTime, a chain, a key beside the certificate) as openssl reads it, round-trips every time RFC
5280 allows, and meets damaged or hostile input (cut short, bytes changed, lengths that lie, forms DER
forbids, a huge file) with a CertificateDatesError naming the file, never another exception."""

from __future__ import annotations

import base64
import contextlib
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pipeline.io.kafka.certificate_dates import (
    MAX_PEM_BYTES,
    CertificateDatesError,
    Validity,
    read_validity,
    validity_of_der,
    validity_of_pem,
)
from pipeline.io.kafka.tls import certificate_validity


def _openssl(*args: str) -> str:
    # the reference the reader is checked against, as the stack's own certificates need it: never a skip
    openssl = shutil.which("openssl")
    assert openssl is not None, "openssl is not on PATH: scripts/bootstrap.sh --for-tests installs it"
    return subprocess.run([openssl, *args], check=True, capture_output=True, text=True).stdout


def _self_signed(directory: Path, days: int) -> tuple[Path, Path]:
    """``x509 -req`` (not ``req -x509``, which refuses a negative number of days) as the stack does."""
    certificate, key, request = (directory / f"{name}{days}.pem" for name in ("cert", "key", "csr"))
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(request), "-subj", "/CN=kubetape-test",
    )  # fmt: skip
    signed = ["-signkey", str(key), "-out", str(certificate), "-days", str(days)]
    _openssl("x509", "-req", "-in", str(request), *signed)
    return certificate, key


def _openssl_dates(certificate: Path) -> Validity:
    """openssl's own reading, the reference: ``notBefore=Nov 27 08:00:00 2026 GMT``."""
    lines = dict(
        line.split("=", 1)
        for line in _openssl("x509", "-in", str(certificate), "-noout", "-dates").split("\n")
        if line
    )
    read = {k: datetime.strptime(v, "%b %d %H:%M:%S %Y %Z").replace(tzinfo=UTC) for k, v in lines.items()}
    return Validity(read["notBefore"], read["notAfter"])


def _der(certificate: Path) -> bytes:
    text = certificate.read_bytes()
    body = text.split(b"-----BEGIN CERTIFICATE-----")[1].split(b"-----END CERTIFICATE-----")[0]
    return base64.b64decode(b"".join(body.split()))


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[Path, Path]]:
    """Certificates openssl made: for 10 years (UTCTime), 40,000 days (notAfter past 2049: a
    GeneralizedTime) and -1 day (expired: notAfter a day before notBefore, as the stack makes one)."""
    directory = tmp_path_factory.mktemp("dates")
    return {days: _self_signed(directory, days) for days in (3650, 40000, -1)}


# --- what openssl writes ------------------------------------------------------------------------


@pytest.mark.parametrize("days", [3650, 40000, -1])
def test_the_dates_are_those_openssl_reads(made: dict[int, tuple[Path, Path]], days: int) -> None:
    certificate, _ = made[days]
    assert read_validity(certificate) == _openssl_dates(certificate)


def test_a_chain_gives_its_first_certificate_and_a_key_before_it_is_passed_over(
    made: dict[int, tuple[Path, Path]], tmp_path: Path
) -> None:
    leaf, key = made[-1]
    other, _ = made[40000]
    chain = tmp_path / "chain.pem"
    chain.write_bytes(key.read_bytes() + leaf.read_bytes().replace(b"\n", b"\r\n") + other.read_bytes())
    assert read_validity(chain) == _openssl_dates(leaf)


def test_the_message_says_expired_not_yet_valid_or_valid_now(made: dict[int, tuple[Path, Path]]) -> None:
    certificate, _ = made[3650]
    dates = _openssl_dates(certificate)
    before, during, after = (
        dates.not_before - timedelta(seconds=1),
        dates.not_before,
        dates.not_after + timedelta(seconds=1),
    )
    assert certificate_validity(certificate, before).endswith(": not yet valid")
    assert certificate_validity(certificate, during).endswith(": valid now")
    assert certificate_validity(certificate, after).endswith(": expired")
    text = certificate_validity(certificate, during)
    assert text.startswith(f"valid from {dates.not_before:%Y-%m-%d %H:%M:%S} UTC until ")
    assert certificate_validity(made[-1][0]).endswith(": expired")


def test_a_file_that_is_no_certificate_leaves_the_dates_out(tmp_path: Path) -> None:
    (tmp_path / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    assert certificate_validity(tmp_path / "key.pem") == ""
    assert certificate_validity(tmp_path / "missing.pem") == ""


# --- every time RFC 5280 allows, against a naive encoder ------------------------------------------


def _tlv(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def _certificate(not_before: bytes, not_after: bytes, *, version: bool = True) -> bytes:
    """A certificate's skeleton: the fields before the validity, with empty algorithm and names (the
    reader goes no further than the validity, and checks the rest only for size)."""
    fields = [
        _tlv(0xA0, _tlv(0x02, b"\x02")) if version else b"",
        _tlv(0x02, b"\x01\x02"),
        _tlv(0x30, b""),
        _tlv(0x30, _tlv(0x31, b"")),
        _tlv(0x30, not_before + not_after),
        _tlv(0x30, b""),
        _tlv(0x30, b"k" * 300),  # a long form length in the signed part
    ]
    return _tlv(0x30, _tlv(0x30, b"".join(fields)) + _tlv(0x30, b"") + _tlv(0x03, b"\x00sig"))


def _utc_time(moment: datetime) -> bytes:
    return _tlv(0x17, moment.strftime("%y%m%d%H%M%SZ").encode())


def _generalized_time(moment: datetime) -> bytes:
    return _tlv(0x18, f"{moment.year:04d}{moment:%m%d%H%M%S}Z".encode())


_MOMENTS = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)).map(
    lambda moment: moment.replace(microsecond=0, tzinfo=UTC)
)
_UTC_MOMENTS = st.datetimes(min_value=datetime(1950, 1, 1), max_value=datetime(2049, 12, 31, 23, 59, 59)).map(
    lambda moment: moment.replace(microsecond=0, tzinfo=UTC)
)


@given(_UTC_MOMENTS, _MOMENTS, st.booleans())
@example(datetime(1950, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), True)
@example(datetime(2049, 12, 31, 23, 59, 59, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC), False)
def test_every_time_rfc_5280_allows_is_read_back(
    not_before: datetime, not_after: datetime, version: bool
) -> None:
    der = _certificate(_utc_time(not_before), _generalized_time(not_after), version=version)
    assert validity_of_der(der, "x") == Validity(not_before, not_after)


# --- damaged and hostile input --------------------------------------------------------------------

_GOOD = _certificate(
    _utc_time(datetime(2026, 11, 27, tzinfo=UTC)), _utc_time(datetime(2036, 11, 25, tzinfo=UTC))
)


def test_every_cut_of_a_certificate_is_refused() -> None:
    for size in range(len(_GOOD)):
        with pytest.raises(CertificateDatesError, match=r"^cut: not a DER X\.509 certificate"):
            validity_of_der(_GOOD[:size], "cut")


@given(st.binary(max_size=400))
def test_any_bytes_are_read_or_refused_with_the_reason(data: bytes) -> None:
    with contextlib.suppress(CertificateDatesError):
        validity_of_der(data, "fuzz")


@given(st.data())
def test_a_certificate_with_bytes_changed_inserted_or_removed_is_read_or_refused(data: st.DataObject) -> None:
    at = data.draw(st.integers(0, len(_GOOD) - 1))
    change = data.draw(st.sampled_from(["replace", "insert", "remove"]))
    byte = bytes([data.draw(st.integers(0, 255))])
    damaged = {
        "replace": _GOOD[:at] + byte + _GOOD[at + 1 :],
        "insert": _GOOD[:at] + byte + _GOOD[at:],
        "remove": _GOOD[:at] + _GOOD[at + 1 :],
    }[change]
    try:
        validity = validity_of_der(damaged, "damaged")
    except CertificateDatesError:
        return
    assert isinstance(validity.not_before, datetime)


@pytest.mark.parametrize(
    ("der", "problem"),
    [
        (b"\x30\x80" + _GOOD[2:], "indefinite length"),
        (b"\x30\x82\x00\x05" + b"\x00" * 5, "not in its shortest form"),
        (b"\x30\x81\x05" + b"\x00" * 5, "not in its shortest form"),
        (b"\x30\x85\x01\x00\x00\x00\x00", "length of 5 bytes"),
        (b"\x30\x84\xff\xff\xff\xff" + _GOOD, "claims 4294967295 bytes"),
        (_GOOD + b"\x00", "1 bytes follow the certificate"),
        (b"\x31\x00", "tag 0x31 where 0x30 belongs"),
        (b"\x1f\x81\x00", "tag 0x1f"),
    ],
)
def test_forms_der_forbids_and_lengths_that_lie_are_refused(der: bytes, problem: str) -> None:
    with pytest.raises(CertificateDatesError, match=problem):
        validity_of_der(der, "hostile")


@pytest.mark.parametrize(
    ("time", "problem"),
    [
        (_tlv(0x17, b"2611270000Z"), "not an RFC 5280 UTCTime"),  # no seconds
        (_tlv(0x17, b"261127000000"), "not an RFC 5280 UTCTime"),  # no Z
        (_tlv(0x17, b"261127000000+0000"), "not an RFC 5280 UTCTime"),
        (_tlv(0x18, b"20261127000000.5Z"), "not an RFC 5280 GeneralizedTime"),
        (_tlv(0x18, b"2026112700000\xd9Z"), "not an RFC 5280 GeneralizedTime"),
        (_tlv(0x17, b"260230000000Z"), "260230000000Z is not a date and time"),
        (_tlv(0x17, b"261127240000Z"), "is not a date and time"),
        (_tlv(0x18, b"00001127000000Z"), "is not a date and time"),
        (_tlv(0x13, b"261127000000Z"), "notBefore has tag 0x13"),
    ],
)
def test_times_not_in_rfc_5280s_forms_are_refused(time: bytes, problem: str) -> None:
    with pytest.raises(CertificateDatesError, match=problem):
        validity_of_der(_certificate(time, _utc_time(datetime(2030, 1, 1, tzinfo=UTC))), "times")


def test_a_validity_of_three_times_is_refused() -> None:
    one = _utc_time(datetime(2030, 1, 1, tzinfo=UTC))
    with pytest.raises(CertificateDatesError, match="more than notBefore and notAfter"):
        validity_of_der(_certificate(one, one + one), "three")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"", "holds no PEM certificate"),
        (b"-----BEGIN CERTIFICATE-----\nMIIB\n", "has no line -----END CERTIFICATE-----"),
        (b"-----BEGIN CERTIFICATE-----\nMI*B\n-----END CERTIFICATE-----\n", "not base64"),
        (
            b"-----BEGIN CERTIFICATE-----\nMIIBAA==\n-----END CERTIFICATE-----\n",
            "claims 256 bytes where 0 remain",
        ),
    ],
)
def test_pem_text_that_holds_no_readable_certificate_is_refused(text: bytes, problem: str) -> None:
    with pytest.raises(CertificateDatesError, match=problem):
        validity_of_pem(text, "pem")


def test_a_pem_file_is_read_from_its_text() -> None:
    text = b"junk\n-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(_GOOD) + b"-----END CERTIFICATE-----\n"
    assert validity_of_pem(text, "pem").not_after == datetime(2036, 11, 25, tzinfo=UTC)


def test_a_file_larger_than_any_certificate_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    huge = tmp_path / "huge.pem"
    with huge.open("wb") as file:
        file.truncate(1 << 34)  # sparse: 16 GiB that would not fit in memory
    with pytest.raises(CertificateDatesError, match=f"larger than {MAX_PEM_BYTES} bytes"):
        read_validity(huge)
