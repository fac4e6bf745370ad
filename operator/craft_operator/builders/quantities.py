"""Kubernetes resource quantities, parsed just enough to compare requests with limits."""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from craft_operator.api.base import scaled_quantity
from craft_operator.api.constants import is_extended_resource

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
    """The numeric value of a quantity (``500m`` -> 0.5, ``2Gi`` -> 2147483648), as
    Kubernetes reads it: to the nano, a finer one rounded up (``0.9999999999`` -> 1).

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
            # A zero is zero whatever its exponent (0e999): only a nonzero one is too large.
            if parsed and parsed.adjusted() > LARGEST.adjusted() + 1:
                raise ValueError(f"{value!r} is larger than Kubernetes allows (2^63-1)")
            parsed = scaled_quantity(parsed, _SUFFIXES[suffix or ""])
        except InvalidOperation:
            raise ValueError(f"{value!r} is not a Kubernetes quantity") from None
    if abs(parsed) > LARGEST:
        raise ValueError(f"{value!r} is larger than Kubernetes allows (2^63-1)")
    return parsed


_BINARY = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))
_DECIMAL = tuple(
    (suffix, Decimal(10) ** exponent)
    for suffix, exponent in (
        ("E", 18),
        ("P", 15),
        ("T", 12),
        ("G", 9),
        ("M", 6),
        ("k", 3),
        ("", 0),
        ("m", -3),
        ("u", -6),
        ("n", -9),
    )
)


def canonical_quantity(value: str, *, by_value: bool = False) -> str:
    """The quantity as the API server stores it (``0.5`` -> ``500m``, ``2048Mi`` -> ``2Gi``,
    ``1000m`` -> ``1``): a binary suffix stays binary where the value allows, else the
    largest decimal suffix whose number is whole (``1e3`` too, which the server keeps as
    written: equal values still compare equal). Text that is no quantity is returned as it
    is; a value finer than a nano is first rounded up to one, as Kubernetes reads it; see
    :func:`canonical_resources` for pod resources (rounded up to thousandths).

    ``by_value``: one form per value, however it was spelled (``4294967296`` and ``4Gi``
    are both ``4Gi``, ``2000M`` and ``1953125Ki`` both ``2G``): the shorter of its binary
    and decimal forms, binary on a tie. It is still a form the API server stores as
    written, so a pod built with it reads back the same.
    """
    try:
        parsed = parse_quantity(value)
    except ValueError:
        return value
    if parsed == 0:
        return "0"
    decimal = _decimal_form(parsed)
    binary = _binary_form(parsed)
    if by_value:
        forms = [form for form in (binary, decimal) if form is not None]
        return min(forms, key=len) if forms else value
    match = _QUANTITY.match(value.strip())
    if match and (match.group(2) or "").endswith("i") and binary is not None:
        return binary
    return decimal or value


def _binary_form(parsed: Decimal) -> str | None:
    """A whole value of at least 1024 with the largest binary suffix it is a multiple of
    (as a plain integer if none); None for other values."""
    if abs(parsed) < 1024 or parsed != parsed.to_integral_value():
        return None
    whole = int(parsed)
    for suffix, exponent in _BINARY:
        if whole % (1 << exponent) == 0:
            return f"{whole >> exponent}{suffix}"
    return str(whole)


def _decimal_form(parsed: Decimal) -> str | None:
    """The value with the largest decimal suffix whose number is whole; None if finer than
    a nano."""
    for suffix, unit in _DECIMAL:
        number = parsed / unit
        if number == number.to_integral_value():
            return f"{int(number)}{suffix}"
    return None


def canonical_resources(
    resources: dict[str, dict[str, str]], *, by_value: bool = False
) -> dict[str, dict[str, str]]:
    """``resources`` (requests and limits) with every quantity in canonical form, rounded
    up to whole thousandths, as the API server stores it (CPU ``250n`` -> ``1m``);
    ``by_value``: one form per value (see :func:`canonical_quantity`)."""
    return {
        kind: {
            name: _canonical(quantity, by_value=by_value) for name, quantity in quantities.items()
        }
        for kind, quantities in resources.items()
    }


def _canonical(quantity: str, *, by_value: bool) -> str:
    # Every resource: the API server's defaulting rounds each one up to milli scale.
    try:
        parsed = parse_quantity(quantity)
    except ValueError:
        return quantity
    thousandths = (parsed * 1000).to_integral_value(rounding=ROUND_CEILING)
    if thousandths != parsed * 1000:
        return canonical_quantity(f"{thousandths}m", by_value=by_value)
    return canonical_quantity(quantity, by_value=by_value)


def overcommit_problem(resource: str, request: str | None, limit: str | None) -> str | None:
    """What the pod API refuses of a resource it never overcommits (an extended resource
    such as ``nvidia.com/gpu``, or ``hugepages-*``), said before any pod is made: a
    request without a limit, a request other than its limit, a fraction of a device, part
    of a huge page. ``None``: nothing."""
    extended = is_extended_resource(resource) and not resource.startswith("requests.")
    if not (extended or resource.startswith("hugepages-")):
        return None
    if limit is None:
        return (
            f"resources.limits.{resource} must be set: Kubernetes never overcommits "
            f"{resource}, so a request alone is refused (the limit alone is enough)"
        )
    if request is not None and parse_quantity(request) != parse_quantity(limit):
        return (
            f"resources.requests.{resource} ({request}) must equal resources.limits."
            f"{resource} ({limit}): Kubernetes never overcommits it"
        )
    if extended and parse_quantity(limit) != parse_quantity(limit).to_integral_value():
        return f"resources.limits.{resource} ({limit}) must be a whole number of devices"
    if not extended:
        return _huge_pages_problem(resource, limit)
    return None


def _huge_pages_problem(resource: str, limit: str) -> str | None:
    """What the pod API refuses of a hugepages ``limit`` (its request being equal): a page
    size that is no whole number of bytes above 0, a value (rounded up to a whole byte)
    that is no multiple of it."""
    try:
        page = parse_quantity(resource.removeprefix("hugepages-"))
    except ValueError:
        page = Decimal(0)
    if page <= 0 or page != page.to_integral_value():
        return f"{resource} names no page size: it must be a whole number of bytes above 0"
    if parse_quantity(limit).to_integral_value(rounding=ROUND_CEILING) % page:
        return (
            f"resources.limits.{resource} ({limit}) must be a whole number of pages, "
            f"a multiple of {canonical_quantity(str(int(page)), by_value=True)}"
        )
    return None
