"""Kubernetes-style durations (``30m``, ``1h30m``, ``720h``) as a pydantic type.

The same grammar as Go's ``time.ParseDuration`` minus negative values, so the strings that
pass the CRD schema are exactly the ones CEL's ``duration()`` accepts at admission.
A duration read back from the API server (the ``STORED`` context) may be any the CRDs
before the parts were capped admitted: see :func:`parse_stored_duration`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from fractions import Fraction
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, ValidationInfo, WithJsonSchema

from craft_operator.api.stored import storing

_UNIT_SECONDS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
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
_UNIT_NANOSECONDS = {unit: round(seconds * 1e9) for unit, seconds in _UNIT_SECONDS.items()}


def parse_duration(text: str) -> timedelta:
    """Parse a Go-style duration string such as ``1h30m`` into a :class:`timedelta`."""
    if (
        not isinstance(text, str)
        or len(text) > MAX_DURATION_LENGTH
        or not _WHOLE_RE.fullmatch(text)
    ):
        raise ValueError(f"{text!r} is not a duration; use {DURATION_FORMAT_HINT}")
    return _timedelta(_seconds(text), text)


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
    nanoseconds = sum(
        Fraction(value) * _UNIT_NANOSECONDS[unit] for value, unit in _PART_RE.findall(text)
    )
    if nanoseconds > _GO_MAX_NANOSECONDS:
        raise ValueError(
            f"{text!r} is longer than the longest duration Kubernetes reads (about 2562047h)"
        )
    return _timedelta(_seconds(text), text)


def _seconds(text: str) -> float:
    return sum(float(value) * _UNIT_SECONDS[unit] for value, unit in _PART_RE.findall(text))


def _timedelta(seconds: float, shown: object) -> timedelta:
    # pydantic reports ValueError as a validation error; OverflowError would escape as a crash.
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"{shown!r} is longer than any duration the operator handles") from None


#: The most hours one part of :data:`DURATION_PATTERN` holds (5 digits).
_MAX_PART_HOURS: int = 10 ** _MAX_DIGITS["h"] - 1


def format_duration(value: timedelta) -> str:
    """Render a :class:`timedelta` in the shortest Kubernetes-style form (``1h30m``, ``45s``),
    in parts :data:`DURATION_PATTERN` admits: hours beyond 99999h in more than one part
    (``199998h`` is ``99999h99999h``), which Go's ``time.ParseDuration`` adds up."""
    total = value.total_seconds()
    if total == 0:
        return "0s"
    if total < 0:
        return "-" + format_duration(-value)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    full_parts, last_part = divmod(int(hours), _MAX_PART_HOURS)
    text = f"{_MAX_PART_HOURS}h" * full_parts
    if last_part:
        text += f"{last_part}h"
    if minutes:
        text += f"{int(minutes)}m"
    if seconds:
        # Fixed-point, not :g, which writes 1e-06 for a microsecond.
        text += f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    return text


def _coerce(value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, timedelta):
        parsed = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        parsed = _timedelta(value, value)
    elif storing(info):
        parsed = parse_duration(value)
    else:
        return parse_stored_duration(value)
    return _writable(parsed) if storing(info) else parsed


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
    PlainSerializer(format_duration, return_type=str),
    # No schema ``pattern``: a pattern failure does not stop the API server from running the
    # field's CEL rules, whose duration() call would then fail with a second, cryptic error.
    # Each duration field checks its format in CEL instead (models.duration_rules).
    WithJsonSchema({"type": "string", "maxLength": MAX_DURATION_LENGTH}),
]
"""A duration field: a string like ``30m`` on the wire, a :class:`timedelta` in Python."""
