"""Kubernetes resource quantities read exactly (``"180m"``, ``"123456789n"``, ``"64Mi"``, ``"1.5"``).

The Metrics API reports CPU in nanocores (``"180012345n"``) and memory in KiB (``"65536Ki"``): reading
them as floats would lose digits on large owners. :func:`parse_quantity` gives a Decimal, and
:func:`cpu_millicores` / :func:`memory_bytes` round once, at the unit kubetape stores.

A quantity is at most :data:`QUANTITY_MAX` in magnitude, as Kubernetes itself holds them: a larger one
(``"1e1000000"``) is no reading of anything, and refused where it is parsed, since summing or rounding it
would overflow (or build an integer of a million digits that no message can print).
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal

from pipeline.model.errors import FormatError

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$")
_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
QUANTITY_MAX_CHARS = 64
"""Longer text is no quantity a Kubernetes component writes; refused before it is parsed."""
QUANTITY_MAX = Decimal(2**63 - 1)
"""The largest magnitude Kubernetes gives a quantity (its documented cap, 2^63-1)."""
_SCALE_MAX = 19
"""The largest power of ten (:meth:`Decimal.adjusted`) a number may have before its suffix applies: more
is beyond :data:`QUANTITY_MAX` whatever the suffix, and is refused before any arithmetic could overflow."""


def parse_quantity(value: object) -> Decimal:
    """A quantity as a finite number of magnitude at most :data:`QUANTITY_MAX`; FormatError says why
    ``value`` is not one, showing it cut to :data:`QUANTITY_MAX_CHARS` characters."""
    if not isinstance(value, str):
        # the type only: the text of an arbitrary value may be huge, or fail to be made at all
        raise FormatError(f"quantity of type {type(value).__name__} is not a Kubernetes quantity string")
    if len(value) > QUANTITY_MAX_CHARS:
        raise FormatError(
            f"quantity {value[:QUANTITY_MAX_CHARS]!r}... is longer than {QUANTITY_MAX_CHARS} characters"
        )
    match = _QUANTITY.match(value.strip())
    if match is None or (match.group(3) or "") not in _SUFFIX:
        raise FormatError(f"quantity {value!r} is not a Kubernetes quantity (e.g. 250m, 1.5, 64Mi)")
    try:
        number = Decimal(match.group(1) + (match.group(2) or ""))  # the exponent form, as in 1e3
        if number and number.adjusted() > _SCALE_MAX:  # zero is zero, whatever its exponent
            raise FormatError(f"quantity {value!r} exceeds the largest magnitude Kubernetes holds (2^63-1)")
        parsed = number * _SUFFIX[match.group(3) or ""]
    except ArithmeticError:  # InvalidOperation and its kin: an exponent too large for any Decimal
        raise FormatError(f"quantity {value!r} is not a number Kubernetes can hold") from None
    if not parsed.is_finite() or abs(parsed) > QUANTITY_MAX:
        raise FormatError(f"quantity {value!r} exceeds the largest magnitude Kubernetes holds (2^63-1)")
    return parsed


def cpu_millicores(value: Decimal) -> int:
    """CPU cores as whole millicores (half to even, as Kubernetes rounds)."""
    return int((value * 1000).to_integral_value(ROUND_HALF_EVEN))


def memory_bytes(value: Decimal) -> int:
    """Memory as whole bytes (half to even)."""
    return int(value.to_integral_value(ROUND_HALF_EVEN))
