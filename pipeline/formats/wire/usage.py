"""The wire encoding of usage samples on ``kubetape.usage``: a msgpack map, :meth:`UsageSample.to_wire`
plus the version ``"v"``, so a reader refuses a later layout by name instead of misreading it."""

from __future__ import annotations

import msgpack

from pipeline.model.errors import FormatError, UnknownVersionError
from pipeline.model.usage import UsageSample, usage_from_wire

USAGE_WIRE_VERSION = 1
USAGE_MAX_BYTES = 64 * 1024
"""A sample holds at most 64 containers with short names: more bytes than this is not a sample, and is
refused before it is unpacked."""


def encode_usage(sample: UsageSample) -> bytes:
    packed: bytes = msgpack.packb({"v": USAGE_WIRE_VERSION, **sample.to_wire()}, use_bin_type=True)
    return packed


def decode_usage(data: bytes, where: str) -> UsageSample:
    """The sample in ``data``; FormatError (UnknownVersionError for another version) names ``where``."""
    if len(data) > USAGE_MAX_BYTES:
        raise FormatError(f"{where}: usage sample of {len(data)} bytes exceeds {USAGE_MAX_BYTES}")
    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated classes for bad bytes
        raise FormatError(f"{where}: usage sample is not msgpack ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{where}: usage sample is a {type(doc).__name__}, not a map")
    version = doc.pop("v", None)
    if version != USAGE_WIRE_VERSION or type(version) is not int:
        raise UnknownVersionError(
            f"{where}: usage wire version {version!r} is not supported (this build reads version "
            f"{USAGE_WIRE_VERSION}); upgrade kubetape to read it"
        )
    try:
        return usage_from_wire(doc)
    except FormatError as exc:
        raise FormatError(f"{where}: {exc}") from None
