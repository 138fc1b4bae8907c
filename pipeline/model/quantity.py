"""Kubernetes resource quantities read exactly (``"180m"``, ``"123456789n"``, ``"64Mi"``, ``"1.5"``).

The Metrics API reports CPU in nanocores (``"180012345n"``) and memory in KiB (``"65536Ki"``): reading
them as floats would lose digits on large owners. :func:`parse_quantity` gives a Decimal, and
:func:`cpu_millicores` / :func:`memory_bytes` round once, at the unit kubetape stores.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

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


def parse_quantity(value: object) -> Decimal:
    """A quantity as an exact number; FormatError says why ``value`` is not one."""
    if not isinstance(value, str) or len(value) > QUANTITY_MAX_CHARS:
        raise FormatError(f"quantity {str(value)[:QUANTITY_MAX_CHARS]!r} is not a Kubernetes quantity string")
    match = _QUANTITY.match(value.strip())
    if match is None or (match.group(3) or "") not in _SUFFIX:
        raise FormatError(f"quantity {value!r} is not a Kubernetes quantity (e.g. 250m, 1.5, 64Mi)")
    try:
        if match.group(2):  # decimal exponent form, as in 1e3
            return Decimal(match.group(1) + match.group(2))
        return Decimal(match.group(1)) * _SUFFIX[match.group(3) or ""]
    except InvalidOperation:
        raise FormatError(f"quantity {value!r} is not a number") from None


def cpu_millicores(value: Decimal) -> int:
    """CPU cores as whole millicores (half to even, as Kubernetes rounds)."""
    return int((value * 1000).to_integral_value(ROUND_HALF_EVEN))


def memory_bytes(value: Decimal) -> int:
    """Memory as whole bytes (half to even)."""
    return int(value.to_integral_value(ROUND_HALF_EVEN))
