"""Kubernetes resource quantities, parsed just enough to compare requests with limits."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")


#: Kubernetes refuses any quantity whose magnitude is above 2^63-1.
LARGEST = Decimal(2**63 - 1)


def parse_quantity(value: int | str) -> Decimal:
    """The numeric value of a quantity (``500m`` -> 0.5, ``2Gi`` -> 2147483648).

    Raises ``ValueError`` for text that is no quantity, and for one larger than Kubernetes
    allows (``1e999999999`` would otherwise overflow the arithmetic itself).
    """
    if isinstance(value, int):
        parsed = Decimal(value)
    else:
        match = _QUANTITY.match(value.strip())
        if not match:
            raise ValueError(f"{value!r} is not a Kubernetes quantity")
        number, suffix = match.groups()
        try:
            parsed = Decimal(number)
            if parsed.adjusted() > LARGEST.adjusted() + 1:
                raise ValueError(f"{value!r} is larger than Kubernetes allows (2^63-1)")
            parsed *= _SUFFIXES[suffix or ""]
        except InvalidOperation:
            raise ValueError(f"{value!r} is not a Kubernetes quantity") from None
    if abs(parsed) > LARGEST:
        raise ValueError(f"{value!r} is larger than Kubernetes allows (2^63-1)")
    return parsed
