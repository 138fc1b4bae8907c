"""The one grammar of times and durations: what people write reads as they mean it, what kubetape writes
reads back to the same value, and anything else is refused with where and how to write it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.model.errors import ConfigError
from pipeline.model.timespec import (
    check_time,
    format_duration,
    format_time,
    parse_duration,
    parse_go_duration,
    parse_time,
)

NOW = 1_795_255_200_000  # 2026-11-21T10:00:00Z
MS = st.integers(min_value=0, max_value=10**13)  # to year 2286
EPOCH_MS = st.integers(min_value=0, max_value=253_402_300_799_999)  # to 9999-12-31T23:59:59.999Z


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("10m", 600),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("1.5s", 1.5),
        ("2m0s", 120),
        ("7d", 604_800),
        ("1d12h", 129_600),
        ("0s", 0),
        (" 5m ", 300),
    ],
)
def test_durations_read_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text, "--window") == seconds


@pytest.mark.parametrize(
    "text", ["", "10", "ten minutes", "1h 30m", "1h-3m", "-5m", "5w", ".5s", "1.s", "1e3s"]
)
def test_a_duration_without_units_or_with_stray_text_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(
        ConfigError, match=r"^spec\.duration: .* is not a duration; write it like 90s, 10m or 1h30m"
    ):
        parse_duration(text, "spec.duration")


def test_a_duration_too_long_to_count_is_refused() -> None:
    with pytest.raises(ConfigError, match="too long a duration"):
        parse_duration("9" * 400 + "d", "--retention")


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("250ms", 0.25), ("2m0s", 120.0)]
)
def test_go_durations_parse(text: str, seconds: float) -> None:
    assert parse_go_duration(text, "x") == seconds


@pytest.mark.parametrize("text", ["", "30", "thirty seconds", "5d", "1h 30m"])
def test_go_durations_have_no_days_and_say_where_and_how(text: str) -> None:
    """Karpenter (Go) refuses days, so a NodePool value with days is refused before it gets there."""
    with pytest.raises(ConfigError, match=r"NodePool p: .* Go duration syntax"):
        parse_go_duration(text, "NodePool p")


@given(MS)
def test_a_written_duration_reads_back_to_the_same_milliseconds(ms: int) -> None:
    text = format_duration(ms / 1000)
    assert parse_duration(text) == ms / 1000
    assert parse_go_duration(text, "x") == ms / 1000  # hours, never days: Go reads it too


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["ms", "s", "m", "h", "d"])), min_size=1))
def test_parts_add_up_in_any_order(parts: list[tuple[int, str]]) -> None:
    unit_ms = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    text = "".join(f"{n}{unit}" for n, unit in parts)
    assert parse_duration(text) == sum(n * unit_ms[unit] for n, unit in parts) / 1000


@given(st.text(max_size=30))
def test_any_text_is_a_duration_or_a_config_error(text: str) -> None:
    try:
        seconds: float | None = parse_duration(text, "--x")
        message = ""
    except ConfigError as exc:
        seconds, message = None, str(exc)
    assert message.startswith("--x: ") if seconds is None else seconds >= 0


@pytest.mark.parametrize(
    ("text", "epoch_ms"),
    [
        ("now", NOW),
        ("-30m", NOW - 1_800_000),
        ("-1h30m", NOW - 5_400_000),
        ("-1.5s", NOW - 1_500),
        ("-2d", NOW - 172_800_000),
        ("1763700000000", 1_763_700_000_000),
        ("2026-11-21T10:00:00Z", NOW),
        ("2026-11-21T11:00:00+01:00", NOW),
        ("2026-11-21T10:00:00.123Z", NOW + 123),
    ],
)
def test_times_read_as_people_write_them(text: str, epoch_ms: int) -> None:
    assert parse_time(text, NOW, where="--from") == epoch_ms


@pytest.mark.parametrize("text", ["yesterday", "-30", "", "²", "-", "now-5m", "2026-13-01T00:00:00Z"])
def test_a_time_replay_cannot_read_is_refused_naming_the_flag_and_the_forms(text: str) -> None:
    with pytest.raises(
        ConfigError, match=r"^cannot read --from .* as a time: use now, a relative time like -30m"
    ):
        parse_time(text, NOW, where="--from")


def test_a_time_without_a_timezone_is_refused_rather_than_guessed() -> None:
    with pytest.raises(ConfigError, match=r"--to '2026-11-21T10:00:00' has no timezone; add Z or \+00:00"):
        parse_time("2026-11-21T10:00:00", NOW, where="--to")


@given(EPOCH_MS)
def test_a_written_time_reads_back_to_the_same_millisecond(epoch_ms: int) -> None:
    assert parse_time(format_time(epoch_ms), NOW) == epoch_ms
    assert parse_time(str(epoch_ms), NOW) == epoch_ms


@given(MS, EPOCH_MS)
def test_a_relative_time_is_its_duration_before_now(ms: int, now_ms: int) -> None:
    assert parse_time("-" + format_duration(ms / 1000), now_ms) == now_ms - ms


@given(st.text(max_size=30))
def test_any_text_is_a_time_or_a_config_error(text: str) -> None:
    message = "--to"
    try:
        parse_time(text, NOW, where="--to")
    except ConfigError as exc:
        message = str(exc)
    assert "--to" in message


def test_a_spec_keeps_its_times_as_written_for_the_replay_to_resolve() -> None:
    assert check_time(" -30m ", "spec.source.topic.from") == "-30m"
    with pytest.raises(ConfigError, match=r"spec\.source\.topic\.from"):
        check_time("soon", "spec.source.topic.from")


def test_format_duration_refuses_what_is_not_a_duration() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        format_duration(-1.0)
