"""A certificate's validity dates, read from its PEM file by a small strict DER reader.

Why the dates: a Kafka broker refuses an expired client certificate with the TLS alert *certificate
unknown*, not *certificate expired* (checked on the stack's broker), so the file's own dates are what
tells the user that it expired. Why a reader of our own: the standard library decodes a certificate
only through a private helper (``ssl._ssl._test_decode_cert``), and the ``cryptography`` package would
be a compiled dependency for two dates.

The validity is the fifth field of a certificate's signed part (RFC 5280 §4.1)::

    Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber INTEGER,
                               signature SEQUENCE, issuer SEQUENCE, validity SEQUENCE {
                               notBefore Time, notAfter Time }, ... }, ... }

so the reader walks the DER encoding (X.690) down to it and goes no further. It is strict, because
it reads whatever file a user points ``ssl.certificate.location`` at: the file's size is checked before
it is read, every length against the bytes that remain, only DER's definite lengths in their shortest
form are taken, and the times must have RFC 5280's exact forms (``YYMMDDHHMMSSZ``, ``YYYYMMDDHHMMSSZ``)
and be real dates. Anything else is a :class:`CertificateDatesError` saying what and where; no other
exception leaves :func:`read_validity` but ``OSError`` for a file that cannot be read.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

# A certificate chain with its key is a few KiB; a file far larger is not a client certificate.
MAX_PEM_BYTES = 1 << 20

_BEGIN = b"-----BEGIN CERTIFICATE-----"
_END = b"-----END CERTIFICATE-----"

_SEQUENCE = 0x30
_INTEGER = 0x02
_VERSION = 0xA0  # [0] EXPLICIT, constructed
_UTC_TIME = 0x17
_GENERALIZED_TIME = 0x18
_TIME_FORMS = {
    _UTC_TIME: re.compile(rb"[0-9]{12}Z"),
    _GENERALIZED_TIME: re.compile(rb"[0-9]{14}Z"),
}
_TIME_NAMES = {_UTC_TIME: "UTCTime YYMMDDHHMMSSZ", _GENERALIZED_TIME: "GeneralizedTime YYYYMMDDHHMMSSZ"}


class CertificateDatesError(ValueError):
    """The text is not a certificate whose dates this reader can read; the message says what and where."""


@dataclass(frozen=True)
class Validity:
    """A certificate's ``notBefore`` and ``notAfter``, both inclusive (RFC 5280 §4.1.2.5), in UTC."""

    not_before: datetime
    not_after: datetime

    def state(self, now: datetime) -> str:
        """``expired``, ``not yet valid`` or ``valid now`` at ``now`` (aware)."""
        if now > self.not_after:
            return "expired"
        if now < self.not_before:
            return "not yet valid"
        return "valid now"


def read_validity(path: Path) -> Validity:
    """The validity of the first certificate in the PEM file ``path`` (the client's own one in a chain).
    Raises :class:`CertificateDatesError`, or ``OSError`` when the file cannot be read."""
    with path.open("rb") as file:
        pem = file.read(MAX_PEM_BYTES + 1)
    if len(pem) > MAX_PEM_BYTES:
        raise CertificateDatesError(
            f"{path}: larger than {MAX_PEM_BYTES} bytes, which no client certificate file is; point "
            "ssl.certificate.location at the PEM file of the client's certificate"
        )
    return validity_of_pem(pem, str(path))


def validity_of_pem(pem: bytes, where: str) -> Validity:
    """The validity of the first ``CERTIFICATE`` block of ``pem``; ``where`` names it in errors."""
    begin = pem.find(_BEGIN)
    if begin < 0:
        raise CertificateDatesError(f"{where}: holds no PEM certificate (no line {_BEGIN.decode()})")
    end = pem.find(_END, begin)
    if end < 0:
        raise CertificateDatesError(f"{where}: its first certificate has no line {_END.decode()}")
    body = b"".join(pem[begin + len(_BEGIN) : end].split())
    try:
        der = base64.b64decode(body, validate=True)
    except binascii.Error as exc:
        raise CertificateDatesError(
            f"{where}: its first certificate is not base64 ({exc}); the file is damaged"
        ) from None
    return validity_of_der(der, where)


def validity_of_der(der: bytes, where: str) -> Validity:
    """The validity of the DER-encoded certificate ``der``; ``where`` names it in errors."""
    reader = _Reader(der, where)
    _, start, end = reader.element(0, len(der), {_SEQUENCE}, "the certificate")
    if end != len(der):
        reader.fail(end, f"{len(der) - end} bytes follow the certificate")
    _, at, signed_end = reader.element(start, end, {_SEQUENCE}, "the certificate's signed part")
    tag, _, after = reader.element(at, signed_end, {_VERSION, _INTEGER}, "the version or serial number")
    if tag == _VERSION:
        _, _, after = reader.element(after, signed_end, {_INTEGER}, "the serial number")
    _, _, after = reader.element(after, signed_end, {_SEQUENCE}, "the signature algorithm")
    _, _, after = reader.element(after, signed_end, {_SEQUENCE}, "the issuer")
    _, at, validity_end = reader.element(after, signed_end, {_SEQUENCE}, "the validity")
    not_before, at = reader.time(at, validity_end, "notBefore")
    not_after, at = reader.time(at, validity_end, "notAfter")
    if at != validity_end:
        reader.fail(at, "the validity holds more than notBefore and notAfter")
    return Validity(not_before, not_after)


class _Reader:
    """Reads DER elements of ``data``; every error names ``where`` and the byte offset."""

    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.where = where

    def fail(self, at: int, problem: str) -> NoReturn:
        raise CertificateDatesError(
            f"{self.where}: not a DER X.509 certificate whose dates can be read: {problem} (at byte {at}); "
            "check it with `openssl x509 -in FILE -noout -dates`"
        )

    def element(self, at: int, end: int, tags: set[int], what: str) -> tuple[int, int, int]:
        """The element at ``at`` within ``[at, end)``: its tag, content start and content end."""
        data = self.data
        if end - at < 2:
            self.fail(at, f"{what} is missing or cut short")
        tag, first = data[at], data[at + 1]
        if tag not in tags:
            expected = " or ".join(f"0x{t:02x}" for t in sorted(tags))
            self.fail(at, f"{what} has tag 0x{tag:02x} where {expected} belongs")
        start = at + 2
        if first < 0x80:
            length = first
        elif first == 0x80:
            self.fail(at, f"{what} has an indefinite length, which DER forbids")
        else:
            count = first & 0x7F
            if count > 4:  # a length of 2**32 bytes or more: no certificate is that long
                self.fail(at, f"{what} has a length of {count} bytes")
            start += count
            if start > end:
                self.fail(at, f"{what}'s length is cut short")
            length = int.from_bytes(data[at + 2 : start], "big")
            if length < 0x80 or data[at + 2] == 0:
                self.fail(at, f"{what}'s length {length} is not in its shortest form, which DER requires")
        if length > end - start:
            self.fail(at, f"{what} claims {length} bytes where {end - start} remain")
        return tag, start, start + length

    def time(self, at: int, end: int, what: str) -> tuple[datetime, int]:
        """The UTCTime or GeneralizedTime at ``at``, and where the next element starts."""
        tag, start, after = self.element(at, end, {_UTC_TIME, _GENERALIZED_TIME}, what)
        text = self.data[start:after]
        if _TIME_FORMS[tag].fullmatch(text) is None:
            self.fail(at, f"{what} {text[:20]!r} is not an RFC 5280 {_TIME_NAMES[tag]}")
        digits = text[:-1].decode("ascii")
        if tag == _UTC_TIME:  # RFC 5280 §4.1.2.5.1: YY below 50 is 20YY, else 19YY
            year = int(digits[:2])
            digits = f"{year + (2000 if year < 50 else 1900)}{digits[2:]}"
        month, day, hour, minute, second = (int(digits[i : i + 2]) for i in range(4, 14, 2))
        try:  # fixed-width fields sliced, not strptime, which takes one-digit months and days
            moment = datetime(int(digits[:4]), month, day, hour, minute, second, tzinfo=UTC)
        except ValueError:
            self.fail(at, f"{what} {text.decode('ascii')} is not a date and time")
        return moment, after
