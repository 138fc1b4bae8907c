"""What a segment decoder accepts before it inflates a body or rebuilds its delta rows (a guard against
decompression bombs, and against delta tables that rebuild to far more than the file holds)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import zstandard

from pipeline.model.errors import ConfigError, FormatError

MAX_BODY_BYTES = 1 << 31
"""The hard ceiling of :class:`DecodeLimits` (the body length field is a u32)."""
DEFAULT_MAX_INFLATED_BYTES = 1 << 30
"""Default of :attr:`DecodeLimits.max_inflated_bytes` (1 GiB; env ``KUBETAPE_MAX_INFLATED_BYTES``)."""
DEFAULT_MAX_INFLATE_RATIO = 1000
"""Default of :attr:`DecodeLimits.max_ratio` (env ``KUBETAPE_MAX_INFLATE_RATIO``). kubetape bodies
inflate 3-30x (events), up to ~150x (keyframes of near-identical objects); a zstd bomb ~10^5x."""
RATIO_FLOOR_BYTES = 1 << 20
"""Sizes up to this are not held to :attr:`DecodeLimits.max_ratio`: a file of a few hundred bytes may
well hold a few hundred KB of events, and that much costs no reader anything."""


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """What a decoder accepts before it inflates a body: checked on the zstd frame header alone, so a
    crafted file (a "decompression bomb": a few KB declaring gigabytes) is refused before any memory is
    allocated for it.

    ``max_inflated_bytes``: the largest decompressed body (default 1 GiB, at most 2 GiB);
    ``max_ratio``: the largest decompressed/compressed size ratio (default 1000). A body whose frame does
    not declare its size is refused (kubetape always writes it). Both hold for what a format-3 body's
    delta tables rebuild as well, taken against the file's size (:meth:`check_rebuilt`). Every reader of
    segments and kubetape
    traces goes through :func:`~.decode.decode_segment` (``kubetape inspect``,
    ``replay --trace FILE|URL``, a Simulation's ``traceURL``, export, the sink's restore), so these
    limits hold for all of them.
    :meth:`from_env` reads ``KUBETAPE_MAX_INFLATED_BYTES`` and ``KUBETAPE_MAX_INFLATE_RATIO`` to raise
    them for an exceptional trace."""

    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES
    max_ratio: int = DEFAULT_MAX_INFLATE_RATIO

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DecodeLimits:
        """The limits with the environment's overrides (invalid values raise ConfigError)."""
        import os

        env = os.environ if environ is None else environ

        def read(name: str, default: int, ceiling: int) -> int:
            text = env.get(name)
            if text is None or not text.strip():
                return default
            try:
                value = int(text.strip())
            except ValueError:
                raise ConfigError(f"${name}={text!r}: expected a whole number") from None
            if not 1 <= value <= ceiling:
                raise ConfigError(f"${name}={value}: must be between 1 and {ceiling}")
            return value

        return cls(
            read("KUBETAPE_MAX_INFLATED_BYTES", DEFAULT_MAX_INFLATED_BYTES, MAX_BODY_BYTES),
            read("KUBETAPE_MAX_INFLATE_RATIO", DEFAULT_MAX_INFLATE_RATIO, 1 << 30),
        )

    def check(self, body: bytes, source: str) -> int:
        """The declared decompressed size of the zstd frame ``body``; FormatError if it breaks a limit."""
        try:
            declared = zstandard.frame_content_size(body)
        except zstandard.ZstdError as exc:
            raise FormatError(f"{source}: undecodable body (not a zstd frame: {exc})") from None
        if declared < 0:
            raise FormatError(f"{source}: the body does not declare its decompressed size; refused")
        if declared > min(self.max_inflated_bytes, MAX_BODY_BYTES):
            raise FormatError(
                f"{source}: the body would inflate to {declared} bytes, over the limit of "
                f"{self.max_inflated_bytes} (raise $KUBETAPE_MAX_INFLATED_BYTES for a trace this large)"
            )
        if declared > max(len(body), 1) * self.max_ratio and declared > RATIO_FLOOR_BYTES:
            raise FormatError(
                f"{source}: the body would inflate {declared // max(len(body), 1)}x ({len(body)} -> "
                f"{declared} bytes), over the limit of {self.max_ratio}x: a crafted file? (raise "
                "$KUBETAPE_MAX_INFLATE_RATIO if it is a genuine trace)"
            )
        return int(declared)

    def rebuild_budget(self, file_size: int) -> int:
        """The most bytes a reader rebuilds from a file of ``file_size`` bytes: the limits of
        :meth:`check`, taken against the whole file."""
        return min(self.max_inflated_bytes, max(file_size * self.max_ratio, RATIO_FLOOR_BYTES))

    def check_rebuilt(self, declared: int, file_size: int, source: str) -> int:
        """The rebuild budget of a file of ``file_size`` bytes whose header declares that its events and
        keyframe rebuild to ``declared`` bytes; FormatError if the declaration is over it.

        A format-3 body rebuilds its events from delta rows, and a row that repeats its base costs a
        few bytes in the file whatever the base's size: the zstd limits of :meth:`check` see only the
        small table (a 325-byte file of 2,000 rows repeating a 100 KB object rebuilt to 200 MB and
        peaked at 785 MiB). So the declaration is checked against the file's size before anything is
        built, and the decoder stops at the declared bytes whatever the rows say."""
        budget = self.rebuild_budget(file_size)
        if declared <= budget:
            return budget
        if declared > self.max_inflated_bytes:
            raise FormatError(
                f"{source}: the header declares events and keyframe of {declared} bytes once rebuilt, "
                f"over the limit of {self.max_inflated_bytes} (raise $KUBETAPE_MAX_INFLATED_BYTES for "
                "a trace this large)"
            )
        raise FormatError(
            f"{source}: the header declares events and keyframe of {declared} bytes once rebuilt, "
            f"{declared // max(file_size, 1)}x the file's {file_size} bytes, over the limit of "
            f"{self.max_ratio}x: a crafted file? (raise $KUBETAPE_MAX_INFLATE_RATIO if it is a genuine "
            "trace)"
        )


_limits_from_env: DecodeLimits | None = None


def default_limits() -> DecodeLimits:
    """:meth:`DecodeLimits.from_env`, read once per process."""
    global _limits_from_env  # noqa: PLW0603 - a per-process cache of the environment
    if _limits_from_env is None:
        _limits_from_env = DecodeLimits.from_env()
    return _limits_from_env
