"""Kubernetes quantities (pipeline.model.quantity): read exactly, and any text at all gives a finite number
within Kubernetes' own cap or the project's FormatError, never an exception of the arithmetic."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pipeline.model.errors import FormatError
from pipeline.model.quantity import (
    QUANTITY_MAX,
    QUANTITY_MAX_CHARS,
    cpu_millicores,
    memory_bytes,
    parse_quantity,
)

# text shaped like a quantity (sign, digits, point, exponent or suffix), so that the examples reach the
# arithmetic rather than stopping at the grammar
QUANTITY_LIKE = st.from_regex(r"\A[+-]?[0-9]{0,25}\.?[0-9]{0,25}([eE][+-]?[0-9]{1,30}|[numkMGTPEi]{0,2})\Z")


def _holds_or_refuses(text: str) -> None:
    try:
        value = parse_quantity(text)
    except FormatError:
        return
    assert isinstance(value, Decimal)
    assert value.is_finite()
    assert abs(value) <= QUANTITY_MAX
    # what the watcher does next with it: round to the stored units, and sum
    assert isinstance(cpu_millicores(value), int)
    assert isinstance(memory_bytes(value), int)
    assert (value + value + Decimal(0)).is_finite()


@given(st.text(max_size=80))
@example("1e1000000")
@example("1e999999")
@example("-1e999999")
@example("1e-1000000")
@example("0e999999")
@example("9" * QUANTITY_MAX_CHARS)
@example("8Ei")
def test_any_text_is_a_finite_quantity_or_a_format_error(text: str) -> None:
    _holds_or_refuses(text)


@given(QUANTITY_LIKE)
def test_any_quantity_shaped_text_is_a_finite_quantity_or_a_format_error(text: str) -> None:
    _holds_or_refuses(text)


@pytest.mark.parametrize("text", ["1e1000000", "1e999999", "-1e30", "8Ei", "1e19", "10000000000000000000"])
def test_a_quantity_beyond_kubernetes_cap_is_refused_naming_it(text: str) -> None:
    with pytest.raises(FormatError, match="largest magnitude") as raised:
        parse_quantity(text)
    assert repr(text) in str(raised.value)


def test_the_largest_quantities_kubernetes_holds_still_read() -> None:
    assert parse_quantity("7Ei") == 7 * 2**60
    assert parse_quantity(str(2**63 - 1)) == QUANTITY_MAX
    assert parse_quantity("0e999999") == 0
    assert cpu_millicores(parse_quantity("1e-999999")) == 0


def test_a_refused_value_is_shown_cut_short() -> None:
    with pytest.raises(FormatError) as raised:
        parse_quantity("1" * 10_000)
    assert len(str(raised.value)) < 2 * QUANTITY_MAX_CHARS
    with pytest.raises(FormatError, match="of type int"):
        parse_quantity(10**5000)  # a number whose text Python would refuse to make
