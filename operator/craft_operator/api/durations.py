"""Kubernetes-style durations (``30m``, ``1h30m``, ``720h``) as a pydantic type.

The same grammar as Go's ``time.ParseDuration`` minus negative values, so the strings that
pass the CRD schema are exactly the ones CEL's ``duration()`` accepts at admission.
A duration read back from the API server (the ``STORED`` context) may be any the CRDs
before the parts were capped admitted: see :func:`parse_stored_duration`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from fractions import Fraction
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, ValidationInfo, WithJsonSchema

from craft_operator.api.stored import storing

_UNIT_NANOSECONDS: dict[str, int] = {
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_PART = r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)"
#: The most digits before the point, per unit: each part stays below 100000h, so that no
#: duration of :data:`MAX_DURATION_LENGTH` characters exceeds Go's range (about 2562047h),
#: where CEL's ``duration()`` would fail with a type-conversion error instead of the rule's
#: message.
_MAX_DIGITS = {"h": 5, "m": 6, "s": 8, "ms": 11, "us|µs": 14, "ns": 17}
_CAPPED_PART = "|".join(
    rf"[0-9]{{1,{digits}}}(?:\.[0-9]+)?(?:{unit})" for unit, digits in _MAX_DIGITS.items()
)
DURATION_PATTERN = rf"^(?:{_CAPPED_PART})+$"
#: What a duration looks like, for messages.
_CAPS = [f"{digits} in {unit.split('|')[0]}" for unit, digits in _MAX_DIGITS.items()]
DURATION_FORMAT_HINT = (
    "a number and a unit, e.g. 30m, 1h or 720h (units: ns, us, ms, s, m, h; a part's whole "
    f"number has at most {_CAPS[0].replace(' in', ' digits in')}, {', '.join(_CAPS[1:])})"
)
_PART_RE = re.compile(_PART)
_WHOLE_RE = re.compile(DURATION_PATTERN)
MAX_DURATION_LENGTH = 32
#: The grammar of the CRDs before 2026-11-27 (fc0cd74): no cap on a part's digits. They
#: admitted any such string that CEL's ``duration()`` read, i.e. within Go's range.
_UNCAPPED_RE = re.compile(rf"^(?:{_PART})+$")
#: The longest Go duration, in nanoseconds (about 2562047h).
_GO_MAX_NANOSECONDS = 2**63 - 1


def parse_duration(text: str) -> timedelta:
    """Parse a Go-style duration string such as ``1h30m`` into a :class:`timedelta`."""
    if (
        not isinstance(text, str)
        or len(text) > MAX_DURATION_LENGTH
        or not _WHOLE_RE.fullmatch(text)
    ):
        raise ValueError(f"{text!r} is not a duration; use {DURATION_FORMAT_HINT}")
    return _exact_timedelta(_nanoseconds(text), text)


def parse_stored_duration(text: str) -> timedelta:
    """Parse a duration the API server already holds: one that the CRDs of any version
    admitted, so also a part longer than :data:`DURATION_PATTERN` allows (``100000h``,
    ``1000000m``), as long as the whole is within Go's range, where CEL's ``duration()``
    read it. An older operator ran such an object; an upgrade must not fail it."""
    if (
        not isinstance(text, str)
        or len(text) > MAX_DURATION_LENGTH
        or not _UNCAPPED_RE.fullmatch(text)
    ):
        raise ValueError(f"{text!r} is not a duration; use {DURATION_FORMAT_HINT}")
    nanoseconds = _nanoseconds(text)
    if nanoseconds > _GO_MAX_NANOSECONDS:
        raise ValueError(
            f"{text!r} is longer than the longest duration Kubernetes reads (about 2562047h)"
        )
    return _exact_timedelta(nanoseconds, text)


def _nanoseconds(text: str) -> Fraction:
    # Exact, not a float: 99999h0.1s is 0.1s more than 99999h, not 0.100000024s.
    return sum(
        (Fraction(value) * _UNIT_NANOSECONDS[unit] for value, unit in _PART_RE.findall(text)),
        Fraction(0),
    )


def _exact_timedelta(nanoseconds: Fraction, shown: str) -> timedelta:
    """``nanoseconds`` to the nearest microsecond (half to even, as :class:`timedelta` rounds)."""
    try:
        return timedelta(microseconds=round(nanoseconds / 1000))
    except OverflowError:
        raise ValueError(f"{shown!r} is longer than any duration the operator handles") from None


def _timedelta(seconds: float, shown: object) -> timedelta:
    # pydantic reports ValueError as a validation error; OverflowError would escape as a crash.
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"{shown!r} is longer than any duration the operator handles") from None


#: The most one part of :data:`DURATION_PATTERN` holds, per unit :func:`format_duration` writes.
_UNITS = ("h", "m", "s", "ms", "us")
_MAX_PART = {unit: 10 ** _MAX_DIGITS["us|µs" if unit == "us" else unit] - 1 for unit in _UNITS}
_MAX_PART_HOURS: int = _MAX_PART["h"]
_MICROSECONDS = {unit: _UNIT_NANOSECONDS[unit] // 1000 for unit in _UNITS}
#: Where a part with a fraction may leave the rest to smaller units.
_CUTS: dict[str, tuple[str, ...]] = {"h": ("m", "s"), "m": ("s",), "s": ("ms",), "ms": (), "us": ()}
#: The most digits an exact decimal part has: 9us is 0.0000000025h (1/(2**10 * 5**8)).
_MOST_FRACTION_DIGITS = 10


def format_duration(value: timedelta) -> str:
    """Render a :class:`timedelta` exactly, to the microsecond, in the usual Kubernetes-style
    form (``1h30m``, ``45s``, ``0.25s``) in parts :data:`DURATION_PATTERN` admits: hours beyond
    99999h in more than one part (``199998h`` is ``99999h99999h``), which Go's
    ``time.ParseDuration`` adds up. When that form is longer than
    :data:`MAX_DURATION_LENGTH`, the shortest form the CRD admits instead (a part of minutes or
    seconds beyond 59, a sub-second rest in a part of its own: ``99999h99999h99999h99999h999999m``
    rather than ``...99999h16666h39m``); if it finds none, the usual form (too long to send).
    It tries only some forms: a string the CRD admits whose value it writes in none is sent
    as given (:class:`_AsGiven`)."""
    if value < timedelta(0):
        return "-" + format_duration(-value)
    microseconds = (value.days * 86400 + value.seconds) * 10**6 + value.microseconds
    usual = _usual_form(microseconds)
    if len(usual) <= MAX_DURATION_LENGTH:
        return usual
    shortest = min(_compact_forms(microseconds), key=len, default=usual)
    return shortest if len(shortest) <= MAX_DURATION_LENGTH else usual


def _usual_form(microseconds: int) -> str:
    hours, rest = divmod(microseconds, _MICROSECONDS["h"])
    minutes, rest = divmod(rest, _MICROSECONDS["m"])
    full_parts, last_part = divmod(hours, _MAX_PART_HOURS)
    text = f"{_MAX_PART_HOURS}h" * full_parts + _unit(last_part, "h") + _unit(minutes, "m")
    return text + _decimal_seconds(rest) or "0s"


def _compact_forms(microseconds: int) -> Iterator[str]:
    """Ways to write ``microseconds`` in parts the CRD admits, among them the shortest: full
    99999h parts, then at most one part of each unit, the last with a fraction if that is
    exact (``99999.5h``, ``1299.01572s``, ``1s1us`` rather than ``1.000001s``)."""
    full_hours = _MAX_PART_HOURS * _MICROSECONDS["h"]
    most_full_parts = min(microseconds // full_hours, MAX_DURATION_LENGTH // len("99999h"))
    # After one full part fewer, the rest is more than 99999h; after two fewer, it is more
    # than the rest's parts hold (99999h, 999999m and 99999999.999999s).
    for full_parts in range(most_full_parts, max(most_full_parts - 2, -1), -1):
        for rest in _rest_forms(microseconds - full_parts * full_hours, _UNITS):
            yield f"{_MAX_PART_HOURS}h" * full_parts + rest


def _rest_forms(microseconds: int, units: tuple[str, ...]) -> Iterator[str]:
    """``microseconds`` in at most one part of each of ``units`` (largest first)."""
    if not microseconds:
        yield ""
        return
    unit, smaller = units[0], units[1:]
    decimal = _decimal(microseconds, unit)
    if decimal and unit == "s":  # the usual form of a rest in seconds (0.25s, not 250ms)
        yield decimal
    if smaller:
        for kept in _part_candidates(microseconds // _MICROSECONDS[unit], unit):
            for rest in _rest_forms(microseconds - kept * _MICROSECONDS[unit], smaller):
                yield _unit(kept, unit) + rest
    if decimal and unit != "s":
        yield decimal
    # A fraction of this unit, and the rest it cannot say exactly in a part of its own:
    # 99999.812h6us, 8.2s88us, and below a power of ten of microseconds: 4581.068h99us.
    cuts = {microseconds % _MICROSECONDS[smaller_unit] for smaller_unit in _CUTS[unit]}
    cuts |= {
        microseconds % 10**digits for digits in range(1, 7) if 10**digits < _MICROSECONDS[unit]
    }
    for cut in cuts - {0}:
        fraction_part = _decimal(microseconds - cut, unit)
        if fraction_part:
            yield fraction_part + min(_rest_forms(cut, smaller), key=len)


def _part_candidates(total: int, unit: str) -> Iterator[int]:
    """What one part may keep of ``total`` (the rest going to smaller units), largest first:
    for each number of digits the most it can hold, and nothing. For a given number of digits
    in this part, keeping more never makes the smaller units' parts longer. Below a minute,
    a smaller unit takes 3 digits more for the same time: the part keeps all it can or none."""
    most = _MAX_PART[unit]
    for digits in range(len(str(most)), 0, -1) if unit in ("h", "m") else ():
        yield min(total, 10**digits - 1)
    yield from (min(total, most), 0)


def _decimal(microseconds: int, unit: str) -> str | None:
    """``microseconds`` as one part in ``unit`` (``1.5h``), if a decimal says it exactly and
    the part's whole number has at most the digits :data:`DURATION_PATTERN` allows."""
    value = Fraction(microseconds, _MICROSECONDS[unit])
    if value >= _MAX_PART[unit] + 1:
        return None
    for digits in range(_MOST_FRACTION_DIGITS + 1):
        scaled = value * 10**digits
        if scaled.denominator == 1:
            whole, fraction = divmod(scaled.numerator, 10**digits)
            # The fewest digits that are exact: the last is never 0.
            return f"{whole}.{fraction:0{digits}d}{unit}" if digits else f"{whole}{unit}"
    return None


def _unit(count: int, unit: str) -> str:
    return f"{count}{unit}" if count else ""


def _decimal_seconds(microseconds: int) -> str:
    if not microseconds:
        return ""
    seconds, fraction = divmod(microseconds, _MICROSECONDS["s"])
    # Fixed-point, not :g, which writes 1e-06 for a microsecond.
    return f"{seconds}.{fraction:06d}".rstrip("0").rstrip(".") + "s"


class _AsGiven(timedelta):
    """A duration given as a string that :func:`format_duration` cannot write in 32
    characters, though the string itself has them (one finer than a microsecond,
    ``99999h99999h99999h458.999999999h``, whose value rounded to the microsecond has no
    form that short): sent as given, which the CRD checks as :func:`parse_duration` did."""

    text: str

    def __new__(cls, value: timedelta, text: str) -> _AsGiven:
        """``value``, remembered as ``text``."""
        given = super().__new__(cls, value.days, value.seconds, value.microseconds)
        given.text = text
        return given

    def __reduce__(self) -> tuple[Any, ...]:
        return _AsGiven, (timedelta(self.days, self.seconds, self.microseconds), self.text)


def _coerce(value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, timedelta):
        parsed = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        parsed = _timedelta(value, value)
    elif storing(info):
        parsed = parse_duration(value)
        return (
            parsed
            if len(format_duration(parsed)) <= MAX_DURATION_LENGTH
            else _AsGiven(parsed, value)
        )
    else:
        return parse_stored_duration(value)
    return _writable(parsed) if storing(info) else parsed


def _serialize(value: timedelta) -> str:
    return value.text if isinstance(value, _AsGiven) else format_duration(value)


def _writable(value: timedelta) -> timedelta:
    """``value``, if the CRD admits it as :func:`format_duration` writes it (the model sends
    that form); else ``ValueError``, said here rather than by the API server's 422."""
    text = format_duration(value)
    if len(text) > MAX_DURATION_LENGTH:
        parts = MAX_DURATION_LENGTH // len(f"{_MAX_PART_HOURS}h")
        raise ValueError(
            f"{text[:MAX_DURATION_LENGTH]}... is longer than the {MAX_DURATION_LENGTH} "
            f"characters of a duration (each part at most {_MAX_PART_HOURS}h: about "
            f"{_MAX_PART_HOURS * parts}h in all)"
        )
    return value


Duration = Annotated[
    timedelta,
    BeforeValidator(_coerce),
    PlainSerializer(_serialize, return_type=str),
    # No schema ``pattern``: a pattern failure does not stop the API server from running the
    # field's CEL rules, whose duration() call would then fail with a second, cryptic error.
    # Each duration field checks its format in CEL instead (models.duration_rules).
    WithJsonSchema({"type": "string", "maxLength": MAX_DURATION_LENGTH}),
]
"""A duration field: a string like ``30m`` on the wire, a :class:`timedelta` in Python."""
